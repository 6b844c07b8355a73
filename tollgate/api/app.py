"""The acceptance API of one process: Powertools' REST resolver with pydantic validation, each resource's
router, the error handlers, and ``handle``, which a Lambda (or the local gateway) calls once per event."""

from __future__ import annotations

import json
import weakref
from typing import Any, cast

from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response

from tollgate import __version__
from tollgate.api.deps import ApiDeps
from tollgate.api.error_handlers import register_error_handlers
from tollgate.api.json_body import load_request_json
from tollgate.api.precheck import precheck, scope_refusal
from tollgate.api.problems import PROBLEM_CONTENT_TYPE
from tollgate.api.routes import docs, jobs, reviews, usage, webhooks
from tollgate.api.surface import BEARER_SCHEME, http_surface
from tollgate.core.observability import log_context
from tollgate.events import openapi_webhooks
from tollgate.tenants.keys import Scope

# Each app's scope per operation, (method, resource) -> scope, read from its routes once when it is made.
ScopeTable = dict[tuple[str, str], Scope]
_SCOPES: weakref.WeakKeyDictionary[APIGatewayRestResolver, ScopeTable] = weakref.WeakKeyDictionary()


def create_app(
    deps: ApiDeps, resolver: type[APIGatewayRestResolver] = APIGatewayRestResolver
) -> APIGatewayRestResolver:
    """``resolver`` is Powertools' own in Lambda, where a process handles one request at a time; the local
    gateway, which serves several at once, passes one that keeps each request to its own resolver."""
    app = resolver(enable_validation=True, json_body_deserializer=load_request_json)
    # A router per resource and per resolver: routers made fresh here each belong to this resolver only.
    app.include_router(jobs.build_router(deps))
    app.include_router(webhooks.build_router(deps))
    app.include_router(reviews.build_router(deps))
    app.include_router(usage.build_router(deps))
    app.include_router(docs.build_router(lambda: openapi_document(app)))
    register_error_handlers(app)
    _SCOPES[app] = _scope_table(app)
    return app


def _scope_table(app: APIGatewayRestResolver) -> ScopeTable:
    return {(o.method, o.path): o.scope for o in http_surface(app) if o.scope is not None}


def openapi_document(app: APIGatewayRestResolver) -> str:
    # Powertools' OpenAPI models cost a tenth of a second to build; only this page and the export need them.
    from aws_lambda_powertools.event_handler.openapi.models import HTTPBearer

    document = app.get_openapi_json_schema(
        title="Tollgate",
        version=__version__,
        description="Asynchronous invoice extraction for many tenants. Errors are application/problem+json.",
        security_schemes={BEARER_SCHEME: HTTPBearer(description="Authorization: Bearer <API key>")},
        security=[{BEARER_SCHEME: []}],
    )
    parsed = json.loads(document)
    # What tenants' endpoints receive, from the same models as the committed event schemas.
    webhook_paths, webhook_schemas = openapi_webhooks()
    parsed["webhooks"] = webhook_paths
    parsed.setdefault("components", {}).setdefault("schemas", {}).update(webhook_schemas)
    # Stable, diffable formatting for the committed copy.
    return json.dumps(parsed, indent=2, sort_keys=True) + "\n"


def export_openapi() -> str:
    """The OpenAPI document without any running dependency: routes are only described, never called."""
    return openapi_document(create_app(cast(ApiDeps, None)))


def handle(app: APIGatewayRestResolver, deps: ApiDeps, event: dict[str, Any], context: Any) -> dict[str, Any]:
    # The scope first: a key that may not call an operation gets its 403 whatever it sent, before its body or
    # parameters are read (API Gateway names the operation's resource, so nothing of the request is parsed).
    scopes = _SCOPES.get(app) or _scope_table(app)
    refusal = scope_refusal(event, scopes.get((str(event.get("httpMethod")), str(event.get("resource")))))
    if refusal is None:
        refusal = precheck(event, deps.max_request_bytes)
    if refusal is not None:
        return _raw(refusal)
    request = event.get("requestContext") or {}
    with log_context(
        tenant_id=(request.get("authorizer") or {}).get("tenant_id"), request_id=request.get("requestId")
    ):
        result: dict[str, Any] = app.resolve(event, context)
    return result


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
