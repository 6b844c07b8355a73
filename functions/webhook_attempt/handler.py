"""Webhook attempt Lambda: one step of the dispatcher state machine; tells it to finish, wait or give up."""

from typing import Any
from uuid import UUID

from aws_lambda_powertools import Logger
from aws_lambda_powertools.utilities.typing import LambdaContext

from tollgate.settings import WebhookAttemptSettings
from tollgate.webhooks.attempts import attempt_delivery
from tollgate.wiring import build_webhook_attempts

logger = Logger(service="tollgate-webhooks")

deps = build_webhook_attempts(WebhookAttemptSettings())


@logger.inject_lambda_context
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return attempt_delivery(deps, UUID(event["delivery_id"])).as_state_output()
