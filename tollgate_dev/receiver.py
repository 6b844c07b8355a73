"""A Standard Webhooks receiver on 127.0.0.1: the demo's stand-in for a tenant's ERP, and a test double.

It is written from the specification alone and deliberately shares no code with ``signing``: a sender and
receiver built on one helper would agree with each other even where both disagree with the spec. It checks
the signature (any ``v1`` entry, any configured secret), refuses timestamps outside the tolerance,
acknowledges a repeated ``webhook-id`` without recording it twice, and records what it accepted.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tollgate.core.clock import Clock, SystemClock

MAX_BODY_BYTES = 1024 * 1024

# Given a request's path, the secrets its endpoint may have signed with (none: an unknown endpoint).
Keyring = Callable[[str], Sequence[str]]


@dataclass(frozen=True)
class ReceivedWebhook:
    webhook_id: str
    timestamp: int
    path: str
    headers: dict[str, str]  # lower-case names
    body: bytes
    received_at: datetime


@dataclass(frozen=True)
class Rejection:
    reason: str  # missing_headers, invalid_timestamp, stale_timestamp, future_timestamp, bad_signature, ...
    status: int
    webhook_id: str | None


@dataclass(frozen=True)
class Reply:
    status: int
    body: dict[str, Any]


class WebhookReceiver:
    def __init__(
        self,
        secrets: str | Sequence[str] | Keyring,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        tolerance: timedelta = timedelta(minutes=5),
        remember_ids_for: timedelta = timedelta(hours=48),
        clock: Clock | None = None,
        on_reply: Callable[[str, Reply], None] | None = None,
    ) -> None:
        self._on_reply = on_reply or (lambda _path, _reply: None)
        if callable(secrets):
            self._keyring: Keyring = secrets
        else:
            listed = [secrets] if isinstance(secrets, str) else list(secrets)
            if not listed:
                raise ValueError("a receiver needs at least one secret")
            for secret in listed:
                _key(secret)  # a malformed secret is refused here, not on the first request
            self._keyring = lambda _path: listed
        self._tolerance = tolerance
        # The tolerance alone would stop a captured request being replayed, but a sender's own retry comes
        # with a fresh timestamp hours later (the schedule spans about 28 h), so ids must outlive it.
        self._remember_ids_for = max(remember_ids_for, 2 * tolerance)
        self._clock = clock or SystemClock()
        self._lock = threading.Lock()
        self._accepted: list[ReceivedWebhook] = []
        self._rejections: list[Rejection] = []
        self._duplicates = 0
        self._seen: dict[str, datetime] = {}
        self._server = _Server((host, port), self._handler_class())
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def accepted(self) -> list[ReceivedWebhook]:
        with self._lock:
            return list(self._accepted)

    @property
    def rejections(self) -> list[Rejection]:
        with self._lock:
            return list(self._rejections)

    @property
    def duplicates(self) -> int:
        with self._lock:
            return self._duplicates

    def start(self) -> WebhookReceiver:
        # A short poll interval makes stop() prompt (shutdown waits up to one interval).
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), name="webhook-receiver", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        # shutdown() waits for serve_forever to notice, so it would hang on a receiver never started.
        if self._thread:
            self._server.shutdown()
            self._thread.join()
            self._thread = None
        self._server.server_close()

    def __enter__(self) -> WebhookReceiver:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def receive(self, path: str, headers: dict[str, str], body: bytes) -> Reply:
        """Judges one delivery; the HTTP handler only moves bytes in and out of this."""
        reply = self._judge(path, headers, body)
        self._on_reply(path, reply)
        return reply

    def _judge(self, path: str, headers: dict[str, str], body: bytes) -> Reply:
        now = self._clock.now()
        lowered = {name.lower(): value for name, value in headers.items()}
        webhook_id = lowered.get("webhook-id")
        timestamp = lowered.get("webhook-timestamp")
        signatures = lowered.get("webhook-signature")
        if not (webhook_id and timestamp and signatures):
            return self._reject("missing_headers", 400, webhook_id)
        if not timestamp.isascii() or not timestamp.isdigit():
            return self._reject("invalid_timestamp", 400, webhook_id)
        sent_at = int(timestamp)
        skew = now.timestamp() - sent_at
        if skew > self._tolerance.total_seconds():
            return self._reject("stale_timestamp", 400, webhook_id)
        if -skew > self._tolerance.total_seconds():
            return self._reject("future_timestamp", 400, webhook_id)
        known = self._keyring(path)
        if not known:
            return self._reject("unknown_endpoint", 404, webhook_id)
        if not self._signature_matches(
            [_key(secret) for secret in known], webhook_id, timestamp, body, signatures
        ):
            return self._reject("bad_signature", 401, webhook_id)

        with self._lock:
            # Only after the signature: an unsigned request must not be able to burn an id.
            self._forget_before(now - self._remember_ids_for)
            if webhook_id in self._seen:
                self._duplicates += 1
                return Reply(200, {"status": "duplicate", "webhook_id": webhook_id})
            self._seen[webhook_id] = now
            self._accepted.append(ReceivedWebhook(webhook_id, sent_at, path, lowered, body, now))
        return Reply(200, {"status": "accepted", "webhook_id": webhook_id})

    @staticmethod
    def _signature_matches(
        keys: Sequence[bytes], webhook_id: str, timestamp: str, body: bytes, header: str
    ) -> bool:
        content = webhook_id.encode() + b"." + timestamp.encode() + b"." + body
        computed = [base64.b64encode(hmac.new(key, content, hashlib.sha256).digest()) for key in keys]
        found = False
        for entry in header.split(" "):
            version, _, value = entry.partition(",")
            if version != "v1":
                continue
            offered = value.encode("utf-8", "surrogateescape")
            for expected in computed:
                found |= hmac.compare_digest(offered, expected)
        return found

    def _forget_before(self, cutoff: datetime) -> None:
        for webhook_id in [i for i, seen in self._seen.items() if seen < cutoff]:
            del self._seen[webhook_id]

    def _reject(self, reason: str, status: int, webhook_id: str | None) -> Reply:
        with self._lock:
            self._rejections.append(Rejection(reason, status, webhook_id))
        return Reply(status, {"error": reason})

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Headers and body go out in separate writes; with Nagle on, the body waits for the client's
            # delayed ACK.
            disable_nagle_algorithm = True

            def do_POST(self) -> None:
                length_header = self.headers.get("Content-Length")
                if length_header is None or not length_header.isdigit():
                    # The unread body would otherwise be parsed as the next request on this connection.
                    self.close_connection = True
                    self._answer(Reply(411, {"error": "length_required"}))
                    return
                length = int(length_header)
                if length > MAX_BODY_BYTES:
                    self.close_connection = True
                    self._answer(Reply(413, {"error": "too_large"}))
                    return
                body = self.rfile.read(length)
                self._answer(receiver.receive(self.path, dict(self.headers.items()), body))

            def _answer(self, reply: Reply) -> None:
                payload = json.dumps(reply.body).encode()
                self.send_response(reply.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # the demo prints what it needs from ``accepted``

        return Handler


class _Server(ThreadingHTTPServer):
    daemon_threads = True


def _key(secret: str) -> bytes:
    try:
        return base64.b64decode(secret.removeprefix("whsec_"), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ValueError("a webhook secret is whsec_ followed by base64") from exc
