"""Waiting for the provider budget: a slot waits the same way before its claim and with a job held, and
the wait ends the same way on stop (nothing claimed, nothing kept) and, for a held job, at its deadline.

Real PostgreSQL and the API behind the local gateway; budgets are fakes around the in-process limiter on a
FakeClock. Waits end when the test ticks or moves the clock: nothing sleeps.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from tests.integration.test_budget_fairness import WAIT, BudgetTicks, HeldCalls, Wrapped, ingress_deps
from tests.integration.test_execution import TEXT, ScriptedLlm, claim, make_deps, ok, rows
from tests.support import invoice_request, job_row
from tollgate.core.clock import FakeClock, SystemClock
from tollgate.execution.attempt import AttemptEnd, claim_within_budget, run_attempt
from tollgate.execution.limiter.base import Denied, LimiterUnavailable, Permit, Reservation
from tollgate.execution.limiter.local import InProcessLimiter
from tollgate.execution.worker import WorkerConfig, run_worker

pytestmark = pytest.mark.integration

HEARTBEAT_SECONDS = 3600.0


def roomy_limiter(clock: FakeClock) -> InProcessLimiter:
    return InProcessLimiter(clock, requests_per_minute=1000, tokens_per_minute=10**8, max_in_flight=10)


class ClockSleep:
    """Budget waits move the FakeClock on by what they would have slept; the heartbeat's never end."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock

    async def sleep(self, seconds: float) -> None:
        if seconds >= HEARTBEAT_SECONDS:
            await asyncio.Event().wait()
        self.clock.advance(seconds)
        await asyncio.sleep(0)


def test_a_held_job_whose_deadline_passes_while_it_waits_for_budget_makes_no_call(
    tenant: Any, system_db: Any, clean_db: str
) -> None:
    # Given a job with a minute to its deadline, claimed, and a budget that has no room for 90 s
    job_id = tenant.client.submit(invoice_request(TEXT, deadline_seconds=60), "k").json["job_id"]
    clock = FakeClock(SystemClock().now())
    reopens_at = clock.now().timestamp() + 90

    class FullFor90Seconds(Wrapped):
        def try_acquire(self, reservation: Reservation) -> Permit | Denied:
            if clock.now().timestamp() < reopens_at:
                return Denied(25.0, "tokens")
            return self.inner.try_acquire(reservation)

    limiter = FullFor90Seconds(roomy_limiter(clock))
    llm = ScriptedLlm(ok())
    deps = make_deps(
        system_db,
        llm,
        clock=clock,
        sleep=ClockSleep(clock).sleep,
        limiter=limiter,
        lease_seconds=HEARTBEAT_SECONDS,  # the lease outlives the wait: only the deadline can end it
        heartbeat_seconds=HEARTBEAT_SECONDS,
    )

    # When the attempt waits for its permit while it holds the job
    report = asyncio.run(run_attempt(deps, claim(deps)))

    # Then it gives up at the deadline: no call that could only start too late, no permit kept
    assert llm.calls == [], "a call after the deadline answers nobody"
    assert report.end is AttemptEnd.FAILED_TERMINAL
    job = job_row(clean_db, job_id)
    assert (job["state"], job["last_error"]["reason"]) == ("FAILED_TERMINAL", "deadline_exceeded")
    assert rows(clean_db, "SELECT outcome FROM job_attempts") == [("timeout",)]
    assert limiter.inner.in_flight == 0


def test_a_stopping_worker_hands_back_a_job_that_waits_for_budget_without_waiting_out_the_drain(
    make_tenant: Any, system_db: Any, clean_db: str
) -> None:
    # Given a slot holding a job without a permit: another worker took the job its permit was sized for,
    # the resize to the job it claimed instead found the budget unreachable, and now the budget is full
    # (both tenants are new: on a tie in virtual time the newer one, the small job's, goes first)
    large_tenant, small_tenant = make_tenant("large"), make_tenant("small")
    small_tenant.client.submit(invoice_request(TEXT), "s")
    large_id = large_tenant.client.submit(invoice_request(TEXT + "\n" + "line " * 4000), "l").json["job_id"]
    clock = FakeClock(SystemClock().now())
    other = make_deps(system_db, HeldCalls(), clock=clock, worker_id="other")

    class TakenThenUnreachableThenFull(Wrapped):
        def __init__(self, inner: InProcessLimiter) -> None:
            super().__init__(inner)
            self.granted = 0

        def try_acquire(self, reservation: Reservation) -> Permit | Denied:
            if self.granted:
                return Denied(1.0, "tokens")
            claim(other)  # the peeked job goes to another worker between this slot's peek and its claim
            self.granted += 1
            return self.inner.try_acquire(reservation)

        def resize(self, permit: Permit, tokens: int) -> Permit:
            raise LimiterUnavailable("table unreachable")

    limiter = TakenThenUnreachableThenFull(roomy_limiter(clock))
    llm, ticks = HeldCalls(), BudgetTicks(heartbeat_seconds=HEARTBEAT_SECONDS)
    deps = make_deps(system_db, llm, clock=clock, sleep=ticks.sleep, limiter=limiter, lease_seconds=3600)
    # A drain far longer than the test waits: only an attempt that ends on stop lets the worker finish.
    config = WorkerConfig(slots=1, tenant_cap=8, idle_seconds=0.05, drain_seconds=10 * WAIT)

    async def scenario() -> None:
        stop = asyncio.Event()
        worker = asyncio.create_task(run_worker([ingress_deps(system_db)], deps, config, stop))
        try:
            await asyncio.wait_for(ticks.until_waiting(1), WAIT)
            # When the worker is told to stop while the held job waits for budget
            stop.set()
            await asyncio.wait_for(asyncio.shield(worker), WAIT)
        finally:
            worker.cancel()
            await asyncio.gather(worker, return_exceptions=True)

    asyncio.run(scenario())

    # Then the job goes back at once, runnable under a new fence, and no call was made for it
    job = job_row(clean_db, large_id)
    assert (job["state"], job["last_error"], job["lease_until"]) == (
        "RETRY_SCHEDULED",
        {"reason": "released_on_shutdown"},
        None,
    )
    assert rows(clean_db, "SELECT outcome FROM job_attempts WHERE job_id = %s", large_id) == [("released",)]
    assert llm.texts == []
    assert limiter.inner.in_flight == 0


def test_a_slot_told_to_stop_while_its_permit_is_granted_claims_nothing(
    tenant: Any, system_db: Any, clean_db: str
) -> None:
    # Given a runnable job, and a worker told to stop while the limiter is granting the slot's permit
    job_id = tenant.client.submit(invoice_request(TEXT), "k").json["job_id"]
    clock = FakeClock(SystemClock().now())
    stop = asyncio.Event()
    stopped = threading.Event()

    class StopWhileGranting(Wrapped):
        loop: asyncio.AbstractEventLoop

        def try_acquire(self, reservation: Reservation) -> Permit | Denied:
            self.loop.call_soon_threadsafe(stop.set)
            stopped.set()
            return self.inner.try_acquire(reservation)

    limiter = StopWhileGranting(
        InProcessLimiter(clock, requests_per_minute=1, tokens_per_minute=10**8, max_in_flight=1)
    )
    deps = make_deps(system_db, HeldCalls(), clock=clock, limiter=limiter)

    async def scenario() -> Any:
        limiter.loop = asyncio.get_running_loop()
        return await claim_within_budget(deps, tenant_cap=8, stop=stop)

    # When the slot goes on from its permit
    claimed = asyncio.run(scenario())

    # Then it claims nothing (a stopping worker takes on no more work) and the permit goes back whole
    assert stopped.is_set()
    assert claimed is None
    job = job_row(clean_db, job_id)
    assert (job["state"], job["attempt"]) == ("READY", 0)
    assert limiter.inner.in_flight == 0
    assert isinstance(limiter.inner.try_acquire(Reservation("test", 10**8)), Permit), "nothing stays spent"
