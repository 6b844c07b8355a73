"""WebSocket $connect authorizer Lambda: the tenant's Bearer API key with the jobs:read scope, or no entry."""

from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.utilities.typing import LambdaContext

from tollgate.settings import AuthorizerSettings
from tollgate.tenants.authorizer import authorize_websocket
from tollgate.wiring import build_authorizer

logger = Logger(service="tollgate-websocket-authorizer")

resolver = build_authorizer(AuthorizerSettings())


@logger.inject_lambda_context
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    headers = {name.lower(): value for name, value in (event.get("headers") or {}).items()}
    return authorize_websocket(resolver, headers.get("authorization"), event["methodArn"])
