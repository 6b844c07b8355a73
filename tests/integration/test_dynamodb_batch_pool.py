"""The Batch API's pool on DynamoDB (moto over HTTP): the contract of tests/unit/test_batch_pool.py, and
what only a shared store shows: workers enqueueing at once never pass the limit (and the check of that
catches a write that skips its condition), the pool's item lives beside the immediate budget's, and an
unreachable table fails closed. Time is a FakeClock: nothing here sleeps."""

from __future__ import annotations

import secrets
import threading
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import boto3
import pytest

from tests.integration.test_dynamodb_limiter import closed_port_client
from tests.unit.test_batch_pool import (
    LIMITS,
    MODEL,
    POOL,
    BatchPoolContract,
    denied,
    enqueue,
    granted,
)
from tollgate.core.clock import FakeClock
from tollgate.execution.limiter.base import Denied, LimiterUnavailable, Permit, Reservation
from tollgate.execution.limiter.batch_pool import (
    ENQUEUED,
    DynamoDbBatchPool,
    Enqueue,
    Enqueued,
    PoolState,
    epoch_ms,
)
from tollgate.execution.limiter.dynamodb import POOL_ITEM_TTL_SECONDS, TTL_ATTRIBUTE, DynamoDbLimiter
from tollgate.execution.limiter.factory import build_batch_pool
from tollgate.settings import LimiterSettings
from tollgate_dev.local.aws import create_limiter_table, serialize_moto_dynamodb

pytestmark = pytest.mark.integration

THREADS = 24


@pytest.fixture(scope="module", autouse=True)
def atomic_moto(local_aws: Any) -> Iterator[None]:
    # moto checks a condition and applies the update in two steps; DynamoDB does both atomically.
    undo = serialize_moto_dynamodb()
    yield
    undo()


@pytest.fixture
def table() -> str:
    name = f"batch-pool-{secrets.token_hex(4)}"
    create_limiter_table(boto3.client("dynamodb"), name)
    return name


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


class TestDynamoDbBatchPool(BatchPoolContract):
    @pytest.fixture
    def pool(self, table: str, clock: FakeClock) -> DynamoDbBatchPool:
        return DynamoDbBatchPool(boto3.client("dynamodb"), table, clock, LIMITS)


def pool_item(table: str, model: str = MODEL) -> dict[str, Any]:
    key = DynamoDbBatchPool.key(POOL, model)
    item: dict[str, Any] = boto3.client("dynamodb").get_item(TableName=table, Key={"pk": {"S": key}})["Item"]
    return item


def check_pool(table: str, limit: int, held: dict[str, int]) -> None:
    """The checker: the item's running total is the sum of its holders, never more than the limit, and its
    holders are exactly the holdings the workers were granted."""
    state = PoolState.from_item(pool_item(table))
    assert state.enqueued == sum(holding.tokens for holding in state.holders.values()), "total drifted"
    assert state.enqueued <= limit, f"{state.enqueued} tokens enqueued against a limit of {limit}"
    assert {holder: holding.tokens for holder, holding in state.holders.items()} == held


class TotalUncheckedClient:
    """A planted bug: the pool's writes lose their condition on the running total, as a grant that checked
    room only in the copy it read would. Everything else, the holders' own conditions included, is kept."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def update_item(self, **request: Any) -> Any:
        total = next(p for p, name in request["ExpressionAttributeNames"].items() if name == ENQUEUED)
        clauses = request["ConditionExpression"].split(" AND ")
        (dropped,) = [clause for clause in clauses if clause.startswith(f"{total} <=")] or [None]
        if dropped is None:
            return self._inner.update_item(**request)  # a shrink or a release: no condition on the total
        values = {k: v for k, v in request["ExpressionAttributeValues"].items() if k != dropped.split()[-1]}
        kept = " AND ".join(clause for clause in clauses if clause != dropped)
        return self._inner.update_item(
            **{**request, "ConditionExpression": kept, "ExpressionAttributeValues": values}
        )

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class ReadTogetherClient:
    """Each worker's first read of the item waits until every worker has read: all of them plan their
    first write from the same copy, the case the condition on the total is there for."""

    def __init__(self, inner: Any, barrier: threading.Barrier) -> None:
        self._inner = inner
        self._barrier = barrier
        self._read = False

    def get_item(self, **request: Any) -> Any:
        item = self._inner.get_item(**request)
        if not self._read:
            self._read = True
            self._barrier.wait(timeout=60)
        return item

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def race(pools: list[DynamoDbBatchPool], clock: FakeClock, tokens: int, rounds: int = 1) -> dict[str, int]:
    """Each worker enqueues batches of ``tokens`` until the pool says no; returns what was granted."""
    held: dict[str, int] = {}
    lock = threading.Lock()
    start = threading.Barrier(len(pools))
    errors: list[BaseException] = []

    def work(index: int, pool: DynamoDbBatchPool) -> None:
        try:
            start.wait(timeout=60)
            for batch in range(rounds):
                holder = f"worker-{index}-batch-{batch}"
                result = enqueue(pool, clock, holder, tokens)
                if isinstance(result, Enqueued):
                    with lock:
                        held[holder] = result.tokens
                elif result.reason == "enqueued":
                    return
        except BaseException as error:  # surfaced in the test thread below
            errors.append(error)

    threads = [threading.Thread(target=work, args=(i, pool)) for i, pool in enumerate(pools)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors
    return held


def test_workers_enqueueing_at_once_never_pass_the_limit(table: str, clock: FakeClock) -> None:
    pools = [DynamoDbBatchPool(boto3.client("dynamodb"), table, clock, LIMITS) for _ in range(THREADS)]

    held = race(pools, clock, tokens=70, rounds=5)

    assert len(held) == 14, "1,000 tokens hold 14 batches of 70, each granted once"
    check_pool(table, 1000, held)


def test_workers_planning_from_the_same_copy_are_granted_only_what_fits(table: str, clock: FakeClock) -> None:
    barrier = threading.Barrier(THREADS)
    pools = [
        DynamoDbBatchPool(ReadTogetherClient(boto3.client("dynamodb"), barrier), table, clock, LIMITS)
        for _ in range(THREADS)
    ]

    held = race(pools, clock, tokens=300)

    assert len(held) == 3
    check_pool(table, 1000, held)


def test_the_check_catches_a_grant_that_skips_the_condition_on_the_total(
    table: str, clock: FakeClock
) -> None:
    barrier = threading.Barrier(THREADS)
    broken = [
        DynamoDbBatchPool(
            TotalUncheckedClient(ReadTogetherClient(boto3.client("dynamodb"), barrier)), table, clock, LIMITS
        )
        for _ in range(THREADS)
    ]

    held = race(broken, clock, tokens=300)

    assert len(held) > 3, "the planted bug grants batches the pool has no room for"
    with pytest.raises(AssertionError, match="against a limit of 1000"):
        check_pool(table, 1000, held)


def test_resizes_and_releases_racing_with_grants_keep_the_total_true(table: str, clock: FakeClock) -> None:
    pools = [DynamoDbBatchPool(boto3.client("dynamodb"), table, clock, LIMITS) for _ in range(8)]
    held: dict[str, int] = {}
    lock = threading.Lock()
    start = threading.Barrier(len(pools))
    errors: list[BaseException] = []

    def work(index: int, pool: DynamoDbBatchPool) -> None:
        try:
            start.wait(timeout=60)
            for batch in range(10):
                holder = f"worker-{index}-batch-{batch}"
                result = enqueue(pool, clock, holder, 200)
                if isinstance(result, Denied):
                    continue
                grown = pool.resize(pool.resize(result, 50), 120)
                if batch % 2:
                    pool.release(POOL, MODEL, holder)
                else:
                    with lock:
                        held[holder] = grown.tokens
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=work, args=(i, pool)) for i, pool in enumerate(pools)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)

    assert not errors, errors
    assert held, "some batches were held to the end"
    check_pool(table, 1000, held)


def test_the_pools_item_lives_beside_the_immediate_budgets_and_is_kept_while_used(
    table: str, clock: FakeClock
) -> None:
    client = boto3.client("dynamodb")
    limiter = DynamoDbLimiter(
        client, table, clock, requests_per_minute=60, tokens_per_minute=1000, max_in_flight=2
    )
    pool = DynamoDbBatchPool(client, table, clock, LIMITS)

    granted(enqueue(pool, clock, "a", 1000))

    assert isinstance(limiter.try_acquire(Reservation(POOL, 1000)), Permit), (
        "the immediate pool is not charged"
    )
    assert pool.room(POOL, MODEL) == 0, "nor is the batch pool by an immediate call"
    keys = {item["pk"]["S"] for item in client.scan(TableName=table)["Items"]}
    assert keys == {f"{POOL}#0", f"batch#{POOL}#{MODEL}"}
    clock.advance(3600)
    pool.release(POOL, MODEL, "a")
    item = pool_item(table)
    assert int(item[TTL_ATTRIBUTE]["N"]) == epoch_ms(clock.now()) // 1000 + POOL_ITEM_TTL_SECONDS


def test_the_factory_keeps_the_pool_in_the_limiters_table(table: str, clock: FakeClock) -> None:
    settings = LimiterSettings(limiter_table=table, provider_batch_enqueued_tokens=500)
    pool = build_batch_pool(settings, boto3.client("dynamodb"), clock)

    assert isinstance(pool, DynamoDbBatchPool)
    denied(enqueue(pool, clock, "a", 501), "exceeds_limit")
    granted(enqueue(pool, clock, "a", 500))
    assert PoolState.from_item(pool_item(table)).enqueued == 500


def test_an_unreachable_table_fails_closed(clock: FakeClock) -> None:
    pool = DynamoDbBatchPool(closed_port_client(), "nowhere", clock, LIMITS)

    with pytest.raises(LimiterUnavailable):
        pool.try_enqueue(Enqueue(POOL, MODEL, "a", 10, clock.now() + timedelta(hours=1)))
    with pytest.raises(LimiterUnavailable):
        pool.room(POOL, MODEL)
    # A holding left behind blocks its room until it expires: the caller must know, and release again.
    with pytest.raises(LimiterUnavailable):
        pool.release(POOL, MODEL, "a")
    with pytest.raises(LimiterUnavailable):
        pool.resize(Enqueued(POOL, MODEL, "a", 10), 5)
