"""The connections store's contract, on DynamoDB (moto over HTTP) and in memory alike: a connection is found
by id and by tenant, a subscribe turns its feed on, one sender at a time holds it (the lease), the feed moves
only from where its holder found it, and keys due for a check are found."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from uuid import uuid4

import boto3
import pytest

from tollgate.notify.connections import (
    BY_TENANT_INDEX,
    TTL_ATTRIBUTE,
    Connection,
    ConnectionStore,
    DynamoDbConnections,
    InMemoryConnections,
)
from tollgate_dev.local.aws import serialize_moto_dynamodb

pytestmark = pytest.mark.integration

EXPIRES = 2_000_000_000
NOW_MS = 1_800_000_000_000


def create_table(client: Any, name: str) -> None:
    """The table as the Notifications stack defines it: connection id key, TTL, and the tenant index."""
    client.create_table(
        TableName=name,
        BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[
            {"AttributeName": "connection_id", "AttributeType": "S"},
            {"AttributeName": "tenant_id", "AttributeType": "S"},
        ],
        KeySchema=[{"AttributeName": "connection_id", "KeyType": "HASH"}],
        GlobalSecondaryIndexes=[
            {
                "IndexName": BY_TENANT_INDEX,
                "KeySchema": [{"AttributeName": "tenant_id", "KeyType": "HASH"}],
                "Projection": {"ProjectionType": "ALL"},
            }
        ],
    )
    client.update_time_to_live(
        TableName=name, TimeToLiveSpecification={"Enabled": True, "AttributeName": TTL_ATTRIBUTE}
    )


@pytest.fixture(scope="module", autouse=True)
def atomic_moto(local_aws: Any) -> Iterator[None]:
    # moto checks a condition and applies the update in two steps; DynamoDB does both atomically.
    undo = serialize_moto_dynamodb()
    yield
    undo()


@pytest.fixture(params=["memory", "dynamodb"])
def store(request: pytest.FixtureRequest) -> ConnectionStore:
    if request.param == "memory":
        return InMemoryConnections()
    client = boto3.client("dynamodb")
    name = f"connections-{secrets.token_hex(4)}"
    create_table(client, name)
    return DynamoDbConnections(client, name)


def connection(tenant=None, key=None, checked=100.0) -> Connection:
    return Connection(f"c-{secrets.token_hex(6)}", tenant or uuid4(), key or uuid4(), 100.0, checked)


def test_a_connection_is_found_by_id_and_by_its_tenant_only(store):
    tenant, other = uuid4(), uuid4()
    mine = [connection(tenant) for _ in range(3)]
    for item in [*mine, connection(other)]:
        store.put(item, EXPIRES)

    assert store.get(mine[0].connection_id) == mine[0]
    assert {c.connection_id for c in store.for_tenant(tenant)} == {c.connection_id for c in mine}
    assert store.count_for_tenant(tenant, 10) == 3
    assert store.count_for_tenant(tenant, 2) == 2, "counted up to the cap, never past it"
    store.delete(mine[0].connection_id)
    assert store.get(mine[0].connection_id) is None
    assert store.count_for_tenant(tenant, 10) == 2


def test_a_subscribe_turns_the_feed_on_with_its_filters_and_a_gone_connection_says_so(store):
    item = connection()
    store.put(item, EXPIRES)

    assert store.subscribe(
        item.connection_id, 7, frozenset({"j1"}), frozenset({"invoice_extraction"}), EXPIRES
    )
    found = store.get(item.connection_id)
    assert found is not None and (found.subscribed, found.last_seq) == (True, 7)
    assert found.wants("j1", "invoice_extraction") and not found.wants("j2", "invoice_extraction")
    assert not store.subscribe("no-such-connection", 0, frozenset(), frozenset(), EXPIRES)


def test_one_sender_at_a_time_holds_a_connection_until_its_lease_runs_out(store):
    item = connection()
    store.put(item, EXPIRES)
    assert store.take_lease(item.connection_id, "a", NOW_MS + 30_000, NOW_MS) is None, "not subscribed yet"
    store.subscribe(item.connection_id, 0, frozenset(), frozenset(), EXPIRES)

    held = store.take_lease(item.connection_id, "a", NOW_MS + 30_000, NOW_MS)
    assert held is not None and held.last_seq == 0
    assert store.take_lease(item.connection_id, "b", NOW_MS + 30_000, NOW_MS + 1) is None
    assert store.take_lease(item.connection_id, "b", NOW_MS + 90_000, NOW_MS + 30_001) is not None, (
        "a holder that died is taken over once its lease ran out"
    )
    store.release(item.connection_id, "a")  # no longer the holder: changes nothing
    assert store.take_lease(item.connection_id, "c", NOW_MS + 90_000, NOW_MS + 30_002) is None
    store.release(item.connection_id, "b")
    assert store.take_lease(item.connection_id, "c", NOW_MS + 90_000, NOW_MS + 30_003) is not None


def test_the_feed_moves_only_for_its_holder_and_only_from_where_it_found_it(store):
    item = connection()
    store.put(item, EXPIRES)
    store.subscribe(item.connection_id, 5, frozenset(), frozenset(), EXPIRES)
    store.take_lease(item.connection_id, "a", NOW_MS + 30_000, NOW_MS)

    assert not store.advance(item.connection_id, "b", 5, 9), "not the holder"
    assert not store.advance(item.connection_id, "a", 4, 9), "the feed was not where the holder thinks"
    assert store.advance(item.connection_id, "a", 5, 9)
    store.subscribe(item.connection_id, 2, frozenset(), frozenset(), EXPIRES)  # the client starts over
    assert not store.advance(item.connection_id, "a", 9, 12), "a new subscribe moved the feed"
    found = store.get(item.connection_id)
    assert found is not None and found.last_seq == 2


def test_connections_whose_key_is_due_for_a_check_are_found(store):
    stale, fresh = connection(checked=100.0), connection(checked=500.0)
    store.put(stale, EXPIRES)
    store.put(fresh, EXPIRES)

    assert [c.connection_id for c in store.key_check_due(before=300.0, limit=10)] == [stale.connection_id]
    store.mark_key_checked(stale.connection_id, 600.0)
    assert store.key_check_due(before=300.0, limit=10) == []


WINDOW = 1_800_000_000  # a window's start, epoch seconds


def test_a_connection_counts_its_replays_up_to_the_limit_in_each_window_and_only_while_it_exists(store):
    item = connection()
    store.put(item, EXPIRES)

    assert [store.count_replay(item.connection_id, WINDOW, 3) for _ in range(5)] == [True] * 3 + [False] * 2
    assert store.count_replay(item.connection_id, WINDOW + 60, 3), "a new window starts the count again"
    assert not store.count_replay(item.connection_id, WINDOW, 3), "a clock behind never starts it again"
    assert not store.count_replay("no-such-connection", WINDOW, 3)
    assert store.get("no-such-connection") is None, "counting made no item of a gone connection"
    store.put(item, EXPIRES)  # the same id connects again: a fresh connection with a fresh count
    assert store.count_replay(item.connection_id, WINDOW + 60, 1)


def test_a_tenants_replays_are_counted_together_apart_from_its_connections_and_other_tenants(store):
    tenant, other = uuid4(), uuid4()
    mine = connection(tenant, checked=100.0)
    store.put(mine, EXPIRES)

    counted = [store.count_tenant_replay(tenant, WINDOW, 2, WINDOW + 120) for _ in range(3)]
    assert counted == [True, True, False]
    assert store.count_tenant_replay(other, WINDOW, 2, WINDOW + 120), "another tenant has its own count"
    assert store.count_tenant_replay(tenant, WINDOW + 60, 2, WINDOW + 180)
    # The tenant's counter is no connection: not found by tenant, counted or due for a key check.
    assert [c.connection_id for c in store.for_tenant(tenant)] == [mine.connection_id]
    assert store.count_for_tenant(tenant, 10) == 1
    assert [c.connection_id for c in store.key_check_due(before=300.0, limit=10)] == [mine.connection_id]


def test_replays_counted_at_once_never_pass_the_limit(store):
    tenant = uuid4()
    item = connection(tenant)
    store.put(item, EXPIRES)

    with ThreadPoolExecutor(max_workers=8) as pool:
        mine = list(pool.map(lambda _: store.count_replay(item.connection_id, WINDOW, 5), range(16)))
        theirs = list(
            pool.map(lambda _: store.count_tenant_replay(tenant, WINDOW, 5, WINDOW + 120), range(16))
        )

    assert mine.count(True) == 5 and theirs.count(True) == 5
