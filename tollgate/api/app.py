"""The acceptance API of one process: Powertools' REST resolver with pydantic validation, each resource's
router, the error handlers, and ``handle``, which a Lambda (or the local gateway) calls once per event."""

from __future__ import annotations

import json
import queue
from typing import Any, cast

from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response
from aws_lambda_powertools.event_handler.openapi.models import HTTPBearer
from aws_lambda_powertools.utilities.data_classes import APIGatewayProxyEvent
from aws_lambda_powertools.utilities.data_classes.common import BaseProxyEvent

from tollgate import __version__
from tollgate.api.deps import ApiDeps
from tollgate.api.error_handlers import register_error_handlers
from tollgate.api.json_body import load_request_json
from tollgate.api.precheck import precheck
from tollgate.api.problems import PROBLEM_CONTENT_TYPE
from tollgate.api.routes import docs, jobs, webhooks
from tollgate.core.observability import log_context


class RequestScopedResolver(APIGatewayRestResolver):
    """Powertools' REST resolver with the request kept on the resolver itself.

    Powertools stores the event being resolved on a class attribute (``BaseRouter.current_event``), shared
    by every resolver in the process. One request per process at a time, as in Lambda, never notices; the
    local gateway serves requests on several threads (one resolver each, see ``AppPool``), where a request
    would read another thread's event: its body, headers or tenant. Setting the event on the instance while
    it is built makes every read through the resolver (our routes and Powertools' validation) see its own.
    """

    def _to_proxy_event(self, event: dict[str, Any]) -> BaseProxyEvent:
        proxy = super()._to_proxy_event(event)
        self.current_event = cast(APIGatewayProxyEvent, proxy)
        return proxy


def create_app(deps: ApiDeps) -> APIGatewayRestResolver:
    app = RequestScopedResolver(enable_validation=True, json_body_deserializer=load_request_json)
    # A router per resource and per resolver: routers made fresh here each belong to this resolver only.
    app.include_router(jobs.build_router(deps))
    app.include_router(webhooks.build_router(deps))
    app.include_router(docs.build_router(lambda: openapi_document(app)))
    register_error_handlers(app)
    return app


def openapi_document(app: APIGatewayRestResolver) -> str:
    document = app.get_openapi_json_schema(
        title="Tollgate",
        version=__version__,
        description="Asynchronous invoice extraction for many tenants. Errors are application/problem+json.",
        security_schemes={"bearer": HTTPBearer(description="Authorization: Bearer <API key>")},
        security=[{"bearer": []}],
    )
    # Stable, diffable formatting for the committed copy.
    return json.dumps(json.loads(document), indent=2, sort_keys=True) + "\n"


def export_openapi() -> str:
    """The OpenAPI document without any running dependency: routes are only described, never called."""
    return openapi_document(create_app(cast(ApiDeps, None)))


def handle(app: APIGatewayRestResolver, deps: ApiDeps, event: dict[str, Any], context: Any) -> dict[str, Any]:
    refusal = precheck(event, deps.max_request_bytes)
    if refusal is not None:
        return _raw(refusal)
    request = event.get("requestContext") or {}
    with log_context(
        tenant_id=(request.get("authorizer") or {}).get("tenant_id"), request_id=request.get("requestId")
    ):
        result: dict[str, Any] = app.resolve(event, context)
    return result


class AppPool:
    """Several resolvers for a server that handles requests on many threads (the local gateway).

    A Powertools resolver keeps the request being handled on the resolver itself, so one resolver must
    never serve two requests at once; in Lambda a process handles one request at a time and needs no pool.
    """

    def __init__(self, deps: ApiDeps, size: int) -> None:
        self._deps = deps
        self._idle: queue.SimpleQueue[APIGatewayRestResolver] = queue.SimpleQueue()
        for _ in range(size):
            self._idle.put(create_app(deps))

    def handle(self, event: dict[str, Any], context: Any) -> dict[str, Any]:
        app = self._idle.get()
        try:
            return handle(app, self._deps, event, context)
        finally:
            self._idle.put(app)


def _raw(response: Response[str]) -> dict[str, Any]:
    return {
        "statusCode": response.status_code,
        "headers": {
            "Content-Type": response.content_type or PROBLEM_CONTENT_TYPE,
            **(response.headers or {}),
        },
        "body": response.body,
        "isBase64Encoded": False,
    }
