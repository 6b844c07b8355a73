"""Which limiter the settings choose, and the bounded allowance used while the shared table is down."""

from datetime import timedelta
from typing import Any

import boto3
import pytest

from tollgate.clock import FakeClock
from tollgate.limiter.base import Denied, Permit, Reservation
from tollgate.limiter.baselines import NoLimiter, PerWorkerAimdLimiter
from tollgate.limiter.dynamodb import DynamoDbLimiter, LocalAllowance
from tollgate.limiter.factory import build_limiter
from tollgate.limiter.local import InProcessLimiter
from tollgate.settings import LimiterSettings


def settings(**values: Any) -> LimiterSettings:
    return LimiterSettings(**values)


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ({}, InProcessLimiter),
        ({"limiter_table": "budget"}, DynamoDbLimiter),
        ({"limiter_table": "budget", "limiter_mode": "per_worker_aimd"}, PerWorkerAimdLimiter),
        ({"limiter_mode": "no_limit"}, NoLimiter),
    ],
)
def test_the_settings_choose_the_limiter(values: dict[str, Any], expected: type) -> None:
    client = boto3.client("dynamodb", region_name="eu-west-1", endpoint_url="http://127.0.0.1:9")

    assert isinstance(build_limiter(settings(**values), FakeClock(), dynamodb=client), expected)


def test_an_unknown_mode_is_refused_at_start() -> None:
    with pytest.raises(ValueError, match="limiter_mode"):
        settings(limiter_mode="optimistic")


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
