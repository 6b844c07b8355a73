"""The drain benchmark's baselines: a worker pacing itself with AIMD, and no limit at all."""

import pytest

from tollgate.core.clock import FakeClock
from tollgate.execution.limiter.base import Denied, Outcome, Permit, Reservation
from tollgate_dev.baselines import NoLimiter, PerWorkerAimdLimiter

RESERVATION = Reservation("pool", 1000)


def test_no_limiter_grants_everything() -> None:
    limiter = NoLimiter(FakeClock())

    permits = [limiter.try_acquire(RESERVATION) for _ in range(1000)]

    assert all(isinstance(p, Permit) for p in permits)


def test_a_worker_alone_spaces_its_calls_at_its_ceiling() -> None:
    clock = FakeClock()
    limiter = PerWorkerAimdLimiter(clock, ceiling_per_minute=120)  # one call every 0.5 s

    assert isinstance(limiter.try_acquire(RESERVATION), Permit)
    denied = limiter.try_acquire(RESERVATION)
    assert isinstance(denied, Denied) and denied.wait_seconds == pytest.approx(0.5)
    clock.advance(0.5)
    assert isinstance(limiter.try_acquire(RESERVATION), Permit)


def test_a_429_halves_its_rate_and_each_success_adds_five_percent_of_the_ceiling() -> None:
    limiter = PerWorkerAimdLimiter(FakeClock(), ceiling_per_minute=120)
    permit = limiter.try_acquire(RESERVATION)
    assert isinstance(permit, Permit)

    limiter.release(permit, Outcome(throttled=True))
    assert limiter.requests_per_second == pytest.approx(1.0)
    limiter.release(permit, Outcome(used_tokens=500))
    assert limiter.requests_per_second == pytest.approx(1.1)
    for _ in range(20):
        limiter.release(permit, Outcome(used_tokens=500))
    assert limiter.requests_per_second == pytest.approx(2.0), "never above the ceiling"
