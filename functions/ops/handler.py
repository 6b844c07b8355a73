"""Operations Lambda, behind a function URL with AWS_IAM auth: runs one admin or support command for the
verified caller and answers with its typed result or a problem."""

from typing import Any

from aws_lambda_powertools import Logger, Tracer
from aws_lambda_powertools.utilities.typing import LambdaContext

from tollgate.ops.function_url import handle_function_url
from tollgate.settings import OpsSettings
from tollgate.wiring import build_ops

logger = Logger(service="tollgate-ops")
tracer = Tracer(service="tollgate-ops")

deps = build_ops(OpsSettings())


@logger.inject_lambda_context
# A response can carry a new API key, shown once: it must not be kept as trace metadata in X-Ray.
@tracer.capture_lambda_handler(capture_response=False)
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return handle_function_url(deps, event)
