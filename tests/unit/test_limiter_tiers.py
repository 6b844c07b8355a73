"""Tier shares in the in-process limiter (the same rules as the shared DynamoDB budget): a waiting higher
tier holds lower tiers at their ceilings, an idle one lets them use the whole pool."""

from __future__ import annotations

import pytest

from tollgate.core.clock import FakeClock
from tollgate.execution.limiter.base import Denied, Permit, Reservation, TierShares
from tollgate.execution.limiter.local import InProcessLimiter


def limiter(clock: FakeClock, *, in_flight: int = 10, tokens_per_minute: float = 10**9) -> InProcessLimiter:
    return InProcessLimiter(
        clock,
        requests_per_minute=10**6,
        tokens_per_minute=tokens_per_minute,
        max_in_flight=in_flight,
        tier_shares=TierShares(normal=0.8, batch=0.5, recall_seconds=1.0),
    )


def take(budget: InProcessLimiter, tier: str, tokens: int = 10) -> Permit | Denied:
    return budget.try_acquire(Reservation("pool", tokens, tier))  # type: ignore[arg-type]


def test_with_no_higher_tier_waiting_batch_may_fill_the_whole_pool() -> None:
    budget = limiter(FakeClock())
    assert all(isinstance(take(budget, "batch"), Permit) for _ in range(10))
    denied = take(budget, "batch")
    assert isinstance(denied, Denied) and denied.reason == "in_flight"


def test_a_waiting_high_tier_holds_batch_below_its_ceiling_and_gets_the_next_free_slot() -> None:
    clock = FakeClock()
    budget = limiter(clock)
    held = [take(budget, "batch") for _ in range(10)]
    assert all(isinstance(p, Permit) for p in held)

    # Given the pool full of batch calls, a high-tier caller is denied and so is waiting
    assert isinstance(take(budget, "high"), Denied)
    # When batch calls end, batch may not take their places while the pool is above half
    for permit in held[:3]:
        assert isinstance(permit, Permit)
        budget.cancel(permit)
    refused = take(budget, "batch")
    assert isinstance(refused, Denied) and refused.reason == "reserved"
    # Then the high tier gets one; once it is served and its mark cleared, batch borrows again
    assert isinstance(take(budget, "high"), Permit)
    assert isinstance(take(budget, "batch"), Permit)


def test_a_waiting_mark_runs_out_when_nobody_renews_it() -> None:
    clock = FakeClock()
    budget = limiter(clock)
    held = [take(budget, "batch") for _ in range(10)]
    assert isinstance(take(budget, "high"), Denied)  # waiting, then gone (its job went elsewhere)
    first = held[0]
    assert isinstance(first, Permit)
    budget.cancel(first)
    assert isinstance(take(budget, "batch"), Denied)
    clock.advance(1.5)
    assert isinstance(take(budget, "batch"), Permit), "a stale mark holds nothing back"


def test_a_waiting_normal_tier_keeps_batch_at_half_and_high_is_never_held_back() -> None:
    clock = FakeClock()
    budget = limiter(clock)
    [take(budget, "normal") for _ in range(10)]
    assert isinstance(take(budget, "normal"), Denied)  # normal waits: batch keeps to 50%
    assert isinstance(take(budget, "batch"), Denied)
    assert isinstance(take(budget, "high"), Denied), "the pool's own limit still holds for high"


def test_tokens_are_reserved_too_while_a_higher_tier_waits() -> None:
    clock = FakeClock()
    budget = limiter(clock, in_flight=100, tokens_per_minute=1000)
    # Given batch took 600 of 1,000 tokens while nobody else asked
    assert isinstance(take(budget, "batch", 600), Permit)
    # When the high tier asks for more than is left, it waits
    assert isinstance(take(budget, "high", 500), Denied)
    # Then batch may not take what is left below the half it must leave for the waiting high tier
    refused = take(budget, "batch", 50)
    assert isinstance(refused, Denied) and refused.reason == "reserved"


@pytest.mark.parametrize(("normal", "batch"), [(0.5, 0.8), (1.2, 0.5), (0.8, 0.0)])
def test_ceilings_that_would_invert_the_tiers_or_leave_a_tier_nothing_are_refused(
    normal: float, batch: float
) -> None:
    with pytest.raises(ValueError, match="ceilings"):
        TierShares(normal=normal, batch=batch)
