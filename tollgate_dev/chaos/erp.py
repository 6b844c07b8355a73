"""A tenant's ERP for the chaos run: it verifies webhooks like any Standard Webhooks receiver, applies each
``webhook-id`` once, and keeps what it applied in a log that outlives its own restarts, as an ERP's database
would. The ledger check reads that log to prove no job's outcome reached the ERP twice."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from typing import Any

from tollgate_dev.receiver import Reply, WebhookReceiver


@dataclass(frozen=True)
class ErpEffect:
    """One webhook the ERP acted on (booked an invoice, opened a review task, ...)."""

    webhook_id: str
    tenant_id: str
    job_id: str
    event_type: str
    state: str


class ErpLog:
    """Every effect the tenants' ERPs applied, and how many repeats they recognised and ignored."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._effects: list[ErpEffect] = []
        self._seen: set[str] = set()
        self._redeliveries = 0

    def apply(self, webhook_id: str, body: bytes) -> bool:
        """Acts on a verified webhook unless this id was acted on before; True when it was applied now."""
        with self._lock:
            if webhook_id in self._seen:
                self._redeliveries += 1
                return False
            self._seen.add(webhook_id)
            self._effects.append(_effect(webhook_id, body))
            return True

    def recognised_repeat(self) -> None:
        with self._lock:
            self._redeliveries += 1

    @property
    def effects(self) -> list[ErpEffect]:
        with self._lock:
            return list(self._effects)

    @property
    def redeliveries(self) -> int:
        with self._lock:
            return self._redeliveries


def _effect(webhook_id: str, body: bytes) -> ErpEffect:
    try:
        document: dict[str, Any] = json.loads(body)
        data = document.get("data") or {}
        return ErpEffect(
            webhook_id,
            str(data.get("tenant_id", "")),
            str(data.get("job_id", "")),
            str(document.get("type", "")),
            str(data.get("state", "")),
        )
    except (ValueError, AttributeError):
        # A signed body that is not what Tollgate sends is still an effect, and the ledger will ask why.
        return ErpEffect(webhook_id, "", "", "", "")


class ErpReceiver(WebhookReceiver):
    """WebhookReceiver's checks, then the ERP's own idempotency by ``webhook-id`` in the durable log."""

    def __init__(self, secret: str, log: ErpLog, *, port: int = 0) -> None:
        super().__init__(secret, port=port)
        self._log = log

    def receive(self, path: str, headers: dict[str, str], body: bytes) -> Reply:
        reply = super().receive(path, headers, body)
        status = reply.body.get("status")
        webhook_id = str(reply.body.get("webhook_id", ""))
        if status == "accepted":
            self._log.apply(webhook_id, body)
        elif status == "duplicate":
            self._log.recognised_repeat()
        return reply


class ErpEndpoint:
    """One tenant's ERP listening on a fixed port of 127.0.0.1, which can go down and come back."""

    def __init__(self, secret: str, log: ErpLog) -> None:
        self._secret = secret
        self._log = log
        receiver = ErpReceiver(secret, log)
        receiver.start()
        self._receiver: ErpReceiver | None = receiver
        self.url = receiver.url

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    @property
    def up(self) -> bool:
        return self._receiver is not None

    def go_down(self) -> None:
        """Stops listening: deliveries meet a refused connection, as with an ERP that is down."""
        if self._receiver is not None:
            self._receiver.stop()
            self._receiver = None

    def come_back(self) -> None:
        if self._receiver is None:
            receiver = ErpReceiver(self._secret, self._log, port=self.port)
            receiver.start()
            self._receiver = receiver

    def stop(self) -> None:
        self.go_down()
