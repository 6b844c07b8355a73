"""Authorizer Lambda: resolves the Bearer API key to its tenant for API Gateway."""

from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.utilities.typing import LambdaContext

from tollgate.settings import AuthorizerSettings
from tollgate.tenants.authorizer import authorize_request
from tollgate.wiring import build_authorizer

logger = Logger(service="tollgate-authorizer")

resolver = build_authorizer(AuthorizerSettings())


@logger.inject_lambda_context
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    policy = authorize_request(resolver, event.get("authorizationToken"), event["methodArn"])
    if "usageIdentifierKey" not in policy:
        logger.warning(
            "the tenant has no usage-plan key; run `tollgate tenants sync-usage-keys`",
            tenant_id=policy["context"]["tenant_id"],
        )
    return policy
