"""The local system's demo ERP: one webhook receiver on 127.0.0.1 for every tenant's endpoints.

A real ERP knows its own endpoint's secret; this stand-in serves any number of endpoints, so it looks up
the secrets of the endpoints registered at the URL a delivery came to (current and, during a rotation,
previous). It verifies, rejects stale timestamps and deduplicates by ``webhook-id`` like any receiver.
"""

from __future__ import annotations

import json
from typing import Any

from aws_lambda_powertools import Logger

from tollgate.core.clock import Clock, SystemClock
from tollgate.db import Database
from tollgate.delivery.endpoints import signing_secrets_for_url
from tollgate_dev.receiver import Reply, WebhookReceiver

logger = Logger(service="tollgate-local", child=True)


class DemoErp:
    def __init__(self, db: Database, port: int = 0, clock: Clock | None = None) -> None:
        self._db = db
        self._clock = clock or SystemClock()
        self.receiver = WebhookReceiver(
            self._secrets_for, port=port, clock=self._clock, on_reply=self._log_reply
        )

    @property
    def url(self) -> str:
        return self.receiver.url

    def _secrets_for(self, path: str) -> list[str]:
        return signing_secrets_for_url(self._db, self.url + path, self._clock.now())

    def start(self) -> DemoErp:
        self.receiver.start()
        return self

    def stop(self) -> None:
        self.receiver.stop()

    def _log_reply(self, path: str, reply: Reply) -> None:
        details: dict[str, Any] = {"component": "erp", "erp_path": path}
        if reply.status >= 300:
            logger.warning(
                "demo ERP refused a webhook", extra={**details, **reply.body, "http_status": reply.status}
            )
            return
        webhook_id = str(reply.body.get("webhook_id"))
        details |= {**self._what_arrived(webhook_id), "webhook_id": webhook_id, "http_status": reply.status}
        if reply.body.get("status") == "accepted":
            logger.info("demo ERP verified the signature and accepted a webhook", extra=details)
        else:
            logger.info("demo ERP acknowledged a repeated webhook-id and kept the first", extra=details)

    def _what_arrived(self, webhook_id: str) -> dict[str, Any]:
        """The event type and job of a delivery it accepted, so the log line says what the tenant got."""
        for received in reversed(self.receiver.accepted):
            if received.webhook_id == webhook_id:
                try:
                    event = json.loads(received.body)
                    facts = {"type": event.get("type"), "job_id": (event.get("data") or {}).get("job_id")}
                except (ValueError, AttributeError):
                    return {}  # a body that is not an event object: the line says what the receiver did
                return {key: value for key, value in facts.items() if value}
        return {}
