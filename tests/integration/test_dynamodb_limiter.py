"""The shared provider budget on DynamoDB (moto over HTTP): workers together never exceed any limit, dead
holders' permits come back, one worker's 429 slows all of them, tokens are reconciled, the rate adapts
under its ceiling, and an unreachable table fails closed. Time is a FakeClock: nothing here sleeps."""

from __future__ import annotations

import asyncio
import secrets
import socket
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from tests.integration.test_execution import (
    TEXT,
    ScriptedLlm,
    claim,
    make_deps,
    supplier_tenant,  # noqa: F401 - a fixture
)
from tests.support import invoice_request, job_row
from tollgate.core.clock import FakeClock
from tollgate.execution.attempt import AttemptEnd, run_attempt
from tollgate.execution.limiter.base import Denied, LimiterUnavailable, Outcome, Permit, Reservation
from tollgate.execution.limiter.dynamodb import WINDOW_SECONDS, DynamoDbLimiter, ShardState, shard_of
from tollgate_dev.local.aws import create_limiter_table, serialize_moto_dynamodb

pytestmark = pytest.mark.integration

POOL = "openai:test-pool"
BUDGET_REASONS = {"requests", "tokens", "in_flight"}
THREADS = 24


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


LimiterFactory = Callable[..., DynamoDbLimiter]


@pytest.fixture
def make_limiter(table: str, clock: FakeClock) -> LimiterFactory:
    def make(**overrides: Any) -> DynamoDbLimiter:
        settings: dict[str, Any] = {
            "requests_per_minute": 10_000,
            "tokens_per_minute": 10**9,
            "max_in_flight": 1000,
        }
        settings.update(overrides)
        client = settings.pop("client", None) or boto3.client("dynamodb")
        return DynamoDbLimiter(client, table, settings.pop("clock", clock), **settings)

    return make


def shard_item(table: str, shard: int = 0, pool: str = POOL) -> ShardState:
    item = boto3.client("dynamodb").get_item(TableName=table, Key={"pk": {"S": f"{pool}#{shard}"}})["Item"]
    return ShardState.from_item(item)


def acquire(limiter: DynamoDbLimiter, tokens: int = 100, pool: str = POOL) -> Permit | Denied:
    return limiter.try_acquire(Reservation(pool, tokens))


def granted(result: Permit | Denied) -> Permit:
    assert isinstance(result, Permit), result
    return result


def denied(result: Permit | Denied, reason: str) -> Denied:
    assert isinstance(result, Denied) and result.reason == reason, result
    return result


def ok(used: int, **headers: str) -> Outcome:
    return Outcome(used_tokens=used, rate_limit_headers={k.replace("_", "-"): v for k, v in headers.items()})


def throttled(retry_after: float | None = None) -> Outcome:
    return Outcome(throttled=True, retry_after_seconds=retry_after)


def race(limiters: list[DynamoDbLimiter], tokens: int) -> list[Permit]:
    """Each thread (one worker each) acquires until the budget itself says no; the clock stands still, so
    nothing refills and everything granted is in the counts."""
    permits: list[Permit] = []
    lock = threading.Lock()
    start = threading.Barrier(len(limiters))
    errors: list[BaseException] = []

    def work(limiter: DynamoDbLimiter) -> None:
        try:
            start.wait()
            for _ in range(200):
                result = acquire(limiter, tokens)
                if isinstance(result, Permit):
                    with lock:
                        permits.append(result)
                elif result.reason in BUDGET_REASONS:
                    return
        except BaseException as error:  # surfaced in the test thread below
            errors.append(error)

    threads = [threading.Thread(target=work, args=(limiter,)) for limiter in limiters]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    return permits


@pytest.mark.parametrize(
    ("limits", "tokens", "expected"),
    [
        pytest.param({"requests_per_minute": 40}, 100, 40, id="requests per window"),
        # 10,000 tokens a minute hold 14 reservations of 700 (9,800), not 15.
        pytest.param({"tokens_per_minute": 10_000}, 700, 14, id="tokens per window"),
        pytest.param({"max_in_flight": 7}, 100, 7, id="calls in flight"),
    ],
)
def test_workers_acquiring_at_once_never_exceed_a_limit(
    make_limiter: LimiterFactory, table: str, limits: dict[str, Any], tokens: int, expected: int
) -> None:
    workers = [make_limiter(**limits) for _ in range(THREADS)]

    permits = race(workers, tokens)

    assert len(permits) == expected, "every unit of the budget is granted once, and no more"
    assert len({p.permit_id for p in permits}) == expected
    assert len(shard_item(table).permits) == expected, "each granted call holds an in-flight permit"


def test_all_three_limits_hold_together_while_calls_come_and_go(
    make_limiter: LimiterFactory, table: str
) -> None:
    workers = [
        make_limiter(requests_per_minute=30, tokens_per_minute=20_000, max_in_flight=5)
        for _ in range(THREADS)
    ]
    calls, most_in_flight = 0, 0
    lock = threading.Lock()
    start = threading.Barrier(len(workers))

    def work(limiter: DynamoDbLimiter) -> None:
        nonlocal calls, most_in_flight
        start.wait()
        for _ in range(200):
            result = acquire(limiter, 1000)
            if isinstance(result, Denied):
                if result.reason in {"requests", "tokens"}:
                    return
                continue
            # While this call holds its permit, the table shows every permit held at this moment.
            in_flight = len(shard_item(table).permits)
            with lock:
                calls, most_in_flight = calls + 1, max(most_in_flight, in_flight)
            limiter.release(result, ok(1000))

    threads = [threading.Thread(target=work, args=(limiter,)) for limiter in workers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert calls == 20, "20,000 tokens a minute hold 20 reservations of 1,000 (requests would allow 30)"
    assert 1 < most_in_flight <= 5


def test_a_dead_holders_permit_comes_back_after_it_expires(
    make_limiter: LimiterFactory, table: str, clock: FakeClock
) -> None:
    dead, alive = make_limiter(max_in_flight=2, permit_ttl_seconds=30), make_limiter(max_in_flight=2)
    granted(acquire(dead))
    granted(acquire(dead))  # the worker dies here and never releases either

    denied(acquire(alive), "in_flight")
    clock.advance(29)
    denied(acquire(alive), "in_flight")
    clock.advance(2)
    permit = granted(acquire(alive))

    assert set(shard_item(table).permits) == {permit.permit_id}, "the expired permits were reclaimed"


def test_a_released_permit_frees_its_slot_but_not_its_request(make_limiter: LimiterFactory) -> None:
    limiter = make_limiter(requests_per_minute=3, max_in_flight=1)
    permit = granted(acquire(limiter))
    denied(acquire(limiter), "in_flight")

    limiter.release(permit, ok(50))
    limiter.release(granted(acquire(limiter)), ok(50))
    limiter.release(granted(acquire(limiter)), ok(50))

    denied(acquire(limiter), "requests")


class OutracedClient:
    """A DynamoDB client on an item so contended that, while ``outraced``, every conditional UpdateItem loses
    its race: DynamoDB answers ConditionalCheckFailed with the item as it is, as it does when another
    writer got in between. Only a write conditioned on nothing but the item's existence goes through."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.outraced = False

    def update_item(self, **request: Any) -> Any:
        if self.outraced and " AND " in request["ConditionExpression"]:
            item = self._inner.get_item(TableName=request["TableName"], Key=request["Key"])["Item"]
            error = {
                "Error": {"Code": "ConditionalCheckFailedException", "Message": "outraced"},
                "Item": item,
            }
            raise ClientError(error, "UpdateItem")  # type: ignore[arg-type]
        return self._inner.update_item(**request)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def test_a_release_outraced_on_every_round_still_frees_its_slot(
    make_limiter: LimiterFactory, table: str
) -> None:
    # Given the pool's one in-flight permit, released while every conditional write loses its race
    client = OutracedClient(boto3.client("dynamodb"))
    limiter = make_limiter(max_in_flight=1, permit_ttl_seconds=300, client=client)
    permit = granted(acquire(limiter, tokens=1000))
    client.outraced = True
    limiter.release(permit, ok(1500, x_ratelimit_remaining_tokens="100000"))
    client.outraced = False

    # Then the slot is free at once, not after the permit's 300 s expiry
    assert shard_item(table).permits == {}
    granted(acquire(limiter))


def test_one_workers_429_makes_every_worker_wait(make_limiter: LimiterFactory, clock: FakeClock) -> None:
    first, second = make_limiter(), make_limiter()
    granted(acquire(second))  # the second worker knows the pool from before the 429
    permit = granted(acquire(first))

    first.release(permit, throttled(retry_after=5))

    wait = denied(acquire(second), "cooldown").wait_seconds
    assert wait == pytest.approx(5, abs=0.01)
    clock.advance(4.9)
    denied(acquire(second), "cooldown")
    clock.advance(0.2)
    granted(acquire(second))


def test_a_429_without_retry_after_still_cools_down(make_limiter: LimiterFactory, clock: FakeClock) -> None:
    limiter = make_limiter()
    limiter.release(granted(acquire(limiter)), throttled())

    assert denied(acquire(limiter), "cooldown").wait_seconds == pytest.approx(1.0, abs=0.01)


def test_unused_tokens_are_refunded_and_overuse_is_charged(make_limiter: LimiterFactory) -> None:
    limiter = make_limiter(tokens_per_minute=6000)  # a full bucket: 6,000 tokens

    limiter.release(granted(acquire(limiter, 3000)), ok(1000))  # 2,000 refunded: 5,000 left
    denied(acquire(limiter, 5010), "tokens")
    permit = granted(acquire(limiter, 4990))  # 10 left
    limiter.release(permit, ok(1990))  # 3,000 refunded: 3,010 left

    overused = granted(acquire(limiter, 1000))  # 2,010 left
    limiter.release(overused, ok(2000))  # 1,000 more charged: 1,010 left
    denied(acquire(limiter, 1020), "tokens")
    granted(acquire(limiter, 1000))


def test_a_refund_never_fills_the_bucket_past_full(make_limiter: LimiterFactory, clock: FakeClock) -> None:
    limiter = make_limiter(tokens_per_minute=6000)
    permit = granted(acquire(limiter, 3000))
    clock.advance(60)  # full again

    limiter.release(permit, ok(0))

    granted(acquire(limiter, 5990))
    denied(acquire(limiter, 100), "tokens")


def test_a_call_that_lost_its_answer_keeps_its_reservation(make_limiter: LimiterFactory) -> None:
    limiter = make_limiter(tokens_per_minute=6000)

    limiter.release(granted(acquire(limiter, 3000)), Outcome())  # no usage reported: nothing refunded

    denied(acquire(limiter, 3010), "tokens")
    granted(acquire(limiter, 2990))


def test_a_429_halves_the_rate_and_successes_raise_it_back_to_the_ceiling(
    make_limiter: LimiterFactory, table: str, clock: FakeClock
) -> None:
    limiter = make_limiter(requests_per_minute=60, tokens_per_minute=10**9)
    limiter.release(granted(acquire(limiter)), throttled(retry_after=1))
    assert shard_item(table).share == pytest.approx(0.5)

    clock.advance(WINDOW_SECONDS + 1)  # the bucket is full again and the cooldown over
    permits = []
    while isinstance(result := acquire(limiter), Permit):
        permits.append(result)
    assert len(permits) == 30, "at half the rate, a full minute's bucket holds half the calls"

    for permit in permits[:10]:
        limiter.release(permit, ok(100))
    assert shard_item(table).share == pytest.approx(0.7), "each success adds 2% of the ceiling"
    for permit in permits[10:]:
        limiter.release(permit, ok(100))
    assert shard_item(table).share == pytest.approx(1.0), "never above the configured rate"


def test_the_rate_is_cut_once_per_round_of_calls(
    make_limiter: LimiterFactory, table: str, clock: FakeClock
) -> None:
    limiter = make_limiter()
    sent_together = [granted(acquire(limiter)) for _ in range(3)]

    for permit in sent_together:
        limiter.release(permit, throttled(retry_after=1))
    assert shard_item(table).share == pytest.approx(0.5), "three 429s of one round halve the rate once"

    clock.advance(1.5)
    limiter.release(granted(acquire(limiter)), throttled(retry_after=1))
    assert shard_item(table).share == pytest.approx(0.25), "a call sent at the new rate still met a 429"

    for _ in range(6):
        clock.advance(1.5)
        limiter.release(granted(acquire(limiter)), throttled(retry_after=1))
    assert shard_item(table).share == pytest.approx(0.05), "the rate never drops to nothing"


def test_provider_headers_with_less_headroom_tighten_the_budget(make_limiter: LimiterFactory) -> None:
    limiter = make_limiter(requests_per_minute=600, tokens_per_minute=60_000)
    permit = granted(acquire(limiter, 1000))

    limiter.release(
        permit,
        ok(
            1000,
            x_ratelimit_limit_tokens="60000",
            x_ratelimit_remaining_tokens="5000",
            x_ratelimit_limit_requests="600",
            x_ratelimit_remaining_requests="590",
        ),
    )

    granted(acquire(limiter, 4900))
    denied(acquire(limiter, 200), "tokens")


def test_provider_headroom_is_brought_up_to_date_with_the_calls_sent_since(
    make_limiter: LimiterFactory, clock: FakeClock
) -> None:
    limiter = make_limiter(tokens_per_minute=60_000)  # 1,000 tokens a second
    first = granted(acquire(limiter, 1000))
    granted(acquire(limiter, 1000))
    granted(acquire(limiter, 1000))  # two calls the provider had not seen when it admitted the first
    clock.advance(1)  # and it has refilled 1,000 since

    limiter.release(first, ok(1000, x_ratelimit_limit_tokens="60000", x_ratelimit_remaining_tokens="10000"))

    # 10,000 left at the first call's admission, +1,000 refilled, -2,000 sent since: 9,000 now.
    granted(acquire(limiter, 8900))
    denied(acquire(limiter, 200), "tokens")


def test_a_release_that_plans_again_still_counts_the_calls_sent_since_its_admission(
    make_limiter: LimiterFactory,
) -> None:
    this, other = make_limiter(tokens_per_minute=6000), make_limiter(tokens_per_minute=6000)  # 100 a second
    first = granted(acquire(this, 1000))
    # Another worker's call leaves this worker's copy of the item behind: its release's first write fails
    # its condition, and it plans again from the item the failure returns.
    granted(acquire(other, 2000))

    this.release(first, ok(1000, x_ratelimit_limit_tokens="6000", x_ratelimit_remaining_tokens="3000"))

    # 3,000 left at the first call's admission, -2,000 sent since: 1,000 now.
    granted(acquire(this, 900))
    denied(acquire(this, 200), "tokens")


def test_provider_headers_with_more_headroom_never_loosen_it(make_limiter: LimiterFactory) -> None:
    limiter = make_limiter(tokens_per_minute=6000)
    permit = granted(acquire(limiter, 3000))

    limiter.release(
        permit, ok(3000, x_ratelimit_limit_tokens="1000000", x_ratelimit_remaining_tokens="999000")
    )

    denied(acquire(limiter, 3010), "tokens")


def test_a_lower_provider_limit_becomes_the_ceiling(make_limiter: LimiterFactory, clock: FakeClock) -> None:
    limiter = make_limiter(requests_per_minute=60)
    limiter.release(granted(acquire(limiter)), ok(100, x_ratelimit_limit_requests="30"))
    clock.advance(WINDOW_SECONDS)

    permits = []
    while isinstance(result := acquire(limiter), Permit):
        permits.append(result)

    assert len(permits) == 30


def test_a_shard_with_no_room_falls_back_to_another(make_limiter: LimiterFactory, table: str) -> None:
    import random

    limiter = make_limiter(requests_per_minute=20, max_in_flight=100, shards=2, rng=random.Random(3))

    permits = [granted(acquire(limiter)) for _ in range(20)]

    denied(acquire(limiter), "requests")
    assert Counter(shard_of(p.permit_id) for p in permits) == {0: 10, 1: 10}
    assert len(shard_item(table, 0).permits) == len(shard_item(table, 1).permits) == 10


def test_sharded_budgets_add_up_to_the_limits(
    make_limiter: LimiterFactory, table: str, clock: FakeClock
) -> None:
    import random

    workers = [
        make_limiter(requests_per_minute=40, max_in_flight=8, shards=4, rng=random.Random(seed))
        for seed in range(THREADS)
    ]

    permits = race(workers, 100)

    assert len(permits) <= 8, "in flight: 2 per shard, 8 in all"
    per_shard = [len(shard_item(table, shard).permits) for shard in range(4)]
    assert all(count <= 2 for count in per_shard) and sum(per_shard) == len(permits)
    for permit in permits:
        workers[0].release(permit, ok(100))
    more = race(workers, 100)
    assert len(permits) + len(more) <= 40, "requests: 10 per shard, 40 in all"
    now = clock.now().timestamp()
    for shard in range(4):
        # Each request costs 60/10 s of a shard's 60 s window: at most 10 per shard.
        assert shard_item(table, shard).requests_full_at <= now + WINDOW_SECONDS + 1e-6


def closed_port_client() -> Any:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    # Nothing listens there any more: every call is refused at once.
    return boto3.client(
        "dynamodb",
        endpoint_url=f"http://127.0.0.1:{port}",
        config=Config(connect_timeout=1, read_timeout=1, retries={"max_attempts": 1}),
    )


def test_an_unreachable_table_fails_closed(make_limiter: LimiterFactory) -> None:
    limiter = make_limiter(client=closed_port_client())

    with pytest.raises(LimiterUnavailable):
        acquire(limiter)


def test_a_release_against_an_unreachable_table_does_not_lose_the_answer(
    make_limiter: LimiterFactory, table: str, clock: FakeClock
) -> None:
    permit = granted(acquire(make_limiter()))
    unreachable = make_limiter(client=closed_port_client())

    unreachable.release(permit, ok(100))  # logged, not raised: the permit lapses at its expiry

    assert permit.permit_id in shard_item(table).permits


def test_with_a_local_allowance_an_outage_grants_at_most_the_allowance(
    make_limiter: LimiterFactory, clock: FakeClock
) -> None:
    limiter = make_limiter(client=closed_port_client(), local_allowance_per_minute=3)

    permits = [granted(acquire(limiter)) for _ in range(3)]
    wait = denied(acquire(limiter), "limiter_unavailable").wait_seconds
    clock.advance(30)
    denied(acquire(limiter), "limiter_unavailable")
    clock.advance(30)
    granted(acquire(limiter))

    assert wait == pytest.approx(60)
    for permit in permits:
        limiter.release(permit, ok(100))  # local permits never touch the table


def test_the_worker_makes_no_provider_call_when_the_budget_is_unreachable(
    supplier_tenant: Any,  # noqa: F811 - the fixture imported above
    system_db: Any,
    clean_db: str,
    make_limiter: LimiterFactory,
) -> None:
    job_id = supplier_tenant.client.submit(invoice_request(TEXT), "k").json["job_id"]
    llm = ScriptedLlm()
    deps = make_deps(system_db, llm, limiter=make_limiter(client=closed_port_client()))

    report = asyncio.run(run_attempt(deps, claim(deps)))

    assert llm.calls == [], "fail closed: no budget, no call"
    assert report.end is AttemptEnd.RETRY_SCHEDULED
    assert "limiter unavailable" in job_row(clean_db, job_id)["last_error"]["detail"]
