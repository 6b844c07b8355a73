"""API Gateway's own error responses rewritten as RFC 9457 ``application/problem+json`` bodies.

Errors raised before the API Lambda runs (authorizer, throttling, unknown routes) then look like the
Lambda's own errors to a client: same media type, same members, a stable ``type`` per error.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from aws_cdk import aws_apigateway as apigw
from constructs import Construct

# The API Lambda's own base, media type and retry interval: a client sees one family of problems, whoever
# answers. tollgate.api.problems is cheap to import: the routes and their dependencies stay out of the synth.
from tollgate.api.problems import DEPENDENCY_RETRY_AFTER_SECONDS, PROBLEM_CONTENT_TYPE, PROBLEM_TYPE_BASE


@dataclass(frozen=True)
class GatewayProblem:
    response_type: apigw.ResponseType
    # Shared with the API Lambda's errors where the meaning is the same (unauthorized, not-found, ...).
    slug: str
    title: str
    # None: the response keeps API Gateway's status, which a gateway template cannot read, so the body
    # leaves out the advisory ``status`` member rather than state a wrong one.
    status: int | None
    detail: str = "$context.error.messageString"
    # Seconds a client should wait before sending the same request again, as the Retry-After header.
    retry_after: int | None = None


GATEWAY_PROBLEMS = (
    GatewayProblem(
        apigw.ResponseType.UNAUTHORIZED,
        "unauthorized",
        "Unauthorized",
        401,
        detail='"Send the header Authorization: Bearer <api key>."',
    ),
    GatewayProblem(
        apigw.ResponseType.ACCESS_DENIED,
        "forbidden",
        "Forbidden",
        403,
        detail='"The API key is not valid for this request."',
    ),
    # Raised when the authorizer's usage identifier matches no key of this stage's usage plan.
    GatewayProblem(
        apigw.ResponseType.INVALID_API_KEY,
        "forbidden",
        "Forbidden",
        403,
        detail='"The API key is not enabled for this API."',
    ),
    GatewayProblem(apigw.ResponseType.THROTTLED, "throttled", "Too Many Requests", 429),
    GatewayProblem(apigw.ResponseType.QUOTA_EXCEEDED, "quota-exceeded", "Quota Exceeded", 429),
    # For a REST API this type means "no such resource or method": a 404 tells the client the truth.
    GatewayProblem(
        apigw.ResponseType.MISSING_AUTHENTICATION_TOKEN,
        "not-found",
        "Not Found",
        404,
        detail='"No such resource or method."',
    ),
    GatewayProblem(apigw.ResponseType.REQUEST_TOO_LARGE, "payload-too-large", "Content Too Large", 413),
    GatewayProblem(apigw.ResponseType.INTEGRATION_TIMEOUT, "upstream-timeout", "Gateway Timeout", 504),
    # The authorizer could not check the key (its database unreachable, say): the same answer the API gives
    # when its own dependencies are down, so clients retry rather than treat it as a server bug.
    GatewayProblem(
        apigw.ResponseType.AUTHORIZER_FAILURE,
        "dependency-unavailable",
        "A service we depend on is unavailable",
        503,
        detail='"The API key could not be checked just now; retry after the Retry-After interval."',
        retry_after=DEPENDENCY_RETRY_AFTER_SECONDS,
    ),
    GatewayProblem(apigw.ResponseType.DEFAULT_4_XX, "client-error", "Request Rejected", None),
    GatewayProblem(
        apigw.ResponseType.DEFAULT_5_XX,
        "server-error",
        "Server Error",
        None,
        detail='"The service failed to handle the request."',
    ),
)


def problem_template(problem: GatewayProblem) -> str:
    """The body template: JSON with API Gateway's ``$context`` substitutions left in place."""
    members = [
        ("type", json.dumps(PROBLEM_TYPE_BASE + problem.slug)),
        ("title", json.dumps(problem.title)),
        *([("status", str(problem.status))] if problem.status is not None else []),
        # Substituted by API Gateway: messageString arrives already quoted and escaped.
        ("detail", problem.detail),
        ("request_id", '"$context.requestId"'),
    ]
    return "{" + ", ".join(f'"{name}": {value}' for name, value in members) + "}"


class ProblemGatewayResponses(Construct):
    """Adds one gateway response per entry of ``GATEWAY_PROBLEMS`` to ``api``."""

    def __init__(self, scope: Construct, construct_id: str, *, api: apigw.IRestApi) -> None:
        super().__init__(scope, construct_id)
        for problem in GATEWAY_PROBLEMS:
            apigw.GatewayResponse(
                self,
                problem.response_type.response_type,
                rest_api=api,
                type=problem.response_type,
                status_code=None if problem.status is None else str(problem.status),
                response_headers={
                    "Content-Type": f"'{PROBLEM_CONTENT_TYPE}'",
                    **({"Retry-After": f"'{problem.retry_after}'"} if problem.retry_after else {}),
                },
                templates={"application/json": problem_template(problem)},
            )
