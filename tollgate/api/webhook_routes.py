"""Routes for tenants' webhook endpoints and their deliveries (register, list, update, delete, rotate the
secret, list deliveries with attempts, replay one delivery or all that failed since a time)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Annotated
from uuid import UUID

from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response
from aws_lambda_powertools.event_handler.openapi.params import Body, Query
from aws_lambda_powertools.event_handler.openapi.types import OpenAPIResponse
from pydantic import BaseModel, BeforeValidator, ConfigDict

from tollgate.core.errors import NotFound, TollgateError
from tollgate.delivery.deliveries import (
    DeliveryList,
    ReplayDeps,
    ReplayResult,
    list_deliveries,
    replay_delivery,
    replay_failed_since,
)
from tollgate.delivery.endpoints import (
    EndpointCreate,
    EndpointDeps,
    EndpointList,
    EndpointUpdate,
    EndpointView,
    EndpointWithSecret,
    create_endpoint,
    delete_endpoint,
    get_endpoint,
    list_endpoints,
    rotate_secret,
    update_endpoint,
)

if TYPE_CHECKING:
    from tollgate.api.app import ApiDeps


def _date_time_text(value: object) -> object:
    # JSON has no date-time type: the document says an RFC 3339 string, and pydantic would take a number too.
    if not isinstance(value, str):
        raise ValueError("a date-time is an RFC 3339 string")
    return value


class ReplaySince(BaseModel):
    model_config = ConfigDict(extra="forbid")
    since: Annotated[datetime, BeforeValidator(_date_time_text)]


class DeliveriesUnavailable(TollgateError):
    problem_type = "deliveries-unavailable"
    status = 503
    title = "Webhook delivery is not configured here"


def _uuid(raw: str, what: str) -> UUID:
    try:
        return UUID(raw)
    except ValueError:
        raise NotFound(f"no {what} {raw}") from None


def _endpoint(raw: str) -> UUID:
    return _uuid(raw, "webhook endpoint")


def register_webhook_routes(
    app: APIGatewayRestResolver,
    deps: ApiDeps,
    tenant_id: Callable[[], UUID],
    json_response: Callable[[int, BaseModel], Response[str]],
    problems: Callable[..., dict[int, OpenAPIResponse]],
) -> None:
    def endpoints() -> EndpointDeps:
        assert deps.webhooks is not None
        return deps.webhooks

    def replays() -> ReplayDeps:
        if deps.replays is None:
            raise DeliveriesUnavailable("this deployment has no webhook dispatcher to replay through")
        return deps.replays

    def ok(model: type[BaseModel], description: str, status: int = 200) -> dict[int, OpenAPIResponse]:
        return {status: {"description": description, "content": {"application/json": {"model": model}}}}

    tags = ["webhook-endpoints"]

    @app.post(
        "/webhook-endpoints",
        summary="Register an HTTPS endpoint; the signing secret is in this response only",
        responses={**ok(EndpointWithSecret, "Registered", 201), **problems(400, 401, 415, 422)},
        tags=tags,
    )
    def create(request: Annotated[EndpointCreate, Body()]) -> Response[str]:
        return json_response(201, create_endpoint(endpoints(), tenant_id(), request))

    @app.get(
        "/webhook-endpoints",
        summary="The tenant's endpoints",
        responses={**ok(EndpointList, "Endpoints"), **problems(401)},
        tags=tags,
    )
    def list_all() -> Response[str]:
        return json_response(200, list_endpoints(endpoints().db, tenant_id()))

    @app.get(
        "/webhook-endpoints/<endpoint_id>",
        summary="One endpoint",
        responses={**ok(EndpointView, "The endpoint"), **problems(401, 404)},
        tags=tags,
    )
    def get_one(endpoint_id: str) -> Response[str]:
        return json_response(200, get_endpoint(endpoints().db, tenant_id(), _endpoint(endpoint_id)))

    @app.patch(
        "/webhook-endpoints/<endpoint_id>",
        summary="Change the URL, event types, description, or enable/disable",
        responses={**ok(EndpointView, "Updated"), **problems(400, 401, 404, 415, 422)},
        tags=tags,
    )
    def update(endpoint_id: str, request: Annotated[EndpointUpdate, Body()]) -> Response[str]:
        view = update_endpoint(endpoints(), tenant_id(), _endpoint(endpoint_id), request)
        return json_response(200, view)

    @app.delete(
        "/webhook-endpoints/<endpoint_id>",
        summary="Delete an endpoint (no further deliveries)",
        # No content: without it, Powertools would document the handler's return type as a JSON body.
        responses={204: {"description": "Deleted", "content": {}}, **problems(401, 404)},
        tags=tags,
    )
    def delete(endpoint_id: str) -> Response[str]:
        delete_endpoint(endpoints(), tenant_id(), _endpoint(endpoint_id))
        return Response(status_code=204, body="")

    @app.post(
        "/webhook-endpoints/<endpoint_id>/rotate-secret",
        summary="New signing secret (shown once); the old one also signs for 24 hours",
        responses={**ok(EndpointWithSecret, "Rotated"), **problems(401, 404)},
        tags=tags,
    )
    def rotate(endpoint_id: str) -> Response[str]:
        return json_response(200, rotate_secret(endpoints(), tenant_id(), _endpoint(endpoint_id)))

    @app.get(
        "/webhook-endpoints/<endpoint_id>/deliveries",
        summary="The endpoint's deliveries, newest first, with every attempt",
        responses={**ok(DeliveryList, "Deliveries"), **problems(401, 404, 422)},
        tags=tags,
    )
    def deliveries(endpoint_id: str, limit: Annotated[int, Query(ge=1, le=100)] = 20) -> Response[str]:
        found = list_deliveries(endpoints().db, tenant_id(), _endpoint(endpoint_id), limit)
        return json_response(200, found)

    @app.post(
        "/webhook-endpoints/<endpoint_id>/deliveries/<delivery_id>/replay",
        summary="Send one delivery again, with the same webhook-id",
        responses={**ok(ReplayResult, "Replay started", 202), **problems(401, 404, 503)},
        tags=tags,
    )
    def replay_one(endpoint_id: str, delivery_id: str) -> Response[str]:
        result = replay_delivery(
            replays(), tenant_id(), _endpoint(endpoint_id), _uuid(delivery_id, "delivery")
        )
        return json_response(202, result)

    @app.post(
        "/webhook-endpoints/<endpoint_id>/replay",
        summary="Send again every delivery that gave up since a time",
        responses={**ok(ReplayResult, "Replays started", 202), **problems(400, 401, 404, 415, 422, 503)},
        tags=tags,
    )
    def replay_since(endpoint_id: str, request: Annotated[ReplaySince, Body()]) -> Response[str]:
        result = replay_failed_since(replays(), tenant_id(), _endpoint(endpoint_id), request.since)
        return json_response(202, result)
