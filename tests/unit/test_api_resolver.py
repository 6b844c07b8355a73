"""Two requests resolved at once on two threads each see their own event (the local gateway's case)."""

from __future__ import annotations

import threading

from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response

from tollgate.api.app import RequestScopedResolver
from tollgate_dev.local.gateway import build_event

# How long one thread may wait for the other on a loaded machine; it runs out only when a test is failing.
PATIENCE_SECONDS = 60


def resolve_two_at_once(resolver_class: type[APIGatewayRestResolver]) -> dict[str, tuple[str, str]]:
    """Request a enters its route and waits; request b is resolved meanwhile; then a reads its event again."""
    a_inside, b_done = threading.Event(), threading.Event()
    seen: dict[str, tuple[str, str]] = {}

    def make() -> APIGatewayRestResolver:
        app = resolver_class()

        @app.get("/who")
        def who() -> Response[str]:
            name = app.current_event.headers["x-who"]
            if name == "a":
                a_inside.set()
                assert b_done.wait(PATIENCE_SECONDS), "request b was never resolved"
            seen[name] = (name, app.current_event.headers["x-who"])
            return Response(200, "text/plain", name)

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


def test_each_request_scoped_resolver_keeps_its_own_event():
    assert resolve_two_at_once(RequestScopedResolver) == {"a": ("a", "a"), "b": ("b", "b")}
