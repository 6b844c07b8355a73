"""Notifier Lambda: job state changes from the notifications queue go to the tenants' connections; a scheduled
invocation closes connections whose API key was revoked."""

from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.utilities.typing import LambdaContext

from tollgate.notify.service import close_revoked, notify_tenants, parse_notifications
from tollgate.settings import NotificationSettings
from tollgate.wiring import build_notify

logger = Logger(service="tollgate-notifier")

deps = build_notify(NotificationSettings())  # type: ignore[call-arg]  # fields come from the environment


@logger.inject_lambda_context
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    if "Records" not in event:
        closed = close_revoked(deps)
        logger.info("revoked keys' connections closed", extra={"closed": closed})
        return {"closed": closed}
    # Delivery reads the tenants' events from the database: a batch is done or redone as a whole, and a
    # message delivered twice sends nothing twice.
    sent = notify_tenants(deps, parse_notifications([record["body"] for record in event["Records"]]))
    logger.info("notified", extra={"messages": sent, "records": len(event["Records"])})
    return {"batchItemFailures": []}
