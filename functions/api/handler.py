"""API Lambda: hands each API Gateway proxy event to the acceptance routes.

No Powertools Tracer here: the X-Ray SDK builds botocore clients when it is imported, about half a second
of every cold start a tenant waits on. The function still has active tracing, so X-Ray records the API
Gateway and Lambda segments (initialization included) without it.
"""

from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.utilities.typing import LambdaContext

from tollgate.api.app import create_app, handle
from tollgate.settings import ApiSettings
from tollgate.wiring import build_api

logger = Logger(service="tollgate-api")

deps = build_api(ApiSettings())  # type: ignore[call-arg]  # fields come from the environment
app = create_app(deps)


@logger.inject_lambda_context(correlation_id_path="requestContext.requestId")
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return handle(app, deps, event, context)
