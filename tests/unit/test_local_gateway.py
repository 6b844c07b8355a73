"""The local API Gateway stand-in: an authorizer that fails (its database away, say) is answered as the
deployed gateway answers it, and requests served at once on several threads each see their own event."""

from __future__ import annotations

import threading
from collections.abc import Callable

import psycopg
import pytest
from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response
from aws_lambda_powertools.event_handler.api_gateway import BaseRouter
from aws_lambda_powertools.event_handler.router import APIGatewayRouter

from tollgate.api.surface import Operation
from tollgate_dev.local.client import ApiClient
from tollgate_dev.local.gateway import LocalGateway, RequestScopedResolver, build_event

# How long one thread may wait for the other on a loaded machine; it runs out only when a test is failing.
PATIENCE_SECONDS = 60


def test_an_authorizer_failure_is_a_503_with_retry_after_and_the_api_is_not_called():
    called = []

    def authorizer(token, arn):
        raise psycopg.OperationalError("connection refused")

    gateway = LocalGateway(api=lambda event, context: called.append(event), authorizer=authorizer, port=0)
    gateway.start()
    try:
        response = ApiClient(gateway.url, "tg_some_key").request("GET", "/extraction-jobs")
    finally:
        gateway.stop()

    assert response.status == 503
    assert response.header("Retry-After") == "5"
    assert response.header("Content-Type") == "application/problem+json"
    assert response.json["type"].endswith("/dependency-unavailable")
    assert called == []


SURFACE = (
    Operation("/things/{thing_id}", "GET"),
    Operation("/status", "GET", public="a health check reads it"),
)


def test_only_the_surfaces_operations_reach_the_authorizer_and_the_api():
    authorized, called = [], []

    def authorizer(token, arn):
        authorized.append(arn)
        return {"principalId": "key", "context": {"tenant_id": "t"}}

    def api(event, context):
        called.append(event)
        return {"statusCode": 200, "headers": {}, "body": "ok"}

    gateway = LocalGateway(api=api, authorizer=authorizer, port=0, surface=SURFACE)
    gateway.start()
    try:
        client = ApiClient(gateway.url, "tg_some_key")
        undeclared = [
            client.request(method, path)
            for method, path in (("POST", "/things/1"), ("GET", "/things"), ("GET", "/other"))
        ]
        thing = client.request("GET", "/things/t-1?verbose=1")
        status = ApiClient(gateway.url).request("GET", "/status")
    finally:
        gateway.stop()

    for response in undeclared:
        assert response.status == 404
        assert response.header("Content-Type") == "application/problem+json"
        assert response.json["detail"] == "No such resource or method."
    assert (thing.status, status.status) == (200, 200)
    # The authorizer ran once, for the declared operation behind it; the public one needs no key.
    assert len(authorized) == 1 and authorized[0].endswith("/GET/things/t-1")
    first, second = called
    assert (first["resource"], first["pathParameters"]) == ("/things/{thing_id}", {"thing_id": "t-1"})
    assert first["queryStringParameters"] == {"verbose": "1"}
    assert (second["resource"], second["pathParameters"]) == ("/status", None)
    assert "authorizer" not in second["requestContext"]


# A route gets the router it is registered on, and reads the request's event through it.
Route = Callable[[BaseRouter], str]


def route_on_the_resolver(app: APIGatewayRestResolver, route: Route) -> None:
    app.get("/who")(lambda: Response(200, "text/plain", route(app)))


def route_on_a_router(app: APIGatewayRestResolver, route: Route) -> None:
    """As the API's routes are registered: on a router of their own that the resolver includes."""
    router = APIGatewayRouter()
    router.get("/who")(lambda: Response(200, "text/plain", route(router)))
    app.include_router(router)


def resolve_two_at_once(
    resolver_class: type[APIGatewayRestResolver],
    register: Callable[[APIGatewayRestResolver, Route], None] = route_on_the_resolver,
) -> dict[str, tuple[str, str]]:
    """Request a enters its route and waits; request b is resolved meanwhile; then a reads its event again."""
    a_inside, b_done = threading.Event(), threading.Event()
    seen: dict[str, tuple[str, str]] = {}

    def who(events: BaseRouter) -> str:
        name = events.current_event.headers["x-who"]
        if name == "a":
            a_inside.set()
            assert b_done.wait(PATIENCE_SECONDS), "request b was never resolved"
        seen[name] = (name, events.current_event.headers["x-who"])
        return name

    def make() -> APIGatewayRestResolver:
        app = resolver_class()
        register(app, who)
        return app

    first, second = make(), make()
    thread = threading.Thread(
        target=lambda: first.resolve(build_event("GET", "/who", {"x-who": "a"}, b""), None)
    )
    thread.start()
    assert a_inside.wait(PATIENCE_SECONDS), "request a never entered its route"
    second.resolve(build_event("GET", "/who", {"x-who": "b"}, b""), None)
    b_done.set()
    thread.join(PATIENCE_SECONDS)
    assert not thread.is_alive(), "request a never finished"
    return seen


def test_powertools_resolvers_share_the_event_being_resolved():
    """Why RequestScopedResolver exists: with the stock resolver, request a reads request b's event."""
    assert resolve_two_at_once(APIGatewayRestResolver)["a"] == ("a", "b")


@pytest.mark.parametrize("register", [route_on_the_resolver, route_on_a_router])
def test_each_request_scoped_resolver_keeps_its_own_event(register):
    assert resolve_two_at_once(RequestScopedResolver, register) == {"a": ("a", "a"), "b": ("b", "b")}
