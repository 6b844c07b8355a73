"""Which limiter the settings choose, and the bounded allowance used while the shared table is down."""

from datetime import timedelta
from typing import Any

import boto3
import pytest

from tollgate.core.clock import FakeClock
from tollgate.execution.limiter.base import Denied, Permit, Reservation
from tollgate.execution.limiter.dynamodb import DynamoDbLimiter, LocalAllowance
from tollgate.execution.limiter.factory import build_limiter
from tollgate.execution.limiter.local import InProcessLimiter
from tollgate.settings import LimiterSettings
from tollgate_dev.baselines import NoLimiter, PerWorkerAimdLimiter
from tollgate_dev.worker import HarnessWorkerSettings, LimiterMode, baseline_limiter


def settings(**values: Any) -> LimiterSettings:
    return LimiterSettings(**values)


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ({}, InProcessLimiter),
        ({"limiter_table": "budget"}, DynamoDbLimiter),
        # A benchmark's name for a baseline means nothing to production settings: the budget is kept.
        ({"limiter_table": "budget", "limiter_mode": "no_limit"}, DynamoDbLimiter),
    ],
)
def test_the_settings_choose_the_limiter(values: dict[str, Any], expected: type) -> None:
    client = boto3.client("dynamodb", region_name="eu-west-1", endpoint_url="http://127.0.0.1:9")

    assert isinstance(build_limiter(settings(**values), FakeClock(), dynamodb=client), expected)


@pytest.mark.parametrize(
    ("mode", "expected"),
    [("per_worker_aimd", PerWorkerAimdLimiter), ("no_limit", NoLimiter), ("budget", type(None))],
)
def test_the_harness_worker_chooses_a_baseline_by_name(mode: LimiterMode, expected: type) -> None:
    assert isinstance(baseline_limiter(mode, settings(limiter_table="budget"), FakeClock()), expected)


def test_an_unknown_mode_is_refused_at_start(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LIMITER_MODE", "optimistic")
    with pytest.raises(ValueError, match="limiter_mode"):
        HarnessWorkerSettings()


def test_the_local_allowance_grants_at_most_its_calls_in_any_minute() -> None:
    clock = FakeClock()
    started = clock.now()
    allowance = LocalAllowance(2, clock, permit_ttl_seconds=60)
    reservation = Reservation("pool", 10)

    first = allowance.try_acquire(reservation, "a")
    clock.advance(10)
    assert isinstance(allowance.try_acquire(reservation, "b"), Permit)
    refused = allowance.try_acquire(reservation, "c")
    clock.advance(50)

    assert isinstance(first, Permit) and first.expires_at == started + timedelta(seconds=60)
    assert isinstance(refused, Denied) and refused.wait_seconds == pytest.approx(50)
    assert isinstance(allowance.try_acquire(reservation, "d"), Permit), "the first call left the window"
