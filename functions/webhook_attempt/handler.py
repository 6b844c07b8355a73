"""Webhook attempt Lambda: one step of the dispatcher state machine; tells it to finish, wait or give up."""

from typing import Any
from uuid import UUID

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.utilities.typing import LambdaContext

from tollgate.core.metrics import PowertoolsMetrics
from tollgate.delivery.attempts import attempt_delivery
from tollgate.settings import WebhookAttemptSettings
from tollgate.wiring import build_webhook_attempts

SERVICE = "tollgate-webhook-attempt"
logger = Logger(service=SERVICE)
tracer = Tracer(service=SERVICE)
metrics = Metrics(namespace="Tollgate", service=SERVICE)

deps = build_webhook_attempts(WebhookAttemptSettings(), metrics=PowertoolsMetrics(metrics))


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return attempt_delivery(deps, UUID(event["delivery_id"])).as_state_output()
