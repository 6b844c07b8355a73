"""How every error leaves the API: application/problem+json with a stable ``type``. Validation failures of
any kind are 4xx, an unreachable dependency a 503 with Retry-After, anything else a 500 without internals."""

from __future__ import annotations

from typing import Any

import botocore.exceptions
import psycopg
from aws_lambda_powertools import Logger
from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response
from aws_lambda_powertools.event_handler.exceptions import NotFoundError
from aws_lambda_powertools.event_handler.openapi.exceptions import (
    RequestUnsupportedContentType,
    RequestValidationError,
)

from tollgate.api.json_body import UnacceptableJson
from tollgate.api.problems import DEPENDENCY_RETRY_AFTER_SECONDS, problem_response
from tollgate.core.errors import (
    DependencyUnavailable,
    InvalidRequest,
    MissingIdempotencyKey,
    NotFound,
    TollgateError,
    UnsupportedMediaType,
    ValidationFailed,
)

logger = Logger(service="tollgate-api")


def register_error_handlers(app: APIGatewayRestResolver) -> None:
    def domain_error(error: TollgateError) -> Response[str]:
        return problem_response(error, app.current_event.path)

    def route_not_found(_: NotFoundError) -> Response[str]:
        event = app.current_event
        return problem_response(NotFound(f"no route for {event.http_method} {event.path}"))

    # Registered by call rather than as decorators: the decorator is untyped, the functions are not.
    # Powertools picks the handler of the most specific class in the exception's MRO.
    app.exception_handler(TollgateError)(domain_error)
    app.exception_handler(RequestUnsupportedContentType)(unsupported_content_type)
    app.exception_handler(RequestValidationError)(validation_error)
    app.exception_handler(psycopg.OperationalError)(dependency_down)  # pool timeouts included
    app.exception_handler(botocore.exceptions.ConnectionError)(dependency_down)  # refused, connect timeout
    app.exception_handler(botocore.exceptions.HTTPClientError)(dependency_down)  # closed, read timeout
    app.exception_handler(Exception)(unexpected_error)
    app.not_found(route_not_found)


def unsupported_content_type(_: RequestUnsupportedContentType) -> Response[str]:
    return problem_response(UnsupportedMediaType("send the request body as application/json"))


def validation_error(error: RequestValidationError) -> Response[str]:
    errors = [_public_error(e) for e in error.errors()]
    if any(e["type"] == "json_invalid" for e in errors):
        why = error.__cause__.msg if isinstance(error.__cause__, UnacceptableJson) else None
        detail = f"the body is not JSON the API takes: {why}" if why else "the body is not valid JSON"
        return problem_response(InvalidRequest(detail, errors=errors))
    if errors and all(e["loc"] == ["header", "idempotency-key"] for e in errors):
        # When the key is all that is wrong, the answer is the 400 the API documents for it.
        if errors[0]["type"] == "missing":
            return problem_response(
                MissingIdempotencyKey("send an Idempotency-Key header, unique per logical request")
            )
        return problem_response(
            InvalidRequest("the Idempotency-Key must be 1 to 255 visible ASCII characters")
        )
    return problem_response(ValidationFailed(_summary(errors), errors=errors))


def dependency_down(error: Exception) -> Response[str]:
    # The database or S3 did not answer (an outage, a failover, a restart): nothing was committed, and the
    # same request with the same Idempotency-Key is safe to send again after a short wait.
    logger.warning("a dependency is unavailable", extra={"error": f"{type(error).__name__}: {error}"})
    return problem_response(
        DependencyUnavailable(
            "a service we depend on did not answer; retry after the Retry-After interval",
            retry_after=DEPENDENCY_RETRY_AFTER_SECONDS,
        )
    )


def unexpected_error(_: Exception) -> Response[str]:
    # Logged with its stack for the operators; the tenant gets a stable problem without internals.
    logger.exception("unhandled error")
    return problem_response(TollgateError("the request failed on our side; it is safe to retry it"))


def _public_error(error: dict[str, Any]) -> dict[str, Any]:
    """A validation error as tenants see it: where, what, why; never the input echoed back."""
    return {
        "loc": [str(part) for part in error.get("loc", ())],
        "type": error.get("type"),
        "msg": error.get("msg"),
    }


def _summary(errors: list[dict[str, Any]]) -> str:
    first = errors[0] if errors else {"loc": [], "msg": "invalid"}
    where = ".".join(first["loc"]) or "request"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{where}: {first['msg']}{more}"
