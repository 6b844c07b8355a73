"""A client of Tollgate's live notifications, the README's example: follows a tenant's job state changes over
the WebSocket API and resumes after a dropped connection from the last sequence number it handled, so it
misses nothing and sees nothing twice. It needs only the standard library and the `websockets` package."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Sequence
from typing import Any

from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import ClientConnection, connect


class LiveFeed:
    """Yields each ``job.state_changed`` message of the tenant (narrowed by ``job_ids`` and ``job_types`` if
    given) in sequence order, and each ``resync``: then read a fresh snapshot (GET /extraction-jobs) and go
    on, the feed continues after it. ``cursor`` is the last sequence handled: keep it to resume later."""

    def __init__(
        self,
        url: str,
        api_key: str,
        *,
        cursor: int | None = None,
        job_ids: Sequence[str] = (),
        job_types: Sequence[str] = (),
        reconnects: int = 10,
        reconnect_wait: float = 1.0,
    ) -> None:
        self.url = url
        self.cursor = cursor  # None: from now on
        self._headers = {"Authorization": f"Bearer {api_key}"}
        self._filters = {"job_ids": list(job_ids), "job_types": list(job_types)}
        self._reconnects = reconnects
        self._reconnect_wait = reconnect_wait
        self._closed = threading.Event()
        self.connection: ClientConnection | None = None
        self.subscribed = threading.Event()  # set once the first subscribe is answered

    def __iter__(self) -> Iterator[dict[str, Any]]:
        failures = 0
        while not self._closed.is_set():
            try:
                with connect(self.url, additional_headers=self._headers, compression=None) as connection:
                    self.connection = connection
                    subscribe = {"action": "subscribe", "cursor": self.cursor, **self._filters}
                    connection.send(json.dumps(subscribe))
                    for raw in connection:
                        message = json.loads(raw)
                        failures = 0
                        if message["type"] == "subscribed":
                            self.cursor = message["cursor"]
                            self.subscribed.set()
                        elif message["type"] == "job.state_changed":
                            self.cursor = message["sequence"]
                            yield message
                        elif message["type"] == "resync":
                            self.cursor = message["latest"]
                            yield message
                        else:  # an error: the server could not take what this client sent
                            raise RuntimeError(f"{message['title']}: {message['detail']}")
            except InvalidStatus:
                raise  # 401: the key is wrong or revoked; 429: the tenant's connections are at their cap
            except (ConnectionClosed, OSError):
                failures += 1
                if failures > self._reconnects:
                    raise
            if self._closed.wait(self._reconnect_wait * min(failures, 5)):
                return  # closed by this program; otherwise reconnect and resume after self.cursor

    def close(self) -> None:
        """Stops the feed (from any thread); iteration ends."""
        self._closed.set()
        if self.connection is not None:
            self.connection.close()


# The README's example: print each change of the tenant's jobs, resuming from `cursor` after a drop.
def follow(url: str, api_key: str, cursor: int | None = None) -> None:
    for message in LiveFeed(url, api_key, cursor=cursor):
        if message["type"] == "resync":
            print(f"missed too much: fetch GET /extraction-jobs, then go on from {message['latest']}")
        else:
            print(
                f"#{message['sequence']} {message['job_id']} {message['state']} (v{message['state_version']})"
            )
