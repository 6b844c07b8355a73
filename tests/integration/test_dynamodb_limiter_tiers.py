"""Tier shares in the shared DynamoDB budget (moto over HTTP): while a higher tier waits, lower tiers keep to
their ceilings, in the same conditional write as the acquire, however many workers race; while none waits
they use the whole pool. Time is a FakeClock: nothing here sleeps."""

from __future__ import annotations

import secrets
import threading
from collections.abc import Iterator
from typing import Any

import boto3
import pytest

from tests.integration.test_dynamodb_limiter import POOL, THREADS, LimiterFactory, granted, shard_item
from tollgate.core.clock import FakeClock
from tollgate.execution.limiter.base import Denied, Outcome, Permit, Reservation, TierShares
from tollgate.execution.limiter.dynamodb import DynamoDbLimiter
from tollgate_dev.local.aws import create_limiter_table, serialize_moto_dynamodb

pytestmark = pytest.mark.integration

SHARES = TierShares(normal=0.8, batch=0.5, recall_seconds=1.0)


@pytest.fixture(scope="module", autouse=True)
def atomic_moto(local_aws: Any) -> Iterator[None]:
    # moto checks a condition and applies the update in two steps; DynamoDB does both atomically.
    undo = serialize_moto_dynamodb()
    yield
    undo()


@pytest.fixture
def table() -> str:
    name = f"limiter-{secrets.token_hex(4)}"
    create_limiter_table(boto3.client("dynamodb"), name)
    return name


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def make_limiter(table: str, clock: FakeClock) -> LimiterFactory:
    def make(**limits: Any) -> DynamoDbLimiter:
        settings: dict[str, Any] = {"requests_per_minute": 10_000, "tokens_per_minute": 10**9, **limits}
        return DynamoDbLimiter(boto3.client("dynamodb"), table, clock, **settings)

    return make


def take(limiter: DynamoDbLimiter, tier: str, tokens: int = 100) -> Permit | Denied:
    return limiter.try_acquire(Reservation(POOL, tokens, tier))  # type: ignore[arg-type]


def tiered(make: LimiterFactory, **limits: Any) -> DynamoDbLimiter:
    return make(tier_shares=SHARES, **limits)


def test_batch_uses_the_whole_pool_while_no_higher_tier_waits(make_limiter: LimiterFactory) -> None:
    limiter = tiered(make_limiter, max_in_flight=10)
    assert all(isinstance(take(limiter, "batch"), Permit) for _ in range(10))
    refused = take(limiter, "batch")
    assert isinstance(refused, Denied) and refused.reason == "in_flight"


def test_racing_batch_workers_never_take_the_share_reserved_for_a_waiting_high_tier(
    make_limiter: LimiterFactory, table: str
) -> None:
    # Given a pool of 10 filled by batch calls, and a high-tier caller denied, so waiting
    owner = tiered(make_limiter, max_in_flight=10)
    held = [granted(take(owner, "batch")) for _ in range(10)]
    assert isinstance(take(owner, "high"), Denied)
    # When every batch call ends and 24 batch workers race for the free pool, each until it is refused
    for permit in held:
        owner.release(permit, Outcome(used_tokens=100))
    workers = [tiered(make_limiter, max_in_flight=10) for _ in range(THREADS)]
    won: list[Permit] = []
    refusals: set[str] = set()
    lock = threading.Lock()
    start = threading.Barrier(len(workers))

    def work(limiter: DynamoDbLimiter) -> None:
        start.wait()
        for _ in range(50):
            result = take(limiter, "batch")
            with lock:
                if isinstance(result, Permit):
                    won.append(result)
                    continue
                refusals.add(result.reason)
            if result.reason == "reserved":
                return

    threads = [threading.Thread(target=work, args=(w,)) for w in workers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    # Then batch got half of the pool and no more: the other half waits for the high tier
    assert len(won) == 5
    assert len(shard_item(table).permits) == 5
    assert "reserved" in refusals
    assert isinstance(take(owner, "high"), Permit)


def test_a_batch_grant_planned_before_a_high_tier_began_waiting_fails_its_condition(
    make_limiter: LimiterFactory,
) -> None:
    # Given a batch worker that last saw the pool with no tier waiting, at 5 of 10 permits
    batch = tiered(make_limiter, max_in_flight=10)
    for _ in range(5):
        granted(take(batch, "batch"))
    # And another worker that takes 4 more, whose high-tier caller is then denied (its estimate does not
    # fit the token bucket now) and marks itself waiting
    other = tiered(make_limiter, max_in_flight=10)
    for _ in range(4):
        granted(take(other, "normal"))
    assert isinstance(take(other, "high", 10**9), Denied)

    # When the batch worker asks on its old copy (nobody waiting, room to 10: it would borrow the 10th),
    # then the write's condition on the mark fails, and planned again from the item it is held to its ceiling
    refused = take(batch, "batch")
    assert isinstance(refused, Denied) and refused.reason == "reserved"
    assert len(shard_item_permits(batch)) == 9


def shard_item_permits(limiter: DynamoDbLimiter) -> dict[str, float]:
    return dict(shard_item(limiter._table).permits)


def test_a_high_grant_clears_its_mark_and_batch_borrows_again(
    make_limiter: LimiterFactory, clock: FakeClock
) -> None:
    limiter = tiered(make_limiter, max_in_flight=4)
    held = [granted(take(limiter, "batch")) for _ in range(4)]
    assert isinstance(take(limiter, "high"), Denied)
    limiter.release(held[0], Outcome(used_tokens=100))
    limiter.release(held[1], Outcome(used_tokens=100))
    refused = take(limiter, "batch")  # 2 of 4 in flight: batch is at its ceiling while high waits
    assert isinstance(refused, Denied) and refused.reason == "reserved"
    granted(take(limiter, "high"))
    assert shard_item(limiter._table).waiting.get("high") == 0
    granted(take(limiter, "batch"))  # nobody waits: batch takes a free permit again


def test_a_mark_nobody_renews_runs_out(make_limiter: LimiterFactory, clock: FakeClock) -> None:
    limiter = tiered(make_limiter, max_in_flight=2)
    held = [granted(take(limiter, "batch")) for _ in range(2)]
    assert isinstance(take(limiter, "normal"), Denied)
    limiter.release(held[0], Outcome(used_tokens=100))
    assert isinstance(take(limiter, "batch"), Denied), "normal waits: batch keeps to 1 of 2"
    clock.advance(SHARES.recall_seconds + 0.1)
    granted(take(limiter, "batch"))


def test_tokens_are_kept_for_a_waiting_higher_tier(make_limiter: LimiterFactory) -> None:
    limiter = tiered(make_limiter, tokens_per_minute=1000, max_in_flight=100)
    granted(take(limiter, "batch", 600))
    high = take(limiter, "high", 500)
    assert isinstance(high, Denied) and high.reason == "tokens"
    refused = take(limiter, "batch", 50)
    assert isinstance(refused, Denied) and refused.reason == "reserved"
    granted(take(limiter, "normal", 50))  # normal may still go to 80% of the bucket
