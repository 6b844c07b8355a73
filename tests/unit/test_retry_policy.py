"""The one retry layer: full jitter under a cap, Retry-After as a floor, never past the deadline."""

from datetime import UTC, datetime, timedelta

from tollgate.core.retry import RetryPolicy, next_attempt_at

NOW = datetime(2026, 5, 1, tzinfo=UTC)
POLICY = RetryPolicy(base_seconds=2, cap_seconds=60, attempt_timeout_seconds=30)


def at(**kwargs):
    defaults = {"now": NOW, "deadline_at": NOW + timedelta(hours=1), "attempt": 1, "max_attempts": 5}
    return next_attempt_at(POLICY, **{**defaults, **kwargs})


def test_the_jitter_draws_between_zero_and_a_ceiling_that_doubles_up_to_the_cap():
    seen = []
    at(attempt=3, jitter=lambda low, high: seen.append((low, high)) or high)
    assert seen == [(0.0, 8.0)]
    assert POLICY.backoff_ceiling(20) == 60


def test_retry_after_is_a_floor_for_the_jittered_delay():
    assert at(retry_after_seconds=45, jitter=lambda low, high: 1.0) == NOW + timedelta(seconds=45)
    assert at(retry_after_seconds=0.5, jitter=lambda low, high: 1.5) == NOW + timedelta(seconds=1.5)


def test_no_attempt_is_scheduled_that_cannot_finish_before_the_deadline():
    deadline = NOW + timedelta(seconds=40)
    assert at(deadline_at=deadline, jitter=lambda low, high: 10.5) is None
    assert at(deadline_at=deadline, jitter=lambda low, high: 10) == NOW + timedelta(seconds=10)


def test_no_attempt_is_scheduled_past_the_attempt_budget():
    assert at(attempt=5, jitter=lambda low, high: 0) is None
    assert at(attempt=4, jitter=lambda low, high: 0) == NOW
