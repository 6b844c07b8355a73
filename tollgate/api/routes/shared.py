"""What every resource's routes share: the tenant the authorizer vouched for, ids read from the path, JSON
responses, and the responses a route documents in the OpenAPI document."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from uuid import UUID

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.openapi.types import OpenAPIResponse
from aws_lambda_powertools.event_handler.router import APIGatewayRouter
from aws_lambda_powertools.utilities.data_classes.common import BaseProxyEvent
from pydantic import BaseModel

from tollgate.api.problems import PROBLEM_CONTENT_TYPE
from tollgate.core.errors import Forbidden, NotFound, Unauthorized
from tollgate.tenants.keys import Scope


def new_router() -> APIGatewayRouter:
    """A router whose routes read the event as API Gateway's REST proxy event."""
    return APIGatewayRouter()  # type: ignore[no-untyped-call]  # Powertools leaves __init__ unannotated


def authenticated_tenant(event: BaseProxyEvent, scope: Scope) -> UUID:
    """The tenant from the authorizer's context (never from the request, which the tenant controls), when
    the key holds ``scope``; 403 when it does not."""
    return tenant_holding(event.raw_event, scope)


def tenant_holding(raw_event: Mapping[str, Any], scope: Scope) -> UUID:
    """``authenticated_tenant`` on the event as Lambda receives it, for checks before Powertools reads it.

    A context without scopes was cached by API Gateway from an authorizer older than scopes, for a key made
    before them, and such keys hold every scope (migration 0013).
    """
    authorizer = (raw_event.get("requestContext") or {}).get("authorizer") or {}
    try:
        tenant_id = UUID(str(authorizer["tenant_id"]))
    except (KeyError, ValueError):
        raise Unauthorized("the request carries no authenticated tenant") from None
    granted = authorizer.get("scopes")
    if granted is not None and scope.value not in str(granted).split():
        raise Forbidden(f"this API key lacks the {scope.value} scope this request needs")
    return tenant_id


def authenticated_key(event: BaseProxyEvent) -> UUID:
    """The API key the authorizer resolved (its context's key_id, the policy's principalId): who acts, for
    records such as a review decision. Call after ``authenticated_tenant``."""
    authorizer = (event.raw_event.get("requestContext") or {}).get("authorizer") or {}
    try:
        return UUID(str(authorizer.get("key_id") or authorizer["principalId"]))
    except (KeyError, ValueError):
        raise Unauthorized("the request carries no authenticated API key") from None


def path_id(raw: str, what: str) -> UUID:
    """An id taken from the path, for every route that has one.

    Text that is not a UUID names nothing the tenant owns, so it gets the 404 an unknown id gets (with the
    same detail the use cases give), not a validation error that would tell the two cases apart.
    """
    try:
        return UUID(raw)
    except ValueError:
        raise NotFound(f"no {what} {raw}") from None


def json_response(status: int, model: BaseModel, headers: dict[str, str] | None = None) -> Response[str]:
    return Response(
        status_code=status,
        content_type="application/json",
        body=model.model_dump_json(),
        headers=headers or {},
    )


def documented(model: type[BaseModel], description: str, status: int = 200) -> dict[int, OpenAPIResponse]:
    """A success response for the OpenAPI document: ``model`` as application/json."""
    return {status: {"description": description, "content": {"application/json": {"model": model}}}}


def problem_responses(*statuses: int) -> dict[int, OpenAPIResponse]:
    # Every route reads or writes PostgreSQL, so every route may answer 503 while it is unreachable; every
    # route needs a scope the key may lack (403).
    return {
        status: {
            "description": "Problem details (RFC 9457)",
            "content": {PROBLEM_CONTENT_TYPE: {"schema": {}}},
        }
        for status in sorted({*statuses, 403, 503})
    }
