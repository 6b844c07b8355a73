"""The batch path against the simulated provider's Files and Batches API over real HTTP (DESIGN §7): a batch
of 100 ends with exactly one result per job; a batcher that dies after the upload, or after the create and
before recording it, neither loses nor duplicates a job; a partly failed batch retries only its failed lines,
on the immediate path; an expired batch returns its jobs in time for their deadline; a job cancelled while it
waits in a batch is not completed. One clock, shared by the worker and the simulator, stands in for the hours
a batch takes."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta
from decimal import Decimal
from typing import Any
from uuid import UUID

import openai
import psycopg
import pytest

from tests.integration.test_execution import make_deps, rows
from tollgate.core import checkpoints
from tollgate.core.checkpoints import BATCH_AFTER_CREATE, BATCH_AFTER_UPLOAD, BATCH_LINE_COMMITTED
from tollgate.core.clock import FakeClock, SystemClock, new_id
from tollgate.core.metrics import RecordedMetrics
from tollgate.core.retry import RetryPolicy
from tollgate.execution.attempt import AttemptEnd, ExecutionDeps, ModelRouter, run_attempt
from tollgate.execution.batch.batcher import Round, SubmitEnd, prepare_round, submit_batch
from tollgate.execution.batch.deps import BatchConfig, BatchDeps
from tollgate.execution.batch.poller import PollReport, poll_batches
from tollgate.execution.limiter import Denied, Permit, Reservation
from tollgate.execution.limiter.base import LimiterUnavailable
from tollgate.execution.limiter.batch_pool import Enqueue, Enqueued, InMemoryBatchPool, Limits
from tollgate.execution.limiter.local import InProcessLimiter
from tollgate.execution.llm.batch_api import OpenAIBatchApi
from tollgate.execution.llm.client import OpenAIExtractor
from tollgate.execution.llm.output import StructuredOutput
from tollgate.scheduler.tick import SchedulerDeps, run_scheduler
from tollgate.tenants.suppliers import add_supplier
from tollgate_dev.samples import INCONSISTENT_TOTAL, SUPPLIERS, generate_invoices, request_body
from tollgate_dev.simulator.batches import BatchSimulation
from tollgate_dev.simulator.server import SimulatedProvider, SimulatorConfig

pytestmark = pytest.mark.integration

DAY = 24 * 3600.0
# Deadlines that leave the batch window, its settle and an immediate attempt (the defaults: 24 h + 1 h + 1 h).
BATCH_DEADLINE_SECONDS = 3 * 24 * 3600
COMPLETION_SECONDS = 3600.0
POOL_LIMIT = 10_000_000


class Crash(BaseException):
    """The batcher's process ends at a checkpoint, as a kill would: nothing after it runs."""


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(SystemClock().now())


@pytest.fixture
def simulator(clock: FakeClock) -> Iterator[SimulatedProvider]:
    config = SimulatorConfig(
        requests_per_minute=None,
        tokens_per_minute=None,
        batches=BatchSimulation(completion_seconds=COMPLETION_SECONDS),
    )
    with SimulatedProvider(config, clock=clock) as provider:
        yield provider


@pytest.fixture
def known_tenant(make_tenant, system_db, clean_db):
    currencies = sorted({s.currency for s in SUPPLIERS})
    tenant = make_tenant("batch-tenant")
    with psycopg.connect(clean_db) as conn:
        conn.execute(
            "UPDATE tenants SET allowed_currencies = %s WHERE tenant_id = %s", (currencies, tenant.tenant_id)
        )
    for supplier in SUPPLIERS:
        add_supplier(system_db, tenant.tenant_id, supplier.name, supplier.iban, new_id)
    return tenant


@pytest.fixture
def crash_at() -> Iterator[Any]:
    """Installs a listener that ends the batcher at one checkpoint, once; the previous one is put back."""
    armed: dict[str, int] = {}

    def listener(name: str) -> None:
        if name in armed:
            armed[name] -= 1
            if armed[name] == 0:
                del armed[name]
                raise Crash(name)

    previous = checkpoints.listen(listener)

    def arm(name: str, at: int = 1) -> None:
        armed[name] = at

    yield arm
    checkpoints.listen(previous)


class CountingLimiter:
    """The immediate pool's budget, counting what is asked of it: the batch path asks the Batch API's own."""

    def __init__(self, clock) -> None:
        self.inner = InProcessLimiter(
            clock, requests_per_minute=1000, tokens_per_minute=10**8, max_in_flight=10
        )
        self.asked = 0

    def try_acquire(self, reservation: Reservation) -> Permit | Denied:
        self.asked += 1
        return self.inner.try_acquire(reservation)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def batch_deps(system_db, simulator, clock, *, worker_id="batcher-a", **config: Any) -> BatchDeps:
    """The batch path's dependencies, and an immediate path over the same simulator for what it hands back."""
    client = openai.AsyncOpenAI(base_url=simulator.base_url, api_key="simulated", max_retries=0)
    execution = make_deps(
        system_db,
        OpenAIExtractor(client, clock, StructuredOutput.JSON_SCHEMA),
        clock=clock,
        worker_id=worker_id,
        retry_policy=RetryPolicy(base_seconds=2, cap_seconds=60, attempt_timeout_seconds=60),
        limiter=CountingLimiter(clock),
    )
    api = OpenAIBatchApi(openai.OpenAI(base_url=simulator.base_url, api_key="simulated", max_retries=0))
    return BatchDeps(
        execution=execution,
        api=api,
        pool=InMemoryBatchPool(clock, Limits(POOL_LIMIT)),
        config=BatchConfig(**{"max_requests": 100, "interval_seconds": 1.0, **config}),
        structured_output=StructuredOutput.JSON_SCHEMA,
    )


def submit_invoices(
    tenant, count: int, *, deadline_seconds: int = BATCH_DEADLINE_SECONDS, seed: int = 7, kind: str = "clean"
) -> list[str]:
    invoices = generate_invoices(count, seed=seed, kinds=[kind] * count)
    return [
        tenant.client.submit(
            request_body(invoice, service_tier="batch", deadline_seconds=deadline_seconds),
            secrets.token_hex(8),
        ).json["job_id"]
        for invoice in invoices
    ]


def prepare_and_submit(deps: BatchDeps) -> tuple[Round, list[SubmitEnd]]:
    claimed = prepare_round(deps, immediate_room=100)

    async def submit_all() -> list[SubmitEnd]:
        return [await submit_batch(deps, batch, asyncio.Event()) for batch in claimed.batches]

    return claimed, asyncio.run(submit_all())


def poll_until_settled(deps: BatchDeps, clock: FakeClock, *, step: float = COMPLETION_SECONDS) -> PollReport:
    """Moves the shared clock past each poll's due time until no batch is open; the whole report."""
    total = PollReport()
    for _ in range(20):
        clock.advance(step)
        report = poll_batches(deps)
        for name in ("looked_at", "adopted", "ended", "settled", "lines", "returned"):
            setattr(total, name, getattr(total, name) + getattr(report, name))
        if not rows(
            deps.execution.db.pool.conninfo, "SELECT 1 FROM provider_batches WHERE settled_at IS NULL"
        ):
            return total
    raise AssertionError("batches still open after 20 polls")


def run_immediate(deps: ExecutionDeps, jobs) -> list[AttemptEnd]:
    async def run() -> list[AttemptEnd]:
        return [(await run_attempt(deps, job)).end for job in jobs]

    return asyncio.run(run())


def batches_created(simulator: SimulatedProvider) -> int:
    return sum(simulator.stats.batches.values())


def job_states(url: str) -> dict[str, str]:
    return {str(job_id): state for job_id, state in rows(url, "SELECT job_id, state FROM extraction_jobs")}


def one_result_each(url: str, job_ids: list[str]) -> None:
    results = rows(url, "SELECT job_id FROM extraction_results")
    assert sorted(str(r) for (r,) in results) == sorted(job_ids), "exactly one result per job"
    succeeded = rows(
        url,
        "SELECT job_id, count(*) FROM job_attempts WHERE outcome = 'ok' GROUP BY job_id HAVING count(*) <> 1",
    )
    assert succeeded == [], "a job answered twice"
    completed = rows(
        url,
        "SELECT aggregate_id, count(*) FROM outbox_events WHERE event_type = 'extraction.completed.v1'"
        " GROUP BY aggregate_id",
    )
    assert sorted(str(a) for a, n in completed if n == 1) == sorted(job_ids), "one completed event per job"


def test_a_batch_of_100_completes_with_exactly_one_result_per_job(
    known_tenant, make_tenant, system_db, simulator, clock, clean_db
):
    # Given 100 batch-tier invoices with a three-day deadline from two tenants.
    other = make_tenant("second")
    with psycopg.connect(clean_db) as conn:
        conn.execute(
            "UPDATE tenants SET allowed_currencies = (SELECT allowed_currencies FROM tenants WHERE tenant_id = %s)"
            " WHERE tenant_id = %s",
            (known_tenant.tenant_id, other.tenant_id),
        )
    for supplier in SUPPLIERS:
        add_supplier(system_db, other.tenant_id, supplier.name, supplier.iban, new_id)
    job_ids = submit_invoices(known_tenant, 60) + submit_invoices(other, 40, seed=8)
    deps = batch_deps(system_db, simulator, clock)

    # When the batcher claims them into one file and submits it, and the poller follows it to its end.
    claimed, ends = prepare_and_submit(deps)
    assert claimed.immediate == [] and [len(b.jobs) for b in claimed.batches] == [100]
    assert ends == [SubmitEnd.SUBMITTED]
    waiting = job_states(clean_db)
    assert set(waiting.values()) == {"RUNNING"}, "jobs wait in the batch under their lease"
    report = poll_until_settled(deps, clock)

    # Then every job succeeded once, with one result, one attempt at the batch price and one event.
    assert report.lines == 100 and report.settled == 1
    assert set(job_states(clean_db).values()) == {"SUCCEEDED"}
    one_result_each(clean_db, job_ids)
    [(attempts, with_batch, discounted, paid, saved)] = rows(
        clean_db,
        "SELECT count(*), count(batch_id), count(*) FILTER (WHERE discount_usd > 0), sum(cost_usd),"
        " sum(discount_usd) FROM job_attempts",
    )
    assert (attempts, with_batch, discounted) == (100, 100, 100)
    # Half price: what was paid equals what was saved, but for each attempt's rounding to the micro-dollar.
    assert abs(paid - saved) <= Decimal("0.000001") * attempts
    [(state, members, settled)] = rows(
        clean_db,
        "SELECT b.state, count(m.*), count(m.settled_at) FROM provider_batches b"
        " JOIN provider_batch_jobs m USING (batch_id) GROUP BY b.state",
    )
    assert (state, members, settled) == ("completed", 100, 100)
    assert deps.pool.room(deps.execution.provider_pool, claimed.batches[0].model) == POOL_LIMIT, (
        "the batch's enqueued tokens went back to the Batch API's budget"
    )
    assert deps.execution.limiter.asked == 0, "a batch line takes nothing from the immediate pool"


@pytest.mark.parametrize("checkpoint", [BATCH_AFTER_UPLOAD, BATCH_AFTER_CREATE])
def test_a_batcher_killed_after_upload_or_after_create_neither_loses_nor_duplicates_a_job(
    checkpoint, known_tenant, system_db, simulator, clock, clean_db, crash_at
):
    job_ids = submit_invoices(known_tenant, 10)
    deps = batch_deps(system_db, simulator, clock)

    # Given a batcher that dies at the checkpoint: the file uploaded, or the batch created and not recorded.
    crash_at(checkpoint)
    with pytest.raises(Crash):
        prepare_and_submit(deps)
    [(state,)] = rows(clean_db, "SELECT state FROM provider_batches")
    assert state == "preparing"

    # When another worker's poller finds the batch once the dead batcher's hold has run out.
    survivor = batch_deps(system_db, simulator, clock, worker_id="poller-b")
    clock.advance(deps.config.hold_seconds + 1)
    report = poll_batches(survivor)
    if checkpoint == BATCH_AFTER_CREATE:
        # Then the batch the provider took is adopted and followed to its end.
        assert report.adopted == 1
        poll_until_settled(survivor, clock)
        assert batches_created(simulator) == 1, "no second batch was created"
    else:
        # Then the batch that never reached the provider fails and its jobs go back, to the immediate path.
        [(state, error)] = rows(clean_db, "SELECT state, error->>'reason' FROM provider_batches")
        assert (state, error) == ("failed", "never_submitted")
        assert set(job_states(clean_db).values()) == {"RETRY_SCHEDULED"}
        again = prepare_round(survivor, immediate_room=100)
        assert again.batches == [] and len(again.immediate) == 10, "a job is offered to the Batch API once"
        assert set(run_immediate(survivor.execution, again.immediate)) == {AttemptEnd.SUCCEEDED}

    # Either way: every job succeeded exactly once.
    assert set(job_states(clean_db).values()) == {"SUCCEEDED"}
    one_result_each(clean_db, job_ids)


def test_a_partly_failed_batch_retries_only_its_failed_lines_on_the_immediate_path(
    known_tenant, system_db, simulator, clock, clean_db
):
    job_ids = submit_invoices(known_tenant, 10)
    deps = batch_deps(system_db, simulator, clock)
    # Given a batch whose first three lines the provider answers with a server error.
    simulator.queue_line_faults(["500", "500", "500"])
    claimed, _ = prepare_and_submit(deps)
    failed_jobs = {str(job.job_id) for job in claimed.batches[0].jobs[:3]}

    # When the batch ends and is settled.
    poll_until_settled(deps, clock)

    # Then only those three wait for a retry; the other seven succeeded once, at the batch price.
    states = job_states(clean_db)
    assert {j for j, s in states.items() if s == "RETRY_SCHEDULED"} == failed_jobs
    assert {s for j, s in states.items() if j not in failed_jobs} == {"SUCCEEDED"}

    # And the retries run one by one on the immediate path, not in another batch.
    clock.advance(120)
    again = prepare_round(deps, immediate_room=100)
    assert again.batches == [] and {str(job.job_id) for job in again.immediate} == failed_jobs
    assert set(run_immediate(deps.execution, again.immediate)) == {AttemptEnd.SUCCEEDED}
    assert set(job_states(clean_db).values()) == {"SUCCEEDED"}
    one_result_each(clean_db, job_ids)
    assert batches_created(simulator) == 1
    [(immediate_attempts,)] = rows(clean_db, "SELECT count(*) FROM job_attempts WHERE batch_id IS NULL")
    assert immediate_attempts == 3


def test_an_expired_batch_returns_its_jobs_in_time_for_their_deadline(
    known_tenant, system_db, simulator, clock, clean_db
):
    # Given jobs whose deadline leaves just the window, its settle and one immediate attempt, in a batch the
    # provider lets expire at the end of its window having answered only part of it.
    deadline = int(DAY + 2 * 3600 + 600)
    job_ids = submit_invoices(known_tenant, 10, deadline_seconds=deadline)
    simulator.configure_batches(completion_seconds=2 * DAY, expire_after_seconds=DAY)
    deps = batch_deps(system_db, simulator, clock)
    claimed, ends = prepare_and_submit(deps)
    assert ends == [SubmitEnd.SUBMITTED] and len(claimed.batches[0].jobs) == 10

    # When the poller sees it expired, past the provider's 24 hours.
    poll_until_settled(deps, clock, step=DAY / 4 + 60)

    # Then the answered lines are committed and the rest are runnable now, before their deadline.
    [(state,)] = rows(clean_db, "SELECT state FROM provider_batches")
    assert state == "expired"
    returned = rows(
        clean_db,
        "SELECT job_id FROM extraction_jobs WHERE state = 'RETRY_SCHEDULED' AND next_attempt_at <= %s"
        " AND deadline_at > %s + interval '1 hour'",
        clock.now(),
        clock.now(),
    )
    assert 0 < len(returned) < 10, "an expired batch answers part of its lines"
    again = prepare_round(deps, immediate_room=100)
    assert set(run_immediate(deps.execution, again.immediate)) == {AttemptEnd.SUCCEEDED}
    late = rows(clean_db, "SELECT job_id FROM extraction_jobs WHERE finished_at > deadline_at")
    assert late == [] and set(job_states(clean_db).values()) == {"SUCCEEDED"}
    one_result_each(clean_db, job_ids)


def test_a_job_cancelled_while_in_a_batch_is_not_completed(
    known_tenant, system_db, simulator, clock, clean_db
):
    job_ids = submit_invoices(known_tenant, 5)
    deps = batch_deps(system_db, simulator, clock)
    prepare_and_submit(deps)

    # Given a tenant cancelling one job while it waits in the batch.
    cancelled = known_tenant.client.request("POST", f"/extraction-jobs/{job_ids[0]}/cancel")
    assert cancelled.status == 200 and cancelled.json["state"] == "CANCELLED"

    # When the batch completes with an answer for every line, that job's included.
    poll_until_settled(deps, clock)

    # Then the cancelled job stays cancelled, with no result and no completed event; its line's cost is kept.
    states = job_states(clean_db)
    assert states[job_ids[0]] == "CANCELLED"
    assert {states[j] for j in job_ids[1:]} == {"SUCCEEDED"}
    one_result_each(clean_db, job_ids[1:])
    [(outcome, cost)] = rows(
        clean_db, "SELECT outcome, cost_usd FROM job_attempts WHERE job_id = %s", UUID(job_ids[0])
    )
    assert outcome == "discarded_stale" and cost > 0
    [(member_outcome,)] = rows(
        clean_db, "SELECT outcome FROM provider_batch_jobs WHERE job_id = %s", UUID(job_ids[0])
    )
    assert member_outcome == "discarded_stale"
    events = rows(
        clean_db,
        "SELECT event_type FROM outbox_events WHERE aggregate_id = %s ORDER BY created_at",
        UUID(job_ids[0]),
    )
    assert [e for (e,) in events if e not in {"extraction.requested.v1", "job.state_changed.v1"}] == [
        "extraction.cancelled.v1"
    ]


def test_a_job_whose_deadline_is_too_near_for_a_batch_runs_on_the_immediate_path(
    known_tenant, system_db, simulator, clock, clean_db
):
    job_ids = submit_invoices(known_tenant, 2, deadline_seconds=int(DAY))
    deps = batch_deps(system_db, simulator, clock)

    claimed, _ = prepare_and_submit(deps)

    assert claimed.batches == [] and sorted(str(j.job_id) for j in claimed.immediate) == sorted(job_ids)
    assert set(run_immediate(deps.execution, claimed.immediate)) == {AttemptEnd.SUCCEEDED}
    assert rows(clean_db, "SELECT 1 FROM provider_batches") == []


def test_a_worker_with_the_batch_api_on_runs_the_batch_tier_through_batches_and_the_rest_at_once(
    known_tenant, system_db, clean_db
):
    from tollgate.execution.worker import WorkerConfig, run_worker

    # Given a worker serving the batch tier with the Batch API on, on the real clock, and a provider whose
    # batches take half a second: ten jobs with a three-day deadline and two due within the day.
    config = SimulatorConfig(
        requests_per_minute=None, tokens_per_minute=None, batches=BatchSimulation(completion_seconds=0.5)
    )
    far = submit_invoices(known_tenant, 10)
    near = submit_invoices(known_tenant, 2, deadline_seconds=int(DAY), seed=9)
    with SimulatedProvider(config) as simulator:
        clock = SystemClock()
        deps = batch_deps(system_db, simulator, clock, poll_seconds=0.1, interval_seconds=0.1)
        worker_config = WorkerConfig(
            slots=2, tenant_cap=8, idle_seconds=0.05, drain_seconds=5, service_tiers=("batch",)
        )

        async def scenario() -> None:
            stop = asyncio.Event()
            worker = asyncio.create_task(run_worker([], deps.execution, worker_config, stop, batch=deps))
            try:
                # When it runs until every job has finished (a bounded wait on the database's answer).
                loop = asyncio.get_running_loop()
                give_up = loop.time() + 120
                while set(job_states(clean_db).values()) != {"SUCCEEDED"}:
                    assert loop.time() < give_up, f"jobs not done: {job_states(clean_db)}"
                    assert not worker.done(), "the worker stopped on its own"
                    await asyncio.sleep(0.05)
            finally:
                stop.set()
                await asyncio.wait_for(worker, 60)

        asyncio.run(scenario())

    # Then the far jobs went through one provider batch at the batch price, the near ones ran at once.
    one_result_each(clean_db, far + near)
    through_batch = {
        str(j) for (j,) in rows(clean_db, "SELECT job_id FROM job_attempts WHERE batch_id IS NOT NULL")
    }
    assert through_batch == set(far)
    assert rows(clean_db, "SELECT state FROM provider_batches") == [("completed",)]


def test_a_poller_killed_mid_download_leaves_the_rest_to_the_next_and_commits_nothing_twice(
    known_tenant, system_db, simulator, clock, clean_db, crash_at
):
    job_ids = submit_invoices(known_tenant, 10)
    deps = batch_deps(system_db, simulator, clock)
    prepare_and_submit(deps)

    # Given a poller that dies after committing the fourth line of the ended batch.
    crash_at(BATCH_LINE_COMMITTED, at=4)
    clock.advance(COMPLETION_SECONDS + 1)
    with pytest.raises(Crash):
        poll_batches(deps)
    assert rows(clean_db, "SELECT count(*) FROM provider_batch_jobs WHERE settled_at IS NOT NULL") == [(4,)]
    assert rows(clean_db, "SELECT state, settled_at IS NULL FROM provider_batches") == [("completed", True)]

    # When another poller takes the batch over once the dead one's hold has run out.
    survivor = batch_deps(system_db, simulator, clock, worker_id="poller-b")
    clock.advance(deps.config.hold_seconds + 1)
    report = poll_batches(survivor)

    # Then it commits the six lines left, and every job has its one result.
    assert (report.lines, report.settled) == (6, 1)
    assert set(job_states(clean_db).values()) == {"SUCCEEDED"}
    one_result_each(clean_db, job_ids)


def test_a_line_for_a_job_the_reaper_took_back_is_discarded_and_its_cost_kept(
    known_tenant, system_db, simulator, clock, clean_db
):
    job_ids = submit_invoices(known_tenant, 3)
    deps = batch_deps(system_db, simulator, clock)
    prepare_and_submit(deps)

    # Given the batch's jobs reaped after their leases ran out (no poller came for a day and more), then run
    # on the immediate path.
    clock.advance(deps.config.lease_seconds + 1)
    reaped = run_scheduler(
        SchedulerDeps(system_db, clock, new_id, RecordedMetrics(), RetryPolicy(), lambda low, high: 0)
    )
    assert reaped.reaped_to_retry == 3
    again = prepare_round(deps, immediate_room=100)
    assert again.batches == [] and set(run_immediate(deps.execution, again.immediate)) == {
        AttemptEnd.SUCCEEDED
    }

    # When the poller finally settles the batch, whose lines all came back answered.
    report = poll_batches(deps)

    # Then each line is discarded (its fence moved), its cost kept on the batch attempt, and no job twice.
    assert report.settled == 1
    one_result_each(clean_db, job_ids)
    outcomes = rows(clean_db, "SELECT attempt, outcome, batch_id IS NOT NULL, cost_usd > 0 FROM job_attempts")
    assert sorted(outcomes) == [(1, "discarded_stale", True, True)] * 3 + [(2, "ok", False, True)] * 3


def test_a_batch_the_provider_refuses_gives_its_jobs_back_to_the_immediate_path(
    known_tenant, system_db, simulator, clock, clean_db
):
    job_ids = submit_invoices(known_tenant, 4)
    # Given a provider whose queue for the model is smaller than the file (its own limit, unknown to us).
    simulator.configure_batches(enqueued_token_limit={"small-model": 1, "large-model": 1})
    deps = batch_deps(system_db, simulator, clock)
    _, ends = prepare_and_submit(deps)
    assert ends == [SubmitEnd.SUBMITTED]

    # When the poller sees it failed.
    poll_until_settled(deps, clock)

    # Then its jobs are runnable at once and run on the immediate path.
    [(state, error)] = rows(clean_db, "SELECT state, error::text FROM provider_batches")
    assert state == "failed" and "token" in error
    again = prepare_round(deps, immediate_room=100)
    assert again.batches == [] and set(run_immediate(deps.execution, again.immediate)) == {
        AttemptEnd.SUCCEEDED
    }
    one_result_each(clean_db, job_ids)


def test_a_round_seals_a_file_at_its_byte_limit_and_starts_the_next(
    known_tenant, system_db, simulator, clock, clean_db
):
    job_ids = submit_invoices(known_tenant, 5)
    # Given files that hold two request lines each (an invoice's line is a few kilobytes).
    probe = batch_deps(system_db, simulator, clock)
    claimed = prepare_round(probe, immediate_room=1)
    line = max(len(b.lines[0]) for b in claimed.batches)
    assert claimed.claimed == 5
    for batch in claimed.batches:
        asyncio.run(submit_batch(probe, batch, asyncio.Event()))
    poll_until_settled(probe, clock)
    one_result_each(clean_db, job_ids)

    more = submit_invoices(known_tenant, 5, seed=11)
    deps = batch_deps(system_db, simulator, clock, max_bytes=int(line * 2.5))

    # When a round claims them.
    claimed = prepare_round(deps, immediate_room=1)

    # Then no file passes the limit: five jobs in files of two, two and one, each one submitted and answered.
    assert sorted(len(b.jobs) for b in claimed.batches) == [1, 2, 2]
    assert all(b.size <= deps.config.max_bytes for b in claimed.batches)
    for batch in claimed.batches:
        asyncio.run(submit_batch(deps, batch, asyncio.Event()))
    poll_until_settled(deps, clock)
    one_result_each(clean_db, job_ids + more)


def test_a_file_that_finds_no_room_in_the_batch_budget_sends_its_jobs_to_the_immediate_path(
    known_tenant, system_db, simulator, clock, clean_db
):
    job_ids = submit_invoices(known_tenant, 3)
    deps = batch_deps(system_db, simulator, clock, budget_wait_seconds=0)
    # Given the Batch API's budget for the model held by other batches to the last token.
    claimed = prepare_round(deps, immediate_room=1)
    [batch] = claimed.batches
    pool = deps.execution.provider_pool
    filler = Enqueue(pool, batch.model, "other-batch", POOL_LIMIT, clock.now() + timedelta(hours=25))
    assert isinstance(deps.pool.try_enqueue(filler), Enqueued)

    # When the file is submitted.
    end = asyncio.run(submit_batch(deps, batch, asyncio.Event()))

    # Then nothing reached the provider, the batch failed, and its jobs run now on the immediate path.
    assert end is SubmitEnd.GIVEN_UP and batches_created(simulator) == 0
    assert rows(clean_db, "SELECT state, error->>'reason' FROM provider_batches") == [
        ("failed", "no_batch_budget")
    ]
    again = prepare_round(deps, immediate_room=100)
    assert set(run_immediate(deps.execution, again.immediate)) == {AttemptEnd.SUCCEEDED}
    one_result_each(clean_db, job_ids)


def test_the_worker_counts_batches_their_end_the_lines_committed_and_the_jobs_given_back(
    known_tenant, system_db, simulator, clock, clean_db
):
    from tollgate.core.metrics import (
        BATCH_JOBS_RETURNED,
        BATCH_LINES_COMMITTED,
        BATCHES_ENDED,
        BATCHES_SUBMITTED,
    )
    from tollgate.execution.batch.states import ENDED_STATES

    # Given a batch of ten the provider lets expire having answered part of it, and one of its jobs cancelled
    # while it waits (its line, answered or not, is neither committed nor given back).
    job_ids = submit_invoices(known_tenant, 10, deadline_seconds=int(DAY + 2 * 3600 + 600))
    simulator.configure_batches(completion_seconds=2 * DAY, expire_after_seconds=DAY)
    deps = batch_deps(system_db, simulator, clock)
    metrics = deps.execution.metrics
    assert isinstance(metrics, RecordedMetrics)
    _, ends = prepare_and_submit(deps)
    assert ends == [SubmitEnd.SUBMITTED]
    assert known_tenant.client.request("POST", f"/extraction-jobs/{job_ids[0]}/cancel").status == 200

    # When the poller follows it to its end and settles it.
    poll_until_settled(deps, clock, step=DAY / 4 + 60)

    # Then the worker counted one batch submitted and one expired, a committed line per job it completed and
    # a job given back per job now waiting to run again.
    states = list(job_states(clean_db).values())
    assert set(BATCHES_ENDED) == {state.value for state in ENDED_STATES}
    assert metrics.counts[BATCHES_SUBMITTED] == 1
    assert {state: metrics.counts[name] for state, name in BATCHES_ENDED.items()} == {
        "completed": 0,
        "expired": 1,
        "failed": 0,
        "cancelled": 0,
    }
    assert metrics.counts[BATCH_LINES_COMMITTED] == states.count("SUCCEEDED") > 0
    assert metrics.counts[BATCH_JOBS_RETURNED] == states.count("RETRY_SCHEDULED") > 0
    assert states.count("CANCELLED") == 1


@pytest.mark.parametrize("checkpoint", [BATCH_AFTER_UPLOAD, BATCH_AFTER_CREATE])
def test_a_batch_recovered_after_its_batcher_died_is_counted_once(
    checkpoint, known_tenant, system_db, simulator, clock, clean_db, crash_at
):
    from tollgate.core.metrics import (
        BATCH_JOBS_RETURNED,
        BATCH_LINES_COMMITTED,
        BATCHES_ENDED,
        BATCHES_SUBMITTED,
    )

    submit_invoices(known_tenant, 4)
    deps = batch_deps(system_db, simulator, clock)
    survivor = batch_deps(system_db, simulator, clock, worker_id="poller-b")

    # Given a batcher that dies after the upload, or after the create and before recording it.
    crash_at(checkpoint)
    with pytest.raises(Crash):
        prepare_and_submit(deps)

    # When another worker's poller recovers the batch and follows it to its end.
    clock.advance(deps.config.hold_seconds + 1)
    poll_until_settled(survivor, clock)

    # Then the batch is counted once, by whoever knew what happened to it: adopted, it was submitted and
    # completed; never created, it failed and its jobs went back.
    counts = deps.execution.metrics.counts + survivor.execution.metrics.counts  # type: ignore[attr-defined]
    if checkpoint == BATCH_AFTER_CREATE:
        expected = {BATCHES_SUBMITTED: 1, BATCHES_ENDED["completed"]: 1, BATCH_LINES_COMMITTED: 4}
    else:
        expected = {BATCHES_ENDED["failed"]: 1, BATCH_JOBS_RETURNED: 4}
    names = (BATCHES_SUBMITTED, *BATCHES_ENDED.values(), BATCH_LINES_COMMITTED, BATCH_JOBS_RETURNED)
    assert {name: counts[name] for name in names} == {name: expected.get(name, 0) for name in names}


def test_an_escalation_to_the_large_model_goes_into_a_batch_of_its_own_when_the_deadline_allows(
    known_tenant, system_db, simulator, clock, clean_db
):
    # Given invoices whose totals do not add up (the small model's result fails validation), with a deadline
    # that leaves room for two batches, and escalation to the large model on.
    job_ids = submit_invoices(known_tenant, 3, deadline_seconds=6 * 24 * 3600, kind=INCONSISTENT_TOTAL)
    deps = batch_deps(system_db, simulator, clock)
    deps = replace(deps, execution=replace(deps.execution, router=ModelRouter("small-model", "large-model")))

    # When the first batch (small model) settles and the next round claims the escalated jobs.
    prepare_and_submit(deps)
    poll_until_settled(deps, clock)
    assert set(job_states(clean_db).values()) == {"RETRY_SCHEDULED"}
    claimed, _ = prepare_and_submit(deps)
    poll_until_settled(deps, clock)

    # Then the large model's attempt went through a batch too, at the batch price, and the jobs went to review.
    assert claimed.immediate == [] and [b.model for b in claimed.batches] == ["large-model"]
    assert set(job_states(clean_db).values()) == {"REVIEW_REQUIRED"}
    attempts = rows(
        clean_db, "SELECT job_id, model, outcome, batch_id IS NOT NULL FROM job_attempts ORDER BY attempt"
    )
    assert sorted((m, o, b) for _, m, o, b in attempts) == sorted(
        [("small-model", "escalated", True)] * 3 + [("large-model", "ok", True)] * 3
    )
    assert {str(j) for j, *_ in attempts} == set(job_ids)


class ReleaseRefusedOnce(InMemoryBatchPool):
    """The Batch API's budget whose table does not answer the first release, as in an AWS outage."""

    refused = 0

    def release(self, pool: str, model: str, holder: str) -> None:
        if not self.refused:
            self.refused += 1
            raise LimiterUnavailable("the budget's table did not answer")
        super().release(pool, model, holder)


def test_a_batch_is_settled_only_once_its_enqueued_tokens_are_back_in_the_budget(
    known_tenant, system_db, simulator, clock, clean_db
):
    submit_invoices(known_tenant, 3)
    pool = ReleaseRefusedOnce(clock, Limits(POOL_LIMIT))
    deps = replace(batch_deps(system_db, simulator, clock), pool=pool)
    claimed, _ = prepare_and_submit(deps)
    provider_pool, model = deps.execution.provider_pool, claimed.batches[0].model
    assert pool.room(provider_pool, model) < POOL_LIMIT

    # Given a batch that ends while the budget's table does not answer the poller's release.
    clock.advance(COMPLETION_SECONDS)
    first = poll_batches(deps)

    # Then its lines are committed, but it is not settled: a settled batch is never looked at again, and its
    # tokens would stay held for a day.
    assert (first.lines, first.settled, pool.refused) == (3, 0, 1)
    assert rows(clean_db, "SELECT 1 FROM provider_batches WHERE settled_at IS NULL") == [(1,)]
    assert pool.room(provider_pool, model) < POOL_LIMIT

    # When the next poller takes it once the hold ran out, the tokens go back and the batch is settled.
    report = poll_until_settled(deps, clock, step=deps.config.hold_seconds + 1)
    assert report.settled == 1 and report.lines == 0
    assert pool.room(provider_pool, model) == POOL_LIMIT
    assert set(job_states(clean_db).values()) == {"SUCCEEDED"}


def test_a_line_two_pollers_commit_keeps_the_first_ones_accepted_answer(
    known_tenant, system_db, simulator, clock, clean_db
):
    from tollgate.execution.attempt import BatchLine, finish_batch_line, load_pages, task_of
    from tollgate.execution.batch.poller import _member_job
    from tollgate.execution.llm.batch_api import line_result, parse_output_line

    # Given one line of an ended batch read by two pollers, the second after its hold ran out mid-settle.
    [job_id] = submit_invoices(known_tenant, 1)
    deps = batch_deps(system_db, simulator, clock)
    claimed, _ = prepare_and_submit(deps)
    clock.advance(COMPLETION_SECONDS + 1)
    [batch] = claimed.batches
    [(provider_id,)] = rows(clean_db, "SELECT provider_batch_id FROM provider_batches")
    [raw] = list(deps.api.lines(deps.api.retrieve(provider_id).output_file_id))
    with system_db.transaction() as conn:
        member = conn.execute(
            system_db.q.batch_member, {"batch_id": batch.batch_id, "job_id": UUID(job_id)}
        ).fetchone()
    job = _member_job(member)
    task = task_of(job, load_pages(deps.execution, job))
    result = line_result(parse_output_line(raw), task.job_type, batch.model)
    line = BatchLine(batch.batch_id, deps.config.price_factor)

    # When both commit it, one after the other.
    first = finish_batch_line(deps.execution, job, task, result, routed=batch.model, line=line)
    second = finish_batch_line(deps.execution, job, task, result, routed=batch.model, line=line)

    # Then the first's answer stands, recorded once as accepted; the second wrote nothing.
    assert (first.end, second.end) == (AttemptEnd.SUCCEEDED, AttemptEnd.LOST)
    assert rows(clean_db, "SELECT outcome FROM job_attempts") == [("ok",)]
    assert rows(clean_db, "SELECT outcome FROM provider_batch_jobs") == [("SUCCEEDED",)]
    one_result_each(clean_db, [job_id])
