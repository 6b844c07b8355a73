"""Fairness when the provider budget, not the slots, is the bottleneck: a slot takes the budget before it
claims, so a light tenant's job is not claimed late and then queued behind a heavy tenant's claimed jobs.

Real PostgreSQL and the API behind the local gateway; the in-process limiter on a FakeClock, whose budget
the test refills one call at a time; slots' waits for budget end only when the test ticks. Nothing sleeps.
"""

from __future__ import annotations

import asyncio
import secrets
import threading
from collections.abc import Callable, Iterator
from typing import Any

import boto3
import pytest

from tests.integration.test_execution import (
    TEXT,
    claim,
    make_deps,
    ok,
    rows,
)
from tests.support import invoice_request, job_row
from tollgate.core.clock import FakeClock, SystemClock
from tollgate.execution.attempt import claim_within_budget
from tollgate.execution.limiter.base import Denied, LimiterUnavailable, Outcome, Permit, Reservation
from tollgate.execution.limiter.dynamodb import DynamoDbLimiter
from tollgate.execution.limiter.local import InProcessLimiter
from tollgate.execution.llm.client import LlmResult, Task
from tollgate.execution.worker import WorkerConfig, run_worker
from tollgate.ingress.consumer import IngressDeps
from tollgate_dev.local.aws import create_jobs_queues, create_limiter_table, serialize_moto_dynamodb

pytestmark = pytest.mark.integration

WAIT = 30  # seconds a step may take before the test gives up; never slept


class BudgetTicks:
    """The slots' waits for budget: each ends only when the test ticks (after moving the clock on). The
    heartbeat's long sleeps never end, so a lease is never renewed behind the test's back."""

    def __init__(self, heartbeat_seconds: float) -> None:
        self._heartbeat = heartbeat_seconds
        self._changed = asyncio.Condition()
        self._generation = 0
        self.waiting = 0

    async def sleep(self, seconds: float) -> None:
        if seconds >= self._heartbeat:
            await asyncio.Event().wait()
        async with self._changed:
            generation = self._generation
            self.waiting += 1
            self._changed.notify_all()
            try:
                await self._changed.wait_for(lambda: self._generation > generation)
            finally:
                self.waiting -= 1

    async def tick(self) -> None:
        async with self._changed:
            self._generation += 1
            self._changed.notify_all()

    async def until_waiting(self, count: int) -> None:
        async with self._changed:
            await self._changed.wait_for(lambda: self.waiting >= count)


class HeldCalls:
    """An LLM fake whose calls stay in flight until the test lets them all finish; records each call's text."""

    def __init__(self) -> None:
        self.texts: list[str] = []
        self._started = asyncio.Condition()
        self._finish = asyncio.Event()

    async def extract(self, task: Task, model: str, timeout: float, max_tokens: int) -> LlmResult:
        async with self._started:
            self.texts.append(task.pages[0])
            self._started.notify_all()
        await self._finish.wait()
        result = ok()
        result.model = model
        return result

    async def until_calls(self, count: int) -> None:
        async with self._started:
            await self._started.wait_for(lambda: len(self.texts) >= count)

    def finish_all(self) -> None:
        self._finish.set()


def ingress_deps(system_db: Any) -> IngressDeps:
    queues = create_jobs_queues(f"fair-{secrets.token_hex(4)}")
    return IngressDeps(system_db, boto3.client("sqs"), queues.url, SystemClock(), wait_seconds=0)


def running_jobs(url: str) -> int:
    return rows(url, "SELECT count(*) FROM extraction_jobs WHERE state = 'RUNNING'")[0][0]


def test_a_light_tenants_job_gets_the_next_call_the_budget_admits(make_tenant, system_db, clean_db):
    # Given a heavy tenant's backlog, four slots, and a token budget that admits one call per refill
    heavy, light = make_tenant("heavy"), make_tenant("light")
    for i in range(10):
        heavy.client.submit(invoice_request(f"{TEXT}\nheavy ref {i}"), f"h{i}")
    largest = rows(clean_db, "SELECT max(estimated_tokens) FROM extraction_jobs")[0][0]
    clock = FakeClock(SystemClock().now())
    tokens_per_minute = largest * 1.5  # full at the start: one call, then half a call's worth left
    limiter = InProcessLimiter(
        clock, requests_per_minute=10_000, tokens_per_minute=tokens_per_minute, max_in_flight=10
    )
    llm, ticks = HeldCalls(), BudgetTicks(heartbeat_seconds=3600)
    # A lease longer than the test's clock moves: the heartbeat's sleeps never end here.
    deps = make_deps(system_db, llm, clock=clock, sleep=ticks.sleep, limiter=limiter, lease_seconds=3600)
    config = WorkerConfig(slots=4, tenant_cap=8, idle_seconds=0.05, drain_seconds=0)

    async def scenario() -> tuple[list[str], list[int]]:
        stop = asyncio.Event()
        worker = asyncio.create_task(run_worker([ingress_deps(system_db)], deps, config, stop))
        running_while_waiting = []
        try:
            # The first call goes out at once; the other three slots wait for budget.
            await asyncio.wait_for(llm.until_calls(1), WAIT)
            await asyncio.wait_for(ticks.until_waiting(3), WAIT)
            running_while_waiting.append(await asyncio.to_thread(running_jobs, clean_db))
            # When a light tenant's single job arrives behind them
            await asyncio.to_thread(light.client.submit, invoice_request(f"{TEXT}\nlight"), "l")
            # Then each refill admits one more call, and the first of them goes to the light job
            for calls in (2, 3):
                clock.advance(largest * 60 / tokens_per_minute)
                await ticks.tick()
                await asyncio.wait_for(llm.until_calls(calls), WAIT)
                await asyncio.wait_for(ticks.until_waiting(config.slots - calls), WAIT)
                running_while_waiting.append(await asyncio.to_thread(running_jobs, clean_db))
        finally:
            llm.finish_all()
            stop.set()
            await asyncio.wait_for(worker, WAIT)
        return llm.texts, running_while_waiting

    texts, running = asyncio.run(scenario())

    assert texts[1].endswith("light"), f"the next call after the light job arrived went to {texts[1]!r}"
    assert running == [1, 2, 3], "a job is claimed only with its call's budget: none waits for it claimed"


def test_an_unreachable_budget_claims_nothing_and_spends_no_attempt(tenant, system_db, clean_db):
    # Given a budget whose store cannot be reached
    job_id = tenant.client.submit(invoice_request(TEXT), "k").json["job_id"]

    class Unreachable:
        def __init__(self) -> None:
            self.asked = threading.Event()

        def try_acquire(self, reservation: Reservation) -> Permit | Denied:
            self.asked.set()
            raise LimiterUnavailable("table unreachable")

    limiter = Unreachable()
    llm = HeldCalls()
    deps = make_deps(system_db, llm, limiter=limiter)
    config = WorkerConfig(slots=2, tenant_cap=8, idle_seconds=0.05, drain_seconds=0)

    async def scenario() -> None:
        stop = asyncio.Event()
        worker = asyncio.create_task(run_worker([ingress_deps(system_db)], deps, config, stop))
        assert await asyncio.to_thread(limiter.asked.wait, WAIT)
        stop.set()
        await asyncio.wait_for(worker, WAIT)

    # When a worker runs against it
    asyncio.run(scenario())

    # Then it fails closed before the claim: no call, the job still runnable, its attempts untouched
    job = job_row(clean_db, job_id)
    assert llm.texts == []
    assert (job["state"], job["attempt"]) == ("READY", 0)
    assert rows(clean_db, "SELECT count(*) FROM job_attempts") == [(0,)]


class Wrapped:
    """A budget that hands every step to the in-process limiter; subclasses change one answer."""

    def __init__(self, inner: InProcessLimiter) -> None:
        self.inner = inner

    def try_acquire(self, reservation: Reservation) -> Permit | Denied:
        return self.inner.try_acquire(reservation)

    def release(self, permit: Permit, outcome: Outcome) -> None:
        self.inner.release(permit, outcome)

    def resize(self, permit: Permit, tokens: int) -> Permit:
        return self.inner.resize(permit, tokens)

    def cancel(self, permit: Permit) -> None:
        self.inner.cancel(permit)


class ClaimedMeanwhile(Wrapped):
    """Another worker's claim lands between this slot's acquire and its claim: the wrapped limiter claims
    the job the slot peeked just before granting the slot its permit."""

    def __init__(self, inner: InProcessLimiter, claim_other: Callable[[], Any]) -> None:
        super().__init__(inner)
        self._claim_other = claim_other
        self.taken: list[Any] = []
        self.resized: list[tuple[int, int]] = []

    def try_acquire(self, reservation: Reservation) -> Permit | Denied:
        if not self.taken:
            self.taken.append(self._claim_other())
        return self.inner.try_acquire(reservation)

    def resize(self, permit: Permit, tokens: int) -> Permit:
        self.resized.append((permit.tokens, tokens))
        return self.inner.resize(permit, tokens)


def test_a_slot_that_finds_its_job_taken_gives_the_whole_permit_back(tenant, system_db, clean_db):
    # Given one job, and a budget of exactly one request a minute on a clock that stands still
    tenant.client.submit(invoice_request(TEXT), "k")
    clock = FakeClock(SystemClock().now())
    inner = InProcessLimiter(clock, requests_per_minute=1, tokens_per_minute=10**8, max_in_flight=1)
    other = make_deps(system_db, HeldCalls(), clock=clock, worker_id="other")
    limiter = ClaimedMeanwhile(inner, lambda: claim(other))
    deps = make_deps(system_db, HeldCalls(), clock=clock, limiter=limiter)

    # When the slot's permit is granted but another worker claimed the job first
    claimed = asyncio.run(claim_within_budget(deps, tenant_cap=8, stop=asyncio.Event()))

    # Then the slot holds nothing, and the request, tokens and in-flight place it took are all back
    assert claimed is None and limiter.taken[0] is not None
    assert inner.in_flight == 0
    again = inner.try_acquire(Reservation("test", 10**8))
    assert isinstance(again, Permit), f"no call was sent, so nothing should stay spent: {again}"


def test_the_permit_reserves_the_claimed_jobs_estimate_not_the_peeked_one(make_tenant, system_db, clean_db):
    # Given a small job that the claim would pick first and a larger one of another tenant (both tenants
    # are new, so neither has had any work: on a tie in virtual time the newer tenant goes first)
    large_tenant, small_tenant = make_tenant("large"), make_tenant("small")
    small_tenant.client.submit(invoice_request(TEXT), "s")
    large_id = large_tenant.client.submit(invoice_request(TEXT + "\n" + "line " * 4000), "l").json["job_id"]
    small_tokens, large_tokens = (
        r[0] for r in rows(clean_db, "SELECT estimated_tokens FROM extraction_jobs ORDER BY estimated_tokens")
    )
    assert large_tokens > small_tokens
    clock = FakeClock(SystemClock().now())
    inner = InProcessLimiter(clock, requests_per_minute=100, tokens_per_minute=10**6, max_in_flight=10)
    other = make_deps(system_db, HeldCalls(), clock=clock, worker_id="other")
    limiter = ClaimedMeanwhile(inner, lambda: claim(other))
    deps = make_deps(system_db, HeldCalls(), clock=clock, limiter=limiter)

    # When another worker takes the small job between this slot's acquire and its claim
    claimed = asyncio.run(claim_within_budget(deps, tenant_cap=8, stop=asyncio.Event()))

    # Then the slot runs the large job under a permit resized to the large job's estimate
    assert claimed is not None and claimed.permit is not None
    assert str(claimed.job.job_id) == large_id
    assert limiter.resized == [(small_tokens, large_tokens)]
    assert claimed.permit.tokens == large_tokens
    left = 10**6 - large_tokens
    assert isinstance(inner.try_acquire(Reservation("test", left)), Permit)
    assert isinstance(inner.try_acquire(Reservation("test", 1)), Denied), "the whole estimate was charged"


# -- the shared budget's resize and cancel on DynamoDB (moto over HTTP) -----------------------------------


@pytest.fixture
def dynamodb_table(local_aws: Any) -> Iterator[str]:
    undo = serialize_moto_dynamodb()  # DynamoDB applies each conditional write atomically; moto needs help
    name = f"fair-limiter-{secrets.token_hex(4)}"
    create_limiter_table(boto3.client("dynamodb"), name)
    yield name
    undo()


def test_a_cancelled_shared_permit_returns_its_request_tokens_and_place_once(dynamodb_table):
    clock = FakeClock()
    limiter = DynamoDbLimiter(
        boto3.client("dynamodb"),
        dynamodb_table,
        clock,
        requests_per_minute=1,
        tokens_per_minute=1000,
        max_in_flight=1,
    )
    reservation = Reservation("pool", 1000)
    first = limiter.try_acquire(reservation)
    assert isinstance(first, Permit)
    assert isinstance(limiter.try_acquire(reservation), Denied), "one request a minute, one in flight"

    limiter.cancel(first)
    limiter.cancel(first)  # twice: the second finds nothing to give back

    second = limiter.try_acquire(reservation)
    assert isinstance(second, Permit), "the cancelled request, tokens and in-flight place came back"
    assert isinstance(limiter.try_acquire(reservation), Denied), "and only once"


def test_a_resized_shared_permit_charges_the_difference(dynamodb_table):
    clock = FakeClock()
    limiter = DynamoDbLimiter(
        boto3.client("dynamodb"),
        dynamodb_table,
        clock,
        requests_per_minute=100,
        tokens_per_minute=1000,
        max_in_flight=10,
    )
    permit = limiter.try_acquire(Reservation("pool", 100))
    assert isinstance(permit, Permit)

    resized = limiter.resize(permit, 400)

    assert resized.tokens == 400 and resized.permit_id == permit.permit_id
    denied = limiter.try_acquire(Reservation("pool", 601))
    assert isinstance(denied, Denied) and denied.reason == "tokens", "600 of 1000 tokens are left"
    assert isinstance(limiter.try_acquire(Reservation("pool", 590)), Permit)
    limiter.release(resized, Outcome(used_tokens=400))  # reconciled against the resized reservation
    assert isinstance(limiter.try_acquire(Reservation("pool", 11)), Denied), "nothing refunded: all used"
    assert isinstance(limiter.try_acquire(Reservation("pool", 9)), Permit)
