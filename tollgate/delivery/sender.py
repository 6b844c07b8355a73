"""One webhook POST to a tenant's endpoint, safe against SSRF and against hostile receivers.

The URL is checked (``ssrf.check_url``) before anything is sent, and the connection goes to one of the
checked addresses, never through a second lookup. TLS verifies the certificate against the URL's host name
(also sent as SNI and Host). Redirects are reported, never followed; connect time, total time and response
size are capped. Whatever the target does, ``post`` returns a ``DeliveryResult`` instead of raising.
"""

from __future__ import annotations

import http.client
import io
import re
import socket
import ssl
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, cast

from tollgate.delivery.ssrf import (
    CheckedTarget,
    IPAddress,
    ResolutionFailed,
    Resolver,
    TargetRefused,
    check_url,
    system_resolver,
)

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

Connector = Callable[[IPAddress, int, float], socket.socket]
"""Opens a TCP connection to exactly this address and port within the timeout (seconds)."""

USER_AGENT = "Tollgate-Webhooks/1.0"
# Headers the sender owns: framing and routing must match what was checked and what is sent.
_RESERVED_HEADERS = frozenset({"host", "content-length", "transfer-encoding", "connection"})
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_SEND_CHUNK = 64 * 1024


class DeliveryError(StrEnum):
    """Why an attempt ended without a usable answer. Before ``request_sent`` (refused, DNS, connect, TLS
    handshake) the receiver cannot have seen the delivery; after it, it may have."""

    SSRF_REFUSED = "ssrf_refused"
    DNS_FAILED = "dns_failed"
    CONNECT_FAILED = "connect_failed"
    TIMEOUT = "timeout"
    TLS_ERROR = "tls_error"
    TOO_LARGE = "too_large"
    PROTOCOL_ERROR = "protocol_error"  # not HTTP, or the connection dropped mid-exchange


@dataclass(frozen=True)
class SenderLimits:
    connect_timeout: float = 5.0
    # Standard Webhooks recommends giving receivers 15 to 30 s.
    total_timeout: float = 15.0
    max_response_bytes: int = 64 * 1024


@dataclass(frozen=True)
class DeliveryResult:
    """What one attempt found out. ``status`` is set whenever a response status line arrived, even when an
    error (a timeout reading the body, an oversized body) ended the exchange afterwards."""

    status: int | None
    elapsed: float
    error: DeliveryError | None = None
    detail: str = ""
    headers: Mapping[str, str] = field(default_factory=dict)  # lower-case names
    body: bytes = b""  # at most max_response_bytes, for delivery logs
    address: str | None = None  # the checked IP the connection went to
    # Once any byte of the request left, the receiver may have acted on it even if the attempt failed.
    request_sent: bool = False

    @property
    def delivered(self) -> bool:
        return self.error is None and self.status is not None and 200 <= self.status < 300

    @property
    def retry_after(self) -> str | None:
        """The raw Retry-After header (delta-seconds or an HTTP date), for the retry schedule to parse."""
        return self.headers.get("retry-after")


def connect_tcp(address: IPAddress, port: int, timeout: float) -> socket.socket:
    """A TCP connection to a literal address: no name lookup can happen on this path."""
    family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        sock.connect((str(address), port))
        # Headers and body go out in one write, but TLS records and small bodies still should not wait
        # for delayed ACKs.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    except BaseException:
        sock.close()
        raise
    return sock


class WebhookSender:
    """Built once per process (it holds the TLS context) and reused for every attempt."""

    def __init__(
        self,
        *,
        allow_private_targets: bool = False,
        limits: SenderLimits | None = None,
        resolver: Resolver = system_resolver,
        connector: Connector = connect_tcp,
        ssl_context: ssl.SSLContext | None = None,
        user_agent: str = USER_AGENT,
    ) -> None:
        self.allow_private_targets = allow_private_targets
        self.limits = limits or SenderLimits()
        self._resolver = resolver
        self._connector = connector
        self._ssl_context = ssl_context or _default_ssl_context()
        self._user_agent = user_agent

    def post(self, url: str, body: bytes, headers: Mapping[str, str]) -> DeliveryResult:
        """POSTs ``body`` byte for byte. ``headers`` are the caller's (signature, Content-Type); a header
        the sender owns (Host, Content-Length, Connection, Transfer-Encoding) is a programming error."""
        started = time.monotonic()
        deadline = started + self.limits.total_timeout
        extra = _checked_headers(headers)
        try:
            target = check_url(url, allow_private_targets=self.allow_private_targets, resolver=self._resolver)
        except TargetRefused as exc:
            return DeliveryResult(None, time.monotonic() - started, DeliveryError.SSRF_REFUSED, exc.reason)
        except ResolutionFailed as exc:
            return DeliveryResult(None, time.monotonic() - started, DeliveryError.DNS_FAILED, str(exc))
        attempt = _Attempt(target, deadline, self.limits.max_response_bytes)
        try:
            self._exchange(attempt, self._request_bytes(target, body, extra))
        finally:
            attempt.close()
        return attempt.result(time.monotonic() - started)

    def _exchange(self, attempt: _Attempt, request: bytes) -> None:
        target = attempt.target
        if not self._connect(attempt):
            return
        if target.tls and not self._handshake(attempt):
            return
        sock = attempt.sock
        assert sock is not None
        try:
            attempt.request_sent = True
            view = memoryview(request)
            while view:
                sock.settimeout(attempt.remaining())
                sent = sock.send(view[:_SEND_CHUNK])
                view = view[sent:]
            self._read_response(attempt, sock)
        except TimeoutError:
            attempt.fail(DeliveryError.TIMEOUT, f"no complete response within {self.limits.total_timeout} s")
        except http.client.LineTooLong as exc:
            attempt.fail(DeliveryError.TOO_LARGE, f"response header line too long: {exc}")
        except ssl.SSLError as exc:
            attempt.fail(DeliveryError.TLS_ERROR, f"TLS failed mid-exchange: {exc}")
        except http.client.HTTPException as exc:
            # http.client reports "got more than 100 headers" only as a bare HTTPException.
            too_many = str(exc).startswith("got more than")
            kind = DeliveryError.TOO_LARGE if too_many else DeliveryError.PROTOCOL_ERROR
            attempt.fail(kind, f"{type(exc).__name__}: {exc}")
        except OSError as exc:
            attempt.fail(DeliveryError.PROTOCOL_ERROR, f"connection lost: {exc}")

    def _connect(self, attempt: _Attempt) -> bool:
        target = attempt.target
        failures: list[str] = []
        for address in target.addresses:
            remaining = attempt.deadline - time.monotonic()
            if remaining <= 0:
                failures.append("no time left")
                break
            try:
                attempt.sock = self._connector(
                    address, target.port, min(self.limits.connect_timeout, remaining)
                )
            except TimeoutError:
                failures.append(f"{address}: connect timed out")
            except OSError as exc:
                failures.append(f"{address}: {exc.strerror or exc}")
            else:
                attempt.address = str(address)
                return True
        attempt.fail(DeliveryError.CONNECT_FAILED, "; ".join(failures))
        return False

    def _handshake(self, attempt: _Attempt) -> bool:
        sock = attempt.sock
        assert sock is not None
        try:
            sock.settimeout(attempt.remaining())
            # server_hostname is the URL's host, not the address: it is the SNI sent and the name the
            # certificate must carry, so pinning the address does not weaken certificate checks.
            attempt.sock = self._ssl_context.wrap_socket(sock, server_hostname=attempt.target.host)
        except TimeoutError:
            attempt.fail(DeliveryError.TIMEOUT, "TLS handshake did not finish in time")
            return False
        except (ssl.SSLError, ssl.CertificateError) as exc:
            attempt.fail(DeliveryError.TLS_ERROR, str(exc))
            return False
        except OSError as exc:
            attempt.fail(DeliveryError.TLS_ERROR, f"connection lost during TLS handshake: {exc}")
            return False
        return True

    def _read_response(self, attempt: _Attempt, sock: socket.socket) -> None:
        reader = io.BufferedReader(_DeadlineReader(sock, attempt))
        response = http.client.HTTPResponse(cast(socket.socket, _PreparedFile(reader)), method="POST")
        response.begin()
        attempt.status = response.status
        attempt.headers = _lowered(response.headers)
        cap = attempt.max_bytes
        declared = response.getheader("content-length")
        if declared is not None and declared.isdigit() and int(declared) > cap:
            attempt.fail(DeliveryError.TOO_LARGE, f"response declares {declared} bytes; the cap is {cap}")
            return
        # One byte past the cap tells "exactly at the cap" from "over it" without reading further.
        body = response.read(cap + 1)
        if len(body) > cap:
            attempt.body = body[:cap]
            attempt.fail(DeliveryError.TOO_LARGE, f"response body exceeds {cap} bytes")
            return
        attempt.body = body

    def _request_bytes(self, target: CheckedTarget, body: bytes, extra: Mapping[str, str]) -> bytes:
        lines = [
            f"POST {target.request_target} HTTP/1.1",
            f"Host: {target.host_header}",
            f"Content-Length: {len(body)}",
            # One request per connection: a pooled connection would outlive the address check.
            "Connection: close",
        ]
        names = {name.lower() for name in extra}
        if "user-agent" not in names:
            lines.append(f"User-Agent: {self._user_agent}")
        if "content-type" not in names:
            lines.append("Content-Type: application/json")
        lines.extend(f"{name}: {value}" for name, value in extra.items())
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


class _Attempt:
    """The mutable state of one POST while it runs; frozen into a ``DeliveryResult`` at the end."""

    def __init__(self, target: CheckedTarget, deadline: float, max_bytes: int) -> None:
        self.target = target
        self.deadline = deadline
        self.max_bytes = max_bytes
        self.sock: socket.socket | None = None
        self.address: str | None = None
        self.status: int | None = None
        self.headers: dict[str, str] = {}
        self.body = b""
        self.error: DeliveryError | None = None
        self.detail = ""
        self.request_sent = False

    def remaining(self) -> float:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the total time cap is spent")
        return left

    def fail(self, error: DeliveryError, detail: str) -> None:
        self.error, self.detail = error, detail

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()

    def result(self, elapsed: float) -> DeliveryResult:
        return DeliveryResult(
            status=self.status,
            elapsed=elapsed,
            error=self.error,
            detail=self.detail,
            headers=self.headers,
            body=self.body,
            address=self.address,
            request_sent=self.request_sent,
        )


class _DeadlineReader(io.RawIOBase):
    """Socket reads that share one deadline. A plain socket timeout restarts on every read, so a receiver
    that drips one byte at a time could hold the sender forever."""

    def __init__(self, sock: socket.socket, attempt: _Attempt) -> None:
        super().__init__()
        self._sock = sock
        self._attempt = attempt

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: WriteableBuffer) -> int:
        self._sock.settimeout(self._attempt.remaining())
        try:
            return self._sock.recv_into(buffer)
        except ssl.SSLEOFError:
            # Many servers close without a TLS close_notify. Only the status matters to a delivery, and a
            # cut-off body is already bounded by the framing, so an unclean close reads as end of data.
            return 0


class _PreparedFile:
    """Hands http.client's response parser our deadline-bound reader instead of a fresh socket file."""

    def __init__(self, reader: io.BufferedIOBase) -> None:
        self._reader = reader

    def makefile(self, mode: str) -> io.BufferedIOBase:
        return self._reader


def _checked_headers(headers: Mapping[str, str]) -> dict[str, str]:
    checked: dict[str, str] = {}
    for name, value in headers.items():
        if not _TOKEN.fullmatch(name) or name.lower() in _RESERVED_HEADERS:
            raise ValueError(f"header {name!r} cannot be set by the caller")
        if any(ch in value for ch in "\r\n\0") or not value.isascii():
            raise ValueError(f"header {name!r} has a value that cannot go on the wire")
        checked[name] = value
    return checked


def _lowered(headers: http.client.HTTPMessage) -> dict[str, str]:
    merged: dict[str, str] = {}
    for name, value in headers.items():
        key = name.lower()
        merged[key] = f"{merged[key]}, {value}" if key in merged else value
    return merged


def _default_ssl_context() -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context
