"""A TCP gate on 127.0.0.1 in front of the AWS endpoint (moto): the API, the relay and the workers reach AWS
through it, so closing it makes AWS unreachable for them, as a network partition would.

moto itself stays up behind the gate, and so does what runs inside AWS: the Step Functions dispatcher keeps
invoking its Lambda, which in AWS never crosses the partition between our compute and the AWS APIs.
"""

from __future__ import annotations

import contextlib
import socket
import threading

_CHUNK = 64 * 1024


class Gate:
    def __init__(self, upstream_port: int, host: str = "127.0.0.1") -> None:
        self._upstream = (host, upstream_port)
        self._host = host
        self._port = 0
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self._open_sockets: set[socket.socket] = set()

    @property
    def url(self) -> str:
        return f"http://{self._host}:{self._port}"

    def open(self) -> Gate:
        """Starts (again) accepting on the same port."""
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((self._host, self._port))
        listener.listen(256)
        self._port = listener.getsockname()[1]
        with self._lock:
            self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), name="aws-gate", daemon=True).start()
        return self

    def close(self) -> None:
        """Refuses new connections and cuts the ones in flight: every caller sees AWS go away at once."""
        with self._lock:
            listener, self._listener = self._listener, None
            cut = list(self._open_sockets)
            self._open_sockets.clear()
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        for sock in cut:
            _close(sock)

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # closed
            try:
                upstream = socket.create_connection(self._upstream, timeout=5)
            except OSError:
                _close(client)
                continue
            upstream.settimeout(None)
            with self._lock:
                if self._listener is not listener:
                    _close(client)
                    _close(upstream)
                    return
                self._open_sockets.update((client, upstream))
            pumps = [2]
            for source, target in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, target, pumps), daemon=True).start()

    def _pump(self, source: socket.socket, target: socket.socket, pumps: list[int]) -> None:
        try:
            while data := source.recv(_CHUNK):
                target.sendall(data)
            # One side finished sending; the other may still be answering.
            target.shutdown(socket.SHUT_WR)
        except OSError:
            # A reset or a cut: end the other direction too, or its pump would wait forever.
            for sock in (source, target):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
        with self._lock:
            pumps[0] -= 1
            finished = pumps[0] == 0
            if finished:
                self._open_sockets.discard(source)
                self._open_sockets.discard(target)
        if finished:
            _close(source)
            _close(target)


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()
