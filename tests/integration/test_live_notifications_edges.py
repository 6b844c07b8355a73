"""The edges of the live feed (issue 31), over real WebSockets on 127.0.0.1: the local WebSocket server with the
notify use cases on real PostgreSQL, its time injected. A cursor no sequence reaches gets an error on a
connection that stays open; a flood of subscribes from cursor 0 replays only as often as the connection's and
the tenant's allowances let it, and another tenant's feed is untouched."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import SecretStr
from websockets.sync.client import ClientConnection, connect

from tests.support import invoice_request
from tollgate.core.clock import FakeClock
from tollgate.db import Database
from tollgate.notify.connections import InMemoryConnections
from tollgate.notify.service import NotifyDeps, notify_tenants
from tollgate.settings import NotificationSettings
from tollgate.tenants.keys import ApiKeyResolver
from tollgate.wiring import build_notify
from tollgate_dev.local.notifications import LocalWebSocketServer, SocketSender

pytestmark = pytest.mark.integration

# Bounds on waits for real I/O on a loaded machine: they run out only when a test is failing.
WAIT_SECONDS = 60.0
TEXT = "INVOICE\nSupplier: Nordwind Logistik GmbH\nTotal: 10.00 EUR"
# Small allowances, so that a flood runs into them at once.
PER_CONNECTION, PER_TENANT, WINDOW_SECONDS = 3, 5, 60
FLOOD = 1_000


class Feed:
    """The local WebSocket server on its own notify deps, with a clock that moves only when told to."""

    def __init__(self, deps: NotifyDeps, server: LocalWebSocketServer, clock: FakeClock) -> None:
        self.deps, self.server, self.clock = deps, server, clock

    def open(self, api_key: str) -> ClientConnection:
        return connect(
            self.server.url,
            additional_headers={"Authorization": f"Bearer {api_key}"},
            compression=None,
            open_timeout=WAIT_SECONDS,
        )


@pytest.fixture
def feed(system_db: Database, app_db: Database, database_url: str) -> Iterator[Feed]:
    clock = FakeClock(datetime.now(UTC))
    settings = NotificationSettings(
        database_url=SecretStr(database_url),
        connections_table="in-memory",
        websocket_endpoint="local-sockets",
        replays_per_connection=PER_CONNECTION,
        replays_per_tenant=PER_TENANT,
        replay_allowance_seconds=WINDOW_SECONDS,
    )
    sender = SocketSender()
    deps = build_notify(settings, system_db, connections=InMemoryConnections(), sender=sender, clock=clock)
    server = LocalWebSocketServer(deps, sender, ApiKeyResolver(app_db, clock, ttl_seconds=60)).start()
    try:
        yield Feed(deps, server, clock)
    finally:
        server.stop()


def submit(tenant: Any, count: int) -> list[str]:
    return [
        tenant.client.submit(
            invoice_request(TEXT + f"\nRef {secrets.token_hex(4)}"), secrets.token_hex(6)
        ).json["job_id"]
        for _ in range(count)
    ]


def subscribe(ws: ClientConnection, cursor: Any) -> None:
    ws.send(json.dumps({"action": "subscribe", "cursor": cursor}))


def receive_answers(ws: ClientConnection, answers: int) -> list[dict[str, Any]]:
    """Every message up to the ``answers``-th answer to a subscribe (``subscribed`` or ``error``): each
    subscribe gets exactly one, after its resync and before its replay, so the replays of all but the last
    are among them; the last one's replay is read by ``receive_changes``."""
    received: list[dict[str, Any]] = []
    while answers:
        message = json.loads(ws.recv(timeout=WAIT_SECONDS))
        received.append(message)
        answers -= message["type"] in {"subscribed", "error"}
    return received


def receive_changes(ws: ClientConnection, until_sequence: int) -> list[dict[str, Any]]:
    """Messages up to the change with sequence ``until_sequence``."""
    received: list[dict[str, Any]] = []
    while not received or received[-1].get("sequence") != until_sequence:
        received.append(json.loads(ws.recv(timeout=WAIT_SECONDS)))
    return received


def changes(messages: list[dict[str, Any]]) -> list[int]:
    return [m["sequence"] for m in messages if m["type"] == "job.state_changed"]


def test_a_cursor_no_sequence_reaches_gets_an_error_on_a_connection_that_stays_open(feed, tenant):
    submit(tenant, 2)  # sequence 1, 2
    cursors: list[Any] = [2**63 - 1, 2**63, 10**30, -1, 2.5, "5"]

    with feed.open(tenant.api_key) as ws:
        for cursor in cursors:
            subscribe(ws, cursor)
        answers = receive_answers(ws, len(cursors))
        # The connection is still open, and a good cursor still works on it.
        subscribe(ws, 0)
        replay = receive_changes(ws, until_sequence=2)

    assert [(m["type"], m["status"]) for m in answers] == [("error", 400)] * len(cursors)
    assert "past the tenant's latest event (2)" in answers[0]["detail"]
    assert all("cursor" in m["detail"] for m in answers), [m["detail"] for m in answers]
    assert [m["type"] for m in replay] == ["subscribed", "job.state_changed", "job.state_changed"]
    assert replay[0]["cursor"] == 0 and changes(replay) == [1, 2]


def flood(feed: Feed, api_key: str, subscribes: int) -> list[dict[str, Any]]:
    """A connection that sends ``subscribes`` subscribes from cursor 0 at once; every message it got for them."""
    with feed.open(api_key) as ws:
        for _ in range(subscribes):
            subscribe(ws, 0)
        return receive_answers(ws, subscribes)


def kinds(messages: list[dict[str, Any]]) -> dict[str, int]:
    counted: dict[str, int] = {}
    for message in messages:
        counted[message["type"]] = counted.get(message["type"], 0) + 1
    return counted


def test_a_flood_of_subscribes_on_one_connection_replays_only_its_allowance_and_the_feed_goes_on_live(
    feed, tenant, make_tenant
):
    jobs = submit(tenant, 4)  # sequence 1..4: each subscribe from cursor 0 would replay all four
    other = make_tenant("other")
    submit(other, 2)

    with feed.open(tenant.api_key) as ws:
        # When one connection sends a thousand subscribes from cursor 0 at once.
        for _ in range(FLOOD):
            subscribe(ws, 0)
        flooded = receive_answers(ws, FLOOD)

        # Then it got the replays of its allowance and, for every other subscribe, an error saying when to retry.
        assert kinds(flooded) == {
            "subscribed": PER_CONNECTION,
            "job.state_changed": PER_CONNECTION * 4,
            "error": FLOOD - PER_CONNECTION,
        }
        refused = [m for m in flooded if m["type"] == "error"]
        assert {(m["status"], m["retry_after"]) for m in refused} == {(429, refused[0]["retry_after"])}
        assert 1 <= refused[0]["retry_after"] <= WINDOW_SECONDS
        assert f"subscribe again in {refused[0]['retry_after']} s" in refused[0]["detail"]

        # And the connection stays open, its feed going on live: a new change reaches it as the notifier runs.
        tenant.client.request("POST", f"/extraction-jobs/{jobs[0]}/cancel")  # sequence 5
        notify_tenants(feed.deps, {tenant.tenant_id: 5})
        assert changes(receive_changes(ws, until_sequence=5)) == [5]

        # And once the retry time has passed, it replays again.
        feed.clock.advance(refused[0]["retry_after"])
        subscribe(ws, 0)
        again = receive_changes(ws, until_sequence=5)
        assert again[0]["type"] == "subscribed" and changes(again) == [1, 2, 3, 4, 5]

    # Another tenant's replay is not touched by the flood.
    with feed.open(other.api_key) as ws:
        subscribe(ws, 0)
        assert changes(receive_changes(ws, until_sequence=2)) == [1, 2]


def test_a_flood_across_a_tenants_connections_replays_only_the_tenants_allowance_and_not_another_tenants(
    feed, tenant, make_tenant
):
    submit(tenant, 4)
    other = make_tenant("other")
    submit(other, 2)
    connections = 4  # each allowed PER_CONNECTION: together more than the tenant's PER_TENANT

    # When the tenant's connections send a thousand subscribes from cursor 0 between them, all at once.
    with ThreadPoolExecutor(max_workers=connections) as pool:
        floods = list(
            pool.map(lambda _: flood(feed, tenant.api_key, FLOOD // connections), range(connections))
        )
    flooded = [message for messages in floods for message in messages]

    # Then the tenant got the replays of its allowance between them, and errors for the rest.
    assert kinds(flooded) == {
        "subscribed": PER_TENANT,
        "job.state_changed": PER_TENANT * 4,
        "error": FLOOD - PER_TENANT,
    }
    assert all(
        len([m for m in messages if m["type"] == "subscribed"]) <= PER_CONNECTION for messages in floods
    )
    assert {m["status"] for m in flooded if m["type"] == "error"} == {429}

    # And another tenant still replays in full, as often as its own allowance lets it.
    with feed.open(other.api_key) as ws:
        for _ in range(PER_CONNECTION):
            subscribe(ws, 0)
        replays = receive_answers(ws, PER_CONNECTION) + receive_changes(ws, until_sequence=2)
    assert kinds(replays) == {"subscribed": PER_CONNECTION, "job.state_changed": PER_CONNECTION * 2}
