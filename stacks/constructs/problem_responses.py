"""API Gateway's own error responses rewritten as RFC 9457 ``application/problem+json`` bodies.

Errors raised before the API Lambda runs (authorizer, throttling, unknown routes) then look like the
Lambda's own errors to a client: same media type, same members, a stable ``type`` per error.
"""

from __future__ import annotations

from aws_cdk import aws_apigateway as apigw
from constructs import Construct

# The table is shared with the local gateway, which answers the same way where API Gateway would.
from tollgate.api.gateway_problems import GATEWAY_PROBLEMS, problem_template
from tollgate.api.problems import PROBLEM_CONTENT_TYPE


class ProblemGatewayResponses(Construct):
    """Adds one gateway response per entry of ``GATEWAY_PROBLEMS`` to ``api``."""

    def __init__(self, scope: Construct, construct_id: str, *, api: apigw.IRestApi) -> None:
        super().__init__(scope, construct_id)
        for problem in GATEWAY_PROBLEMS:
            apigw.GatewayResponse(
                self,
                problem.response_type,
                rest_api=api,
                type=apigw.ResponseType.of(problem.response_type),
                status_code=None if problem.status is None else str(problem.status),
                response_headers={
                    "Content-Type": f"'{PROBLEM_CONTENT_TYPE}'",
                    **({"Retry-After": f"'{problem.retry_after}'"} if problem.retry_after else {}),
                },
                templates={"application/json": problem_template(problem)},
            )
