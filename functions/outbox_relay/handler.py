"""Outbox relay Lambda: nudged after each accepted job and swept every minute; both run one bounded relay."""

from typing import Any

from aws_lambda_powertools import Logger, Tracer
from aws_lambda_powertools.utilities.typing import LambdaContext

from tollgate.outbox.relay import relay_outbox
from tollgate.settings import RelaySettings
from tollgate.wiring import build_relay

# The service name the stack gives this function (POWERTOOLS_SERVICE_NAME), so dashboards find its lines.
logger = Logger(service="tollgate-outbox-relay")
tracer = Tracer(service="tollgate-outbox-relay")

settings = RelaySettings()  # type: ignore[call-arg]  # fields come from the environment
deps = build_relay(settings)


@logger.inject_lambda_context
@tracer.capture_lambda_handler
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    report = relay_outbox(deps, max_batches=settings.relay_max_batches)
    logger.info("relay run", extra={"trigger": event.get("source", "unknown"), **report.__dict__})
    return {"claimed": report.claimed, "published": report.published, "failed": report.failed}
