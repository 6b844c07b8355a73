"""The batch path benchmark's own counting: what a path took from the immediate budget and the Batch API's pool,
and its cost summed exactly, on the real in-process limiter and batch pool with a fake clock."""

from datetime import timedelta
from decimal import Decimal

from bench.batch_path import CountingLimiter, RecordingBatchPool, attempt_totals, summarize
from tollgate.core.clock import FakeClock, SystemClock
from tollgate.execution.limiter.base import Outcome, Permit, Reservation
from tollgate.execution.limiter.batch_pool import Enqueue, Enqueued, InMemoryBatchPool, Limits
from tollgate.execution.limiter.local import InProcessLimiter


def limiter(clock: FakeClock, *, rpm: float = 100, in_flight: int = 10) -> CountingLimiter:
    return CountingLimiter(
        InProcessLimiter(clock, requests_per_minute=rpm, tokens_per_minute=1_000_000, max_in_flight=in_flight)
    )


def test_only_calls_released_after_they_were_made_count_as_requests():
    # Given three permits: two calls made (one used fewer tokens than reserved), one given back unused
    counted = limiter(FakeClock(SystemClock().now()))
    made = [counted.try_acquire(Reservation("pool", 1_000)) for _ in range(2)]
    unused = counted.try_acquire(Reservation("pool", 500))
    assert all(isinstance(p, Permit) for p in [*made, unused])
    counted.release(made[0], Outcome(used_tokens=400))
    counted.release(made[1], Outcome(used_tokens=1_000, throttled=True))
    counted.cancel(unused)

    # Then the path took two requests and the tokens reserved for them, and used what the calls reported
    assert counted.figures() == {
        "requests": 2,
        "reserved_tokens": 2_000,
        "used_tokens": 1_400,
        "permits_granted": 3,
        "permits_given_back": 1,
        "denials": 0,
        "throttled": 1,
    }


def test_a_denied_permit_is_counted_as_a_denial_not_a_request():
    counted = limiter(FakeClock(SystemClock().now()), in_flight=1)
    first = counted.try_acquire(Reservation("pool", 10))
    second = counted.try_acquire(Reservation("pool", 10))
    assert isinstance(first, Permit) and not isinstance(second, Permit)
    assert counted.figures()["denials"] == 1 and counted.figures()["requests"] == 0


def test_the_batch_pool_peak_is_the_most_held_at_once_per_model():
    clock = FakeClock(SystemClock().now())
    pool = RecordingBatchPool(InMemoryBatchPool(clock, Limits(1_000)))
    expires = clock.now() + timedelta(hours=25)

    def enqueue(holder: str, model: str, tokens: int) -> object:
        return pool.try_enqueue(Enqueue("pool", model, holder, tokens, expires))

    # Given two files of one model held together, then one released and a smaller one enqueued
    assert isinstance(enqueue("a", "mini", 600), Enqueued)
    assert isinstance(enqueue("b", "mini", 300), Enqueued)
    pool.release("pool", "mini", "a")
    assert isinstance(enqueue("c", "mini", 200), Enqueued)
    # And a file of another model, and one that does not fit
    assert isinstance(enqueue("d", "large", 100), Enqueued)
    assert not isinstance(enqueue("e", "mini", 900), Enqueued)

    # Then the peak is the two files held at once, per model, and the denial is counted
    figures = pool.figures()
    assert figures["peak_held_tokens"] == {"mini": 900, "large": 100}
    assert figures["grants"] == 4 and figures["denials"] == 1


def test_cost_is_summed_exactly_and_the_headline_is_batch_over_immediate():
    rows = [
        {"attempts": 3, "cost_usd": Decimal("0.100001"), "discount_usd": Decimal("0.100002"),
         "input_tokens": 10, "output_tokens": 20},
        {"attempts": 1, "cost_usd": Decimal("0.000003"), "discount_usd": Decimal(0),
         "input_tokens": 1, "output_tokens": 2},
    ]  # fmt: skip
    totals = attempt_totals(rows)
    assert totals == {
        "attempts": 4,
        "cost_usd": "0.100004",
        "discount_usd": "0.100002",
        "list_cost_usd": "0.200006",
        "input_tokens": 11,
        "output_tokens": 22,
    }

    def path(cost: str, requests: int) -> dict[str, object]:
        return {
            "totals": {"cost_usd": cost, "discount_usd": "0.000000"},
            "immediate_pool": {"limiter": {"requests": requests}},
        }

    summary = summarize({"immediate": path("0.400000", 100), "batch": path("0.100004", 25)})
    assert summary["batch_over_immediate_cost"] == float(Decimal("0.100004") / Decimal("0.4"))
    assert summary["batch_immediate_requests_over_immediate"] == 0.25
