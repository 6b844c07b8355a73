"""Routes for tenants' webhook endpoints and their deliveries (register, list, update, delete, rotate the
secret, list deliveries with attempts, replay one delivery or all that failed since a time)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.openapi.params import Body, Query
from aws_lambda_powertools.event_handler.router import APIGatewayRouter
from pydantic import BaseModel, BeforeValidator, ConfigDict

from tollgate.api.deps import ApiDeps
from tollgate.api.routes.shared import (
    authenticated_tenant,
    documented,
    json_response,
    new_router,
    path_id,
    problem_responses,
)
from tollgate.api.surface import needs
from tollgate.core.errors import TollgateError
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
from tollgate.tenants.keys import Scope

ENDPOINT = "webhook endpoint"
DELIVERY = "delivery"
TAGS = ["webhook-endpoints"]


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


def build_router(deps: ApiDeps) -> APIGatewayRouter:
    router = new_router()

    def endpoints() -> EndpointDeps:
        assert deps.webhooks is not None
        return deps.webhooks

    def replays() -> ReplayDeps:
        if deps.replays is None:
            raise DeliveriesUnavailable("this deployment has no webhook dispatcher to replay through")
        return deps.replays

    @router.post(
        "/webhook-endpoints",
        summary="Register an HTTPS endpoint; the signing secret is in this response only",
        responses={
            **documented(EndpointWithSecret, "Registered", 201),
            **problem_responses(400, 401, 415, 422),
        },
        tags=TAGS,
        **needs(Scope.WEBHOOKS_ADMIN),
    )
    def create(request: Annotated[EndpointCreate, Body()]) -> Response[str]:
        tenant_id = authenticated_tenant(router.current_event, Scope.WEBHOOKS_ADMIN)
        return json_response(201, create_endpoint(endpoints(), tenant_id, request))

    @router.get(
        "/webhook-endpoints",
        summary="The tenant's endpoints",
        responses={**documented(EndpointList, "Endpoints"), **problem_responses(401)},
        tags=TAGS,
        **needs(Scope.WEBHOOKS_ADMIN),
    )
    def list_all() -> Response[str]:
        tenant_id = authenticated_tenant(router.current_event, Scope.WEBHOOKS_ADMIN)
        return json_response(200, list_endpoints(endpoints().db, tenant_id))

    @router.get(
        "/webhook-endpoints/<endpoint_id>",
        summary="One endpoint",
        responses={**documented(EndpointView, "The endpoint"), **problem_responses(401, 404)},
        tags=TAGS,
        **needs(Scope.WEBHOOKS_ADMIN),
    )
    def get_one(endpoint_id: str) -> Response[str]:
        tenant_id, endpoint = (
            authenticated_tenant(router.current_event, Scope.WEBHOOKS_ADMIN),
            path_id(endpoint_id, ENDPOINT),
        )
        return json_response(200, get_endpoint(endpoints().db, tenant_id, endpoint))

    @router.patch(
        "/webhook-endpoints/<endpoint_id>",
        summary="Change the URL, event types, description, or enable/disable",
        responses={**documented(EndpointView, "Updated"), **problem_responses(400, 401, 404, 415, 422)},
        tags=TAGS,
        **needs(Scope.WEBHOOKS_ADMIN),
    )
    def update(endpoint_id: str, request: Annotated[EndpointUpdate, Body()]) -> Response[str]:
        tenant_id, endpoint = (
            authenticated_tenant(router.current_event, Scope.WEBHOOKS_ADMIN),
            path_id(endpoint_id, ENDPOINT),
        )
        return json_response(200, update_endpoint(endpoints(), tenant_id, endpoint, request))

    @router.delete(
        "/webhook-endpoints/<endpoint_id>",
        summary="Delete an endpoint (no further deliveries)",
        # No content: without it, Powertools would document the handler's return type as a JSON body.
        responses={204: {"description": "Deleted", "content": {}}, **problem_responses(401, 404)},
        tags=TAGS,
        **needs(Scope.WEBHOOKS_ADMIN),
    )
    def delete(endpoint_id: str) -> Response[str]:
        tenant_id, endpoint = (
            authenticated_tenant(router.current_event, Scope.WEBHOOKS_ADMIN),
            path_id(endpoint_id, ENDPOINT),
        )
        delete_endpoint(endpoints(), tenant_id, endpoint)
        return Response(status_code=204, body="")

    @router.post(
        "/webhook-endpoints/<endpoint_id>/rotate-secret",
        summary="New signing secret (shown once); the old one also signs for 24 hours",
        responses={**documented(EndpointWithSecret, "Rotated"), **problem_responses(401, 404)},
        tags=TAGS,
        **needs(Scope.WEBHOOKS_ADMIN),
    )
    def rotate(endpoint_id: str) -> Response[str]:
        tenant_id, endpoint = (
            authenticated_tenant(router.current_event, Scope.WEBHOOKS_ADMIN),
            path_id(endpoint_id, ENDPOINT),
        )
        return json_response(200, rotate_secret(endpoints(), tenant_id, endpoint))

    @router.get(
        "/webhook-endpoints/<endpoint_id>/deliveries",
        summary="The endpoint's deliveries, newest first, with every attempt",
        responses={**documented(DeliveryList, "Deliveries"), **problem_responses(401, 404, 422)},
        tags=TAGS,
        **needs(Scope.WEBHOOKS_ADMIN),
    )
    def deliveries(endpoint_id: str, limit: Annotated[int, Query(ge=1, le=100)] = 20) -> Response[str]:
        tenant_id, endpoint = (
            authenticated_tenant(router.current_event, Scope.WEBHOOKS_ADMIN),
            path_id(endpoint_id, ENDPOINT),
        )
        return json_response(200, list_deliveries(endpoints().db, tenant_id, endpoint, limit))

    @router.post(
        "/webhook-endpoints/<endpoint_id>/deliveries/<delivery_id>/replay",
        summary="Send one delivery again, with the same webhook-id",
        responses={**documented(ReplayResult, "Replay started", 202), **problem_responses(401, 404, 503)},
        tags=TAGS,
        **needs(Scope.WEBHOOKS_ADMIN),
    )
    def replay_one(endpoint_id: str, delivery_id: str) -> Response[str]:
        # The ids first: one that is not a UUID is the 404 it is everywhere, even where replays answer 503.
        tenant_id, endpoint = (
            authenticated_tenant(router.current_event, Scope.WEBHOOKS_ADMIN),
            path_id(endpoint_id, ENDPOINT),
        )
        delivery = path_id(delivery_id, DELIVERY)
        return json_response(202, replay_delivery(replays(), tenant_id, endpoint, delivery))

    @router.post(
        "/webhook-endpoints/<endpoint_id>/replay",
        summary="Send again every delivery that gave up since a time",
        responses={
            **documented(ReplayResult, "Replays started", 202),
            **problem_responses(400, 401, 404, 415, 422, 503),
        },
        tags=TAGS,
        **needs(Scope.WEBHOOKS_ADMIN),
    )
    def replay_since(endpoint_id: str, request: Annotated[ReplaySince, Body()]) -> Response[str]:
        tenant_id, endpoint = (
            authenticated_tenant(router.current_event, Scope.WEBHOOKS_ADMIN),
            path_id(endpoint_id, ENDPOINT),
        )
        return json_response(202, replay_failed_since(replays(), tenant_id, endpoint, request.since))

    return router
