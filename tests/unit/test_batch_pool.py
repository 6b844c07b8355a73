"""The Batch API's pool of enqueued tokens per model: a batch holds its prompt tokens until it ends, within
the model's limit; asking again is harmless; a crashed holder is forgotten at its expiry. The behaviours are
one contract (``BatchPoolContract``), run here on the in-memory pool and on DynamoDB in
tests/integration/test_dynamodb_batch_pool.py. Time is a FakeClock: nothing here sleeps."""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any

import pytest

from tollgate.core.clock import FakeClock
from tollgate.execution.limiter.base import Denied
from tollgate.execution.limiter.batch_pool import (
    MAX_RECLAIMED_PER_WRITE,
    BatchPool,
    Enqueue,
    Enqueued,
    InMemoryBatchPool,
    Limits,
)
from tollgate.execution.limiter.factory import build_batch_pool
from tollgate.settings import LimiterSettings

POOL = "openai:test-pool"
MODEL = "gpt-4.1-mini"
LARGE = "gpt-4.1"
LIMITS = Limits(1000, {LARGE: 3000})
DAY = timedelta(hours=24)


def enqueue(
    pool: BatchPool,
    clock: FakeClock,
    holder: str,
    tokens: int,
    *,
    lasts: timedelta = DAY,
    model: str = MODEL,
    provider_pool: str = POOL,
) -> Enqueued | Denied:
    return pool.try_enqueue(Enqueue(provider_pool, model, holder, tokens, clock.now() + lasts))


def granted(result: Enqueued | Denied) -> Enqueued:
    assert isinstance(result, Enqueued), result
    return result


def denied(result: Enqueued | Denied, reason: str) -> Denied:
    assert isinstance(result, Denied) and result.reason == reason, result
    return result


class BatchPoolContract:
    """What every BatchPool does; a subclass provides the ``pool`` fixture (limits: LIMITS) and ``clock``."""

    def test_batches_enqueue_up_to_the_models_limit_and_no_further(
        self, pool: BatchPool, clock: FakeClock
    ) -> None:
        granted(enqueue(pool, clock, "a", 600))
        granted(enqueue(pool, clock, "b", 400))

        denied(enqueue(pool, clock, "c", 1), "enqueued")
        assert pool.room(POOL, MODEL) == 0

    def test_the_room_left_is_what_fits(self, pool: BatchPool, clock: FakeClock) -> None:
        granted(enqueue(pool, clock, "a", 650))

        assert pool.room(POOL, MODEL) == 350
        denied(enqueue(pool, clock, "b", 351), "enqueued")
        granted(enqueue(pool, clock, "b", 350))

    def test_a_batch_larger_than_the_whole_limit_is_never_enqueued(
        self, pool: BatchPool, clock: FakeClock
    ) -> None:
        refused = denied(enqueue(pool, clock, "a", 1001), "exceeds_limit")

        assert math.isinf(refused.wait_seconds)
        assert pool.limit(MODEL) == 1000
        assert pool.room(POOL, MODEL) == 1000, "a refusal holds nothing"

    def test_each_model_and_each_provider_pool_has_its_own_limit(
        self, pool: BatchPool, clock: FakeClock
    ) -> None:
        granted(enqueue(pool, clock, "a", 1000))

        granted(enqueue(pool, clock, "b", 3000, model=LARGE))
        granted(enqueue(pool, clock, "c", 1000, provider_pool="openai:other"))
        assert pool.room(POOL, LARGE) == 0
        assert pool.limit(LARGE) == 3000

    def test_asking_again_for_the_same_holder_returns_the_same_holding(
        self, pool: BatchPool, clock: FakeClock
    ) -> None:
        first = granted(enqueue(pool, clock, "a", 600))

        # A batcher that crashed after its grant asks again; even a different estimate counts nothing twice.
        assert granted(enqueue(pool, clock, "a", 600)) == first
        assert granted(enqueue(pool, clock, "a", 900)) == first
        assert pool.room(POOL, MODEL) == 400

    def test_a_holder_that_never_releases_is_forgotten_at_its_expiry(
        self, pool: BatchPool, clock: FakeClock
    ) -> None:
        granted(enqueue(pool, clock, "crashed", 600, lasts=timedelta(hours=1)))
        granted(enqueue(pool, clock, "running", 300, lasts=timedelta(hours=2)))

        refused = denied(enqueue(pool, clock, "b", 500), "enqueued")
        assert 0 < refused.wait_seconds <= 3600, "asks again no later than the first expiry that makes room"
        clock.advance(3599)
        denied(enqueue(pool, clock, "b", 500), "enqueued")
        clock.advance(1)

        granted(enqueue(pool, clock, "b", 500))
        assert pool.room(POOL, MODEL) == 200
        assert pool.resize(Enqueued(POOL, MODEL, "crashed", 600), 100).tokens == 0, "not held any more"

    def test_an_expired_holder_asking_again_gets_a_new_holding(
        self, pool: BatchPool, clock: FakeClock
    ) -> None:
        granted(enqueue(pool, clock, "a", 600, lasts=timedelta(minutes=5)))
        clock.advance(300)

        assert granted(enqueue(pool, clock, "a", 700)).tokens == 700
        assert pool.room(POOL, MODEL) == 300

    def test_many_expired_holders_are_all_reclaimed_for_a_batch_that_needs_their_room(
        self, pool: BatchPool, clock: FakeClock
    ) -> None:
        holders = MAX_RECLAIMED_PER_WRITE + 4  # more than one write reclaims
        for index in range(holders):
            granted(enqueue(pool, clock, f"dead-{index}", 50, lasts=timedelta(minutes=1)))
        clock.advance(60)

        granted(enqueue(pool, clock, "whole", 1000))
        assert pool.room(POOL, MODEL) == 0

    def test_a_shrunk_holding_frees_room_and_a_grown_one_takes_it_only_if_it_fits(
        self, pool: BatchPool, clock: FakeClock
    ) -> None:
        held = granted(enqueue(pool, clock, "a", 800))
        other = granted(enqueue(pool, clock, "b", 200))

        held = pool.resize(held, 300)  # lines settled: their tokens are no longer enqueued
        assert held.tokens == 300
        assert pool.room(POOL, MODEL) == 500

        assert pool.resize(held, 800).tokens == 800
        assert pool.resize(other, 201).tokens == 200, "a growth past the limit leaves the holding as it was"
        assert pool.room(POOL, MODEL) == 0

    def test_a_shrink_keeps_the_holdings_expiry(self, pool: BatchPool, clock: FakeClock) -> None:
        held = granted(enqueue(pool, clock, "a", 800, lasts=timedelta(hours=1)))
        pool.resize(held, 100)
        clock.advance(3600)

        assert pool.room(POOL, MODEL) == 1000

    def test_release_gives_the_room_back_and_is_idempotent(self, pool: BatchPool, clock: FakeClock) -> None:
        granted(enqueue(pool, clock, "a", 600))
        granted(enqueue(pool, clock, "b", 400))

        pool.release(POOL, MODEL, "a")
        pool.release(POOL, MODEL, "a")
        pool.release(POOL, MODEL, "never-held")
        pool.release("openai:unknown", MODEL, "a")

        assert pool.room(POOL, MODEL) == 600
        assert pool.resize(Enqueued(POOL, MODEL, "a", 600), 10).tokens == 0
        granted(enqueue(pool, clock, "c", 600))

    def test_a_holding_must_expire_and_not_outlive_the_pools_record(
        self, pool: BatchPool, clock: FakeClock
    ) -> None:
        with pytest.raises(ValueError, match="expire after"):
            enqueue(pool, clock, "a", 10, lasts=timedelta(0))
        with pytest.raises(ValueError, match="at most"):
            enqueue(pool, clock, "a", 10, lasts=timedelta(days=7))
        with pytest.raises(ValueError, match="at least one token"):
            enqueue(pool, clock, "a", 0)


class TestInMemoryBatchPool(BatchPoolContract):
    @pytest.fixture
    def clock(self) -> FakeClock:
        return FakeClock()

    @pytest.fixture
    def pool(self, clock: FakeClock) -> BatchPool:
        return InMemoryBatchPool(clock, LIMITS)


@pytest.mark.parametrize(
    ("values", "model", "limit"),
    [
        ({}, MODEL, 2_000_000),
        ({"provider_batch_enqueued_tokens": 5000}, MODEL, 5000),
        ({"provider_batch_enqueued_tokens_by_model": {LARGE: 7000}}, LARGE, 7000),
        ({"provider_batch_enqueued_tokens_by_model": {LARGE: 7000}}, MODEL, 2_000_000),
    ],
)
def test_the_settings_set_each_models_limit(values: dict[str, Any], model: str, limit: int) -> None:
    pool = build_batch_pool(LimiterSettings(**values), None, FakeClock())

    assert isinstance(pool, InMemoryBatchPool), "no table: the pool of this process"
    assert pool.limit(model) == limit


def test_the_overrides_come_from_the_environment_as_json(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROVIDER_BATCH_ENQUEUED_TOKENS_BY_MODEL", '{"gpt-4.1": 90000}')

    assert LimiterSettings().provider_batch_enqueued_tokens_by_model == {LARGE: 90000}


@pytest.mark.parametrize(
    "values",
    [{"provider_batch_enqueued_tokens": 0}, {"provider_batch_enqueued_tokens_by_model": {LARGE: 0}}],
)
def test_a_pool_that_holds_nothing_is_refused_at_start(values: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="provider_batch_enqueued_tokens"):
        LimiterSettings(**values)
