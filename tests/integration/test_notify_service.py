"""Live notification use cases on the real database (the tenant's event sequence written by the job state
trigger), with the in-memory connections store and a recording sender: a subscribe replays from its cursor and
the feed goes on live with nothing missed or repeated; a delivery that finds another sender at work leaves the
events to it, and that sender picks them up before it stops; a cursor too far back gets a resync; filters
narrow what is sent; a revoked key's connection is closed."""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable
from dataclasses import replace
from typing import Any
from uuid import UUID

import pytest

from tests.support import invoice_request
from tollgate.core.clock import SystemClock
from tollgate.notify.connections import InMemoryConnections
from tollgate.notify.service import (
    NotifyDeps,
    ReplayAllowance,
    TooManyConnections,
    catch_up,
    close_revoked,
    connect,
    notify_tenants,
    subscribe,
)
from tollgate.tenants.keys import revoke_key

pytestmark = pytest.mark.integration

TEXT = "INVOICE\nSupplier: Nordwind Logistik GmbH\nTotal: 10.00 EUR"


class RecordingSender:
    """Each connection's messages as sent; ``during_post`` runs inside a post (another actor meanwhile)."""

    def __init__(self) -> None:
        self.sent: dict[str, list[dict[str, Any]]] = {}
        self.closed: list[str] = []
        self.gone: set[str] = set()
        self.during_post: Callable[[], None] | None = None

    def post(self, connection_id: str, body: bytes) -> bool:
        if connection_id in self.gone:
            return False
        self.sent.setdefault(connection_id, []).append(json.loads(body))
        hook, self.during_post = self.during_post, None
        if hook is not None:
            hook()
        return True

    def close(self, connection_id: str) -> None:
        self.closed.append(connection_id)

    def changes(self, connection_id: str) -> list[int]:
        return [m["sequence"] for m in self.sent.get(connection_id, []) if m["type"] == "job.state_changed"]

    def kinds(self, connection_id: str) -> list[str]:
        return [m["type"] for m in self.sent.get(connection_id, [])]


@pytest.fixture
def deps(system_db) -> NotifyDeps:
    return NotifyDeps(
        db=system_db,
        connections=InMemoryConnections(),
        sender=RecordingSender(),
        clock=SystemClock(),
        replay_max_events=1_000,
        replay_max_hours=24,
        max_connections_per_tenant=3,
        connection_ttl_seconds=3_600,
        key_check_seconds=60,
        replay_allowance=ReplayAllowance(per_connection=1_000, per_tenant=1_000, seconds=60),
    )


def submit(tenant, count: int) -> list[str]:
    return [
        tenant.client.submit(
            invoice_request(TEXT + f"\nRef {secrets.token_hex(4)}"), secrets.token_hex(6)
        ).json["job_id"]
        for _ in range(count)
    ]


def cancel(tenant, job_id: str) -> None:
    assert tenant.client.request("POST", f"/extraction-jobs/{job_id}/cancel").status == 200


def latest_seq(deps: NotifyDeps, tenant_id: UUID) -> int:
    with deps.db.transaction() as conn:
        row = conn.execute(deps.db.q.tenant_event_window, {"tenant_id": tenant_id, "after_seq": 0}).fetchone()
    return int(row["latest"])


def open_connection(deps: NotifyDeps, tenant, name: str = "c1") -> str:
    connect(deps, name, tenant.tenant_id, _key_id(deps, tenant))
    return name


def _key_id(deps: NotifyDeps, tenant) -> UUID:
    with deps.db.transaction() as conn:
        (key_id,) = (
            conn.execute(
                "SELECT key_id FROM api_keys WHERE tenant_id = %s ORDER BY created_at LIMIT 1",
                (tenant.tenant_id,),
            )
            .fetchone()
            .values()
        )
    return UUID(str(key_id))


def test_a_subscribe_replays_from_its_cursor_and_the_feed_goes_on_live_without_gaps_or_repeats(
    deps, tenant, make_tenant
):
    jobs = submit(tenant, 3)  # sequence 1..3: each job's READY
    submit(make_tenant("other"), 2)  # another tenant's sequence: never seen here
    sender = deps.sender
    connection = open_connection(deps, tenant)

    subscribe(deps, connection, json.dumps({"action": "subscribe", "cursor": 1}))
    cancel(tenant, jobs[0])  # sequence 4
    cancel(tenant, jobs[1])  # sequence 5
    notify_tenants(deps, {tenant.tenant_id: 5})
    notify_tenants(deps, {tenant.tenant_id: 5})  # a repeated notification sends nothing again

    assert sender.kinds(connection)[0] == "subscribed"
    assert sender.sent[connection][0]["cursor"] == 1
    assert sender.changes(connection) == [2, 3, 4, 5]
    states = [(m["job_id"], m["state"]) for m in sender.sent[connection] if m["type"] == "job.state_changed"]
    assert states[-2:] == [(jobs[0], "CANCELLED"), (jobs[1], "CANCELLED")]


def test_a_delivery_that_finds_another_sender_at_work_leaves_its_events_to_it_and_none_is_lost(deps, tenant):
    jobs = submit(tenant, 2)
    sender = deps.sender
    connection = open_connection(deps, tenant)
    subscribe(deps, connection, json.dumps({"action": "subscribe", "cursor": 0}))
    first_message_count = len(sender.sent[connection])

    # Given a sender at work on the connection when another job changes and its notification comes in.
    def meanwhile() -> None:
        cancel(tenant, jobs[1])
        assert notify_tenants(deps, {tenant.tenant_id: latest_seq(deps, tenant.tenant_id)}) == 0

    cancel(tenant, jobs[0])
    sender.during_post = meanwhile
    catch_up(deps, connection)

    # Then the sender at work delivered it too, in order, before it let go.
    assert sender.changes(connection) == [1, 2, 3, 4]
    assert len(sender.sent[connection]) == first_message_count + 2


def test_a_cursor_further_back_than_the_replay_allows_gets_a_resync_and_the_feed_goes_on_from_the_latest(
    deps, tenant
):
    submit(tenant, 4)
    deps = NotifyDeps(**{**deps.__dict__, "replay_max_events": 2})
    connection = open_connection(deps, tenant)

    subscribe(deps, connection, json.dumps({"action": "subscribe", "cursor": 0}))
    jobs = submit(tenant, 1)
    notify_tenants(deps, {tenant.tenant_id: 5})

    sent = deps.sender.sent[connection]
    assert [m["type"] for m in sent[:2]] == ["resync", "subscribed"]
    assert (sent[0]["latest"], sent[0]["reason"], sent[1]["cursor"]) == (4, "too_far_behind", 4)
    assert deps.sender.changes(connection) == [5] and sent[-1]["job_id"] == jobs[0]


def test_a_cursor_past_the_latest_event_or_a_bad_message_gets_an_error_and_changes_nothing(deps, tenant):
    submit(tenant, 1)
    connection = open_connection(deps, tenant)

    subscribe(deps, connection, json.dumps({"action": "subscribe", "cursor": 99}))
    subscribe(deps, connection, "{not json")

    assert deps.sender.kinds(connection) == ["error", "error"]
    assert not deps.connections.get(connection).subscribed


def test_a_cursor_at_the_top_of_the_range_or_beyond_it_gets_an_error_and_the_feed_goes_on_unchanged(
    deps, tenant
):
    jobs = submit(tenant, 2)
    connection = open_connection(deps, tenant)
    subscribe(deps, connection, json.dumps({"action": "subscribe", "cursor": 0}))
    before = deps.connections.get(connection)

    # When the client asks for cursors no tenant's sequence reaches, or that are no cursor at all.
    cursors = ["9223372036854775807", "9223372036854775808", "1" + "0" * 30, "1" + "0" * 5_000, "-1", "2.5"]
    for cursor in cursors:
        subscribe(deps, connection, f'{{"action": "subscribe", "cursor": {cursor}}}')
    cancel(tenant, jobs[0])  # sequence 3
    notify_tenants(deps, {tenant.tenant_id: 3})

    # Then each gets an error saying what is wrong with it, nothing is written, and the feed goes on.
    replies = deps.sender.sent[connection]
    errors = [m for m in replies if m["type"] == "error"]
    assert [m["status"] for m in errors] == [400] * len(cursors)
    assert "past the tenant's latest event (2)" in errors[0]["detail"], "2^63-1 is a cursor past the end"
    assert all("cursor" in m["detail"] for m in errors), [m["detail"] for m in errors]
    assert deps.connections.get(connection) == replace(before, last_seq=3)
    assert deps.sender.changes(connection) == [1, 2, 3]


def test_filters_narrow_what_is_sent_but_the_cursor_counts_every_event(deps, tenant):
    jobs = submit(tenant, 3)
    connection = open_connection(deps, tenant)

    subscribe(deps, connection, json.dumps({"action": "subscribe", "cursor": 0, "job_ids": [jobs[2]]}))

    assert deps.sender.changes(connection) == [3]
    assert deps.connections.get(connection).last_seq == 3


def test_the_tenants_cap_refuses_the_next_connection(deps, tenant):
    for index in range(3):
        open_connection(deps, tenant, f"c{index}")
    with pytest.raises(TooManyConnections):
        open_connection(deps, tenant, "c3")


def test_a_revoked_keys_connection_is_closed_by_the_sweep_once_its_check_is_due(deps, tenant, system_db):
    connection = open_connection(deps, tenant)
    assert close_revoked(deps) == 0  # checked just now: not due

    revoke_key(system_db, deps.clock, tenant.tenant_id, _key_id(deps, tenant))
    due = NotifyDeps(**{**deps.__dict__, "key_check_seconds": 0})
    assert close_revoked(due) == 1

    assert deps.sender.closed == [connection] and deps.connections.get(connection) is None


def test_a_gone_connection_is_forgotten_when_a_post_finds_it_gone(deps, tenant):
    submit(tenant, 1)
    connection = open_connection(deps, tenant)
    deps.sender.gone.add(connection)

    subscribe(deps, connection, json.dumps({"action": "subscribe", "cursor": 0}))

    assert deps.connections.get(connection) is None
