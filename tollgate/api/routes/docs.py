"""GET /openapi.json: the API's own description, public: API Gateway serves it without a key."""

from __future__ import annotations

from collections.abc import Callable

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.router import APIGatewayRouter

from tollgate.api.routes.shared import new_router
from tollgate.api.surface import public


def build_router(document: Callable[[], str]) -> APIGatewayRouter:
    """``document`` renders the description of the resolver this router is included in."""
    router = new_router()

    @router.get(
        "/openapi.json",
        include_in_schema=False,
        **public(
            "GET /openapi.json serves the public description of the API so clients can generate code; the "
            "API Lambda renders it from its route definitions and reads no tenant data for it."
        ),
    )
    def openapi() -> Response[str]:
        return Response(status_code=200, content_type="application/json", body=document())

    return router
