"""API Gateway's own error responses as RFC 9457 ``application/problem+json`` bodies: the table ApiStack
makes its gateway responses from, and the local gateway answers from where API Gateway would answer before
any Lambda runs (a method the stage does not declare, say).

Errors raised before the API Lambda runs (authorizer, throttling, unknown routes) then look like the
Lambda's own errors to a client: same media type, same members, a stable ``type`` per error. Plain data, so
neither the CDK nor the routes are imported by whoever reads it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

# The API Lambda's own base, media type and retry interval: a client sees one family of problems, whoever
# answers.
from tollgate.api.problems import DEPENDENCY_RETRY_AFTER_SECONDS, PROBLEM_TYPE_BASE


@dataclass(frozen=True)
class GatewayProblem:
    response_type: str  # API Gateway's gateway response type, e.g. MISSING_AUTHENTICATION_TOKEN
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
        "UNAUTHORIZED",
        "unauthorized",
        "Unauthorized",
        401,
        detail='"Send the header Authorization: Bearer <api key>."',
    ),
    GatewayProblem(
        "ACCESS_DENIED",
        "forbidden",
        "Forbidden",
        403,
        detail='"The API key is not valid for this request."',
    ),
    # Raised when the authorizer's usage identifier matches no key of this stage's usage plan.
    GatewayProblem(
        "INVALID_API_KEY",
        "forbidden",
        "Forbidden",
        403,
        detail='"The API key is not enabled for this API."',
    ),
    GatewayProblem("THROTTLED", "throttled", "Too Many Requests", 429),
    GatewayProblem("QUOTA_EXCEEDED", "quota-exceeded", "Quota Exceeded", 429),
    # For a REST API this type means "no such resource or method": a 404 tells the client the truth.
    GatewayProblem(
        "MISSING_AUTHENTICATION_TOKEN",
        "not-found",
        "Not Found",
        404,
        detail='"No such resource or method."',
    ),
    GatewayProblem("REQUEST_TOO_LARGE", "payload-too-large", "Content Too Large", 413),
    GatewayProblem("INTEGRATION_TIMEOUT", "upstream-timeout", "Gateway Timeout", 504),
    # The authorizer could not check the key (its database unreachable, say): the same answer the API gives
    # when its own dependencies are down, so clients retry rather than treat it as a server bug.
    GatewayProblem(
        "AUTHORIZER_FAILURE",
        "dependency-unavailable",
        "A service we depend on is unavailable",
        503,
        detail='"The API key could not be checked just now; retry after the Retry-After interval."',
        retry_after=DEPENDENCY_RETRY_AFTER_SECONDS,
    ),
    GatewayProblem("DEFAULT_4XX", "client-error", "Request Rejected", None),
    GatewayProblem(
        "DEFAULT_5XX",
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


def gateway_problem(response_type: str) -> GatewayProblem:
    return next(problem for problem in GATEWAY_PROBLEMS if problem.response_type == response_type)


def rendered(problem: GatewayProblem, request_id: str) -> str:
    """The body API Gateway sends for ``problem`` when its detail is fixed text (no ``$context`` but the
    request id, which is ``request_id``)."""
    if problem.status is None or not problem.detail.startswith('"'):
        raise ValueError(f"{problem.response_type}'s body depends on API Gateway's context")
    return problem_template(problem).replace("$context.requestId", request_id)
