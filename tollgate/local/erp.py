"""The local system's demo ERP: one webhook receiver on 127.0.0.1 for every tenant's endpoints.

A real ERP knows its own endpoint's secret; this stand-in serves any number of endpoints, so it looks up
the secrets of the endpoints registered at the URL a delivery came to (current and, during a rotation,
previous). It verifies, rejects stale timestamps and deduplicates by ``webhook-id`` like any receiver.
"""

from __future__ import annotations

from aws_lambda_powertools import Logger

from tollgate.clock import Clock, SystemClock
from tollgate.db import Database
from tollgate.webhooks.endpoints import signing_secrets_for_url
from tollgate.webhooks.receiver import Reply, WebhookReceiver

logger = Logger(service="tollgate-local", child=True)


class DemoErp:
    def __init__(self, db: Database, port: int = 0, clock: Clock | None = None) -> None:
        self._db = db
        self._clock = clock or SystemClock()
        self.receiver = WebhookReceiver(self._secrets_for, port=port, clock=self._clock, on_reply=_log_reply)

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


def _log_reply(path: str, reply: Reply) -> None:
    details = {"component": "erp", "erp_path": path, "http_status": reply.status, **reply.body}
    if reply.status < 300:
        logger.info(f"demo ERP {reply.body.get('status', 'answered')} a webhook", extra=details)
    else:
        logger.warning("demo ERP refused a webhook", extra=details)
