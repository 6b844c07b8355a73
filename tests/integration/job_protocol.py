"""The property run of the job state machine and the lease/fence protocol against real PostgreSQL, shared by
the run itself (test_job_protocol_properties) and the hunts for planted bugs (test_job_protocol_planted_bugs),
which are files of their own so that --dist loadfile can give them to different workers.

Hypothesis interleaves claims, heartbeats, completions, releases, stalls, scheduler ticks, cancels,
audited redrives and the passing of a fake clock, for several workers that may hold stale fences; after
every step the database is compared with a small model of what must be true.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import psycopg
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test
from psycopg.rows import DictRow, dict_row
from pydantic import SecretStr

from tests.integration.test_execution import TEXT, ScriptedLlm, extraction, ok
from tollgate.accept.models import CreateJobRequest
from tollgate.accept.service import AcceptanceDeps, accept_job, cancel_job
from tollgate.core.clock import FakeClock, new_id
from tollgate.core.errors import InvalidState
from tollgate.core.job_states import FINISHED_STATES, JobState, can_transition
from tollgate.core.metrics import RecordedMetrics
from tollgate.core.retry import RetryPolicy
from tollgate.db import Database
from tollgate.events import (
    EXTRACTION_CANCELLED,
    EXTRACTION_COMPLETED,
    EXTRACTION_FAILED,
    EXTRACTION_REQUESTED,
    EXTRACTION_REVIEW_REQUIRED,
)
from tollgate.execution.attempt import AttemptEnd, ExecutionDeps, ModelRouter, run_attempt
from tollgate.execution.leasing import ClaimedJob, claim_next_job, extend_lease, release_job
from tollgate.execution.llm.client import LlmResult, OutcomeClass
from tollgate.scheduler.tick import SchedulerDeps, run_scheduler
from tollgate.settings import ApiSettings
from tollgate.support.service import SupportDeps, retry_job
from tollgate.tenants.keys import create_tenant
from tollgate.tenants.suppliers import add_supplier
from tollgate.wiring import acceptance_limits
from tollgate_dev.baselines import NoLimiter
from tollgate_dev.documents import MemoryDocuments

WORKERS = ("worker-a", "worker-b", "worker-c")
LEASE_SECONDS = 60
POLICY = RetryPolicy(base_seconds=2, cap_seconds=60, attempt_timeout_seconds=30)
EXTRA_ATTEMPTS = 2
REDRIVE_DEADLINE_SECONDS = 600
MAX_JOBS = 6
# Half a minute past: leases taken at the start run out between two of the scheduler's minute ticks.
START = datetime(2026, 3, 2, 9, 0, 30, tzinfo=UTC)

# What the provider answers for one completion, and the attempt outcome it is recorded as.
ANSWERS: dict[str, tuple[Callable[[], LlmResult], str]] = {
    "succeeded": (ok, "ok"),
    "review": (lambda: ok(extraction(total="999.70")), "ok"),
    "transient": (lambda: LlmResult(OutcomeClass.TRANSIENT, "", error="503"), "transient"),
    "throttled": (
        lambda: LlmResult(OutcomeClass.THROTTLED, "", retry_after_seconds=40.0, error="429"),
        "throttled",
    ),
    "refused": (lambda: LlmResult(OutcomeClass.REFUSED, "", error="refused"), "refused"),
}
# "stall": the worker pauses past its lease (a long GC pause, a partition) while time runs on for everyone
# and the scheduler ticks.
MOVES = ("claim", "complete", "heartbeat", "release", "stall")
OPERATIONS = ("tick", "submit", "cancel", "redrive")
DEADLINES = st.sampled_from([3600, 600, 150])
UNFINISHED = [state.value for state in JobState if not state.is_finished]


@dataclass(frozen=True)
class Move:
    worker: str
    action: str
    pick: int  # which of the worker's claims, when it holds several
    answer: str  # the provider's answer, for a completion


@dataclass(frozen=True)
class Operation:
    action: str
    job: int  # which job (or which tenant, for a submission)
    deadline: int  # for a submission


@dataclass(frozen=True)
class Held:
    """A claim as one worker remembers it; the worker keeps it after the job moved on (a stale fence)."""

    worker: str
    job: ClaimedJob


def refuses(call: Callable[[], object]) -> bool:
    try:
        call()
    except InvalidState:
        return True
    return False


@dataclass
class JobModel:
    job_id: UUID
    tenant_id: UUID
    deadline_at: datetime
    max_attempts: int
    state: JobState = JobState.READY
    attempt: int = 0
    fence: int = 0
    state_version: int = 1
    lease_owner: str | None = None
    lease_until: datetime | None = None
    next_attempt_at: datetime | None = None
    reason: str | None = None
    result_attempt: int | None = None
    # attempt number -> (fence, outcome); the outcome is None while the attempt is open
    attempts: dict[int, tuple[int, str | None]] = field(default_factory=dict)
    events: Counter[tuple[str, str | None]] = field(default_factory=Counter)
    audits: int = 0

    def owned_by(self, held: Held) -> bool:
        return self.state is JobState.RUNNING and self.fence == held.job.fence

    def close_open_attempts(self, fence: int, outcome: str) -> None:
        for number, (attempt_fence, current) in self.attempts.items():
            if attempt_fence == fence and current is None:
                self.attempts[number] = (attempt_fence, outcome)

    def leave_running(self, state: JobState, reason: str | None, *, move_fence: bool) -> None:
        self.state, self.reason = state, reason
        self.state_version += 1
        self.fence += 1 if move_fence else 0
        self.lease_owner = self.lease_until = self.next_attempt_at = None
        if state is JobState.FAILED_TERMINAL:
            self.events[(EXTRACTION_FAILED, reason)] += 1


class JobProtocol(RuleBasedStateMachine):
    """The model and the rules; the test that runs it sets the class attributes."""

    system_db: Database
    app_db: Database
    owner: psycopg.Connection[DictRow]  # reads every row, beneath row-level security

    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock(START)
        self.documents = MemoryDocuments()
        self.jobs: dict[UUID, JobModel] = {}
        self.tenants: list[UUID] = []
        self.seen: dict[UUID, dict[str, Any]] = {}
        # What each worker believes it holds. A claim stays here after the job moved on, until the worker
        # completes or releases it, as a real worker's attempt would.
        self.held: dict[str, list[ClaimedJob]] = {worker: [] for worker in WORKERS}
        self.keys = iter(range(1_000_000))

    def teardown(self) -> None:
        # Each example has its own tenants; ending their jobs keeps them from the next example's claims,
        # and costs far less than truncating every table between examples.
        if self.tenants:
            self.owner.execute(SET_ASIDE_SQL, {"tenants": self.tenants, "unfinished": UNFINISHED})

    # -- setup ---------------------------------------------------------------------------------------

    @initialize(
        tenant_cap=st.sampled_from([2, 1, 3]),
        jitter=st.sampled_from([0.0, 0.5, 1.0]),
        max_attempts=st.sampled_from([3, 1, 2]),
        deadlines=st.lists(DEADLINES, min_size=2, max_size=4),
    )
    def open_accounts(self, tenant_cap: int, jitter: float, max_attempts: int, deadlines: list[int]) -> None:
        self.tenant_cap = tenant_cap
        self.jitter_share = jitter
        self.acceptance = AcceptanceDeps(
            db=self.app_db,
            documents=self.documents,
            limits=acceptance_limits(
                ApiSettings(
                    database_url=SecretStr("postgresql://unused"),
                    documents_bucket="memory",
                    default_max_attempts=max_attempts,
                )
            ),
            clock=self.clock,
            new_id=new_id,
        )
        self.execution = ExecutionDeps(
            db=self.system_db,
            documents=self.documents,
            llm=ScriptedLlm(),
            limiter=NoLimiter(self.clock),  # the provider budget is not what this test is about
            clock=self.clock,
            new_id=new_id,
            retry_policy=POLICY,
            jitter=self.jitter,
            router=ModelRouter("small-model", "large-model", escalate=False),
            prices={},
            worker_id="",
            provider_pool="test",
            lease_seconds=LEASE_SECONDS,
            heartbeat_seconds=3600,  # heartbeats are this test's own moves, not a background task's
            max_output_tokens=1000,
        )
        for _ in range(2):
            tenant = create_tenant(self.system_db, f"tenant-{new_id().hex}", new_id).tenant_id
            add_supplier(self.system_db, tenant, "Nordwind Logistik GmbH", "DE89370400440532013000", new_id)
            self.tenants.append(tenant)
        for index, deadline in enumerate(deadlines):
            self.submit(index, deadline)

    def jitter(self, low: float, high: float) -> float:
        return low + self.jitter_share * (high - low)

    # -- rules ---------------------------------------------------------------------------------------
    # Hypothesis tries rules with fewer arguments first, then by name: each rule takes one argument, and
    # the workers' rule sorts first, so most steps are workers' moves rather than the world's.

    @rule(
        move=st.builds(
            Move,
            st.sampled_from(WORKERS),
            st.sampled_from(MOVES),
            st.integers(0, 3),
            st.sampled_from(list(ANSWERS)),
        )
    )
    def act(self, move: Move) -> None:
        """One worker's next move. A worker holding nothing claims: that is what a free slot does."""
        held = self.held[move.worker]
        if move.action == "stall":
            self.clock.advance(LEASE_SECONDS + 1)
            self.tick_scheduler()  # and the scheduler notices before the worker wakes up
        elif move.action == "claim" or not held:
            self.claim(move.worker)
        elif move.action == "heartbeat":
            self.heartbeat(Held(move.worker, held[move.pick % len(held)]))
        else:
            job = held.pop(move.pick % len(held))  # an attempt ends once, however it ends
            if move.action == "complete":
                self.complete(Held(move.worker, job), move.answer)
            else:
                self.release(Held(move.worker, job))

    @rule(seconds=st.sampled_from([61, 15, 1, 59, 200, 900]))
    def advance(self, seconds: int) -> None:
        """Time passes. The scheduler runs only when a step says so, so a lease can run out unnoticed."""
        self.clock.advance(seconds)

    @rule(op=st.builds(Operation, st.sampled_from(OPERATIONS), st.integers(0, MAX_JOBS - 1), DEADLINES))
    def operate(self, op: Operation) -> None:
        """What goes on around the workers: the scheduler's tick, tenants submitting and cancelling, support
        staff redriving."""
        jobs = list(self.jobs.values())
        if op.action == "tick":
            self.tick_scheduler()
        elif op.action == "submit" and len(jobs) < MAX_JOBS:
            self.submit(op.job, op.deadline)
        elif op.action == "cancel":
            self.cancel(jobs[op.job % len(jobs)])
        elif op.action == "redrive":
            self.redrive(jobs[op.job % len(jobs)])

    # -- what each move does, and what the model says it must do ---------------------------------------

    def submit(self, tenant_index: int, deadline: int) -> None:
        tenant = self.tenants[tenant_index % len(self.tenants)]
        key = next(self.keys)
        request = CreateJobRequest.model_validate(
            {"document": {"pages": [{"text": f"{TEXT}\nref {key}"}]}, "deadline_seconds": deadline}
        )
        view = accept_job(self.acceptance, tenant, f"key-{key}", request).job
        job = JobModel(
            view.job_id,
            tenant,
            deadline_at=self.clock.now() + timedelta(seconds=deadline),
            max_attempts=self.acceptance.limits.default_max_attempts,
        )
        job.events[(EXTRACTION_REQUESTED, None)] += 1
        self.jobs[job.job_id] = job

    def claim(self, worker: str) -> None:
        now = self.clock.now()
        # A claim that meets a queued job past its deadline ends it, as the scheduler would have.
        expiring = [
            j
            for j in self.jobs.values()
            if j.state in {JobState.READY, JobState.RETRY_SCHEDULED} and j.deadline_at <= now
        ]
        claimed = claim_next_job(
            self.system_db,
            self.clock,
            worker_id=worker,
            lease_seconds=LEASE_SECONDS,
            tenant_cap=self.tenant_cap,
        )
        for job in expiring:
            ended = self.owner.execute(
                "SELECT state FROM extraction_jobs WHERE job_id = %s", (job.job_id,)
            ).fetchone()
            if ended is not None and ended["state"] == JobState.FAILED_TERMINAL:
                job.leave_running(JobState.FAILED_TERMINAL, "deadline_exceeded", move_fence=True)
        eligible = self.claimable(now)
        if claimed is None:
            assert not eligible, f"nothing was claimed although {len(eligible)} job(s) could run"
            return
        assert claimed.job_id in eligible, "the claim handed out a job that may not run now"
        job = self.jobs[claimed.job_id]
        job.state, job.attempt, job.fence = JobState.RUNNING, job.attempt + 1, job.fence + 1
        job.state_version += 1
        job.lease_owner, job.lease_until = worker, now + timedelta(seconds=LEASE_SECONDS)
        job.next_attempt_at = None
        job.attempts[job.attempt] = (job.fence, None)
        assert (claimed.attempt, claimed.fence) == (job.attempt, job.fence)
        self.held[worker].append(claimed)

    def claimable(self, now: datetime) -> set[UUID]:
        running = Counter(j.tenant_id for j in self.jobs.values() if j.state is JobState.RUNNING)
        return {
            j.job_id
            for j in self.jobs.values()
            if (
                j.state is JobState.READY
                or (
                    j.state is JobState.RETRY_SCHEDULED
                    and j.next_attempt_at is not None
                    and j.next_attempt_at <= now
                )
            )
            and j.deadline_at > now
            and j.attempt < j.max_attempts
            and running[j.tenant_id] < self.tenant_cap
        }

    def heartbeat(self, held: Held) -> None:
        job = self.jobs[held.job.job_id]
        expected = job.owned_by(held)  # the fence decides, not the lease: no one else can hold this fence
        owned = extend_lease(self.system_db, self.clock, held.job, LEASE_SECONDS)
        assert owned == expected, (
            f"heartbeat with fence {held.job.fence} (job at {job.fence}) returned {owned}"
        )
        if owned:
            job.lease_until = self.clock.now() + timedelta(seconds=LEASE_SECONDS)

    def complete(self, held: Held, answer: str) -> None:
        job = self.jobs[held.job.job_id]
        now = self.clock.now()
        make_answer, outcome = ANSWERS[answer]
        deps = dataclasses.replace(self.execution, llm=ScriptedLlm(make_answer()), worker_id=held.worker)
        report = asyncio.run(run_attempt(deps, held.job))
        if not (job.owned_by(held) and job.lease_until is not None and job.lease_until > now):
            assert report.end is AttemptEnd.LOST, (
                f"a stale attempt (fence {held.job.fence}) ended {report.end}"
            )
            job.attempts[held.job.attempt] = (held.job.fence, "discarded_stale")
            return
        state, next_at, reason = self.next_after(job, answer, now)
        assert report.end.value == state.value
        job.attempts[held.job.attempt] = (held.job.fence, outcome)
        if state in {JobState.SUCCEEDED, JobState.REVIEW_REQUIRED}:
            job.result_attempt = job.attempt
            event = EXTRACTION_COMPLETED if state is JobState.SUCCEEDED else EXTRACTION_REVIEW_REQUIRED
            job.events[(event, None)] += 1
        job.leave_running(state, reason, move_fence=False)
        job.next_attempt_at = next_at

    def next_after(
        self, job: JobModel, answer: str, now: datetime
    ) -> tuple[JobState, datetime | None, str | None]:
        """Where a finished attempt leads, written out from the design rather than from the code."""
        if answer == "succeeded":
            return JobState.SUCCEEDED, None, None
        if answer == "review":
            return JobState.REVIEW_REQUIRED, None, None
        if answer == "refused":
            return JobState.FAILED_TERMINAL, None, "refused"
        start = self.retry_start(job, now, retry_after=40.0 if answer == "throttled" else None)
        if start is None:
            return JobState.FAILED_TERMINAL, None, self.exhaustion(job)
        return JobState.RETRY_SCHEDULED, start, None

    def retry_start(self, job: JobModel, now: datetime, retry_after: float | None = None) -> datetime | None:
        if job.attempt >= job.max_attempts:
            return None
        ceiling = min(POLICY.cap_seconds, POLICY.base_seconds * 2 ** (job.attempt - 1))
        start = now + timedelta(seconds=max(self.jitter(0.0, ceiling), retry_after or 0.0))
        return None if start + timedelta(seconds=POLICY.attempt_timeout_seconds) > job.deadline_at else start

    @staticmethod
    def exhaustion(job: JobModel) -> str:
        return "attempts_exhausted" if job.attempt >= job.max_attempts else "deadline_exceeded"

    def release(self, held: Held) -> None:
        job = self.jobs[held.job.job_id]
        expected = job.owned_by(held)
        assert release_job(self.system_db, self.clock, held.job) == expected
        job.close_open_attempts(held.job.fence, "released")
        if expected:
            job.leave_running(JobState.RETRY_SCHEDULED, "released_on_shutdown", move_fence=True)
            job.next_attempt_at = self.clock.now()
            # A shutdown does not spend the job's last attempt: it can always be claimed again.
            job.max_attempts = max(job.max_attempts, job.attempt + 1)

    def tick_scheduler(self) -> None:
        now = self.clock.now()
        run_scheduler(
            SchedulerDeps(self.system_db, self.clock, new_id, RecordedMetrics(), POLICY, self.jitter)
        )
        for job in self.jobs.values():
            if job.state is JobState.RUNNING and job.lease_until is not None and job.lease_until <= now:
                job.close_open_attempts(job.fence, "lease_expired")
                start = self.retry_start(job, now)
                if start is None:
                    job.leave_running(JobState.FAILED_TERMINAL, self.exhaustion(job), move_fence=True)
                else:
                    job.leave_running(JobState.RETRY_SCHEDULED, "lease_expired", move_fence=True)
                    job.next_attempt_at = start
        for job in self.jobs.values():
            if job.state in {JobState.READY, JobState.RETRY_SCHEDULED} and job.deadline_at <= now:
                job.leave_running(JobState.FAILED_TERMINAL, "deadline_exceeded", move_fence=True)

    def cancel(self, job: JobModel) -> None:
        if job.state in {JobState.READY, JobState.RETRY_SCHEDULED}:
            cancel_job(self.app_db, job.tenant_id, job.job_id)
            job.leave_running(JobState.CANCELLED, job.reason, move_fence=False)
            job.events[(EXTRACTION_CANCELLED, None)] += 1  # written in the cancelling transaction
        elif job.state is JobState.CANCELLED:
            cancel_job(self.app_db, job.tenant_id, job.job_id)  # a repeated cancel changes nothing, no event
        else:
            assert refuses(lambda: cancel_job(self.app_db, job.tenant_id, job.job_id)), (
                f"a {job.state} job must not be cancelled"
            )

    def redrive(self, job: JobModel) -> None:
        support = SupportDeps(
            db=self.system_db,
            # No queues: retry_job works in the database only.
            clock=self.clock,
            new_id=new_id,
            sleep=lambda seconds: None,
            actor="oncall@example.com",
            extra_attempts=EXTRA_ATTEMPTS,
            deadline_seconds=REDRIVE_DEADLINE_SECONDS,
        )
        if job.state is not JobState.FAILED_TERMINAL:
            assert refuses(lambda: retry_job(support, job.job_id, "customer asked again")), (
                f"a redrive of a {job.state} job must be refused"
            )
            return
        retry_job(support, job.job_id, "provider outage is over")
        job.state, job.reason = JobState.READY, "redriven"
        job.max_attempts = job.attempt + EXTRA_ATTEMPTS
        job.fence += 1
        job.state_version += 1
        job.deadline_at = max(job.deadline_at, self.clock.now() + timedelta(seconds=REDRIVE_DEADLINE_SECONDS))
        job.events[(EXTRACTION_REQUESTED, None)] += 1
        job.audits += 1

    # -- what must hold after every step -------------------------------------------------------------

    @invariant()
    def database_matches_the_model(self) -> None:
        read = self.read_the_database()
        rows = {r["job_id"]: r for r in read[(JOBS_SQL, None)]}
        assert set(rows) == set(self.jobs)
        attempts, results, events, state_events = (
            self.by_job(read[(sql, None)])
            for sql in (ATTEMPTS_SQL, RESULTS_SQL, EVENTS_SQL, STATE_EVENTS_SQL)
        )
        audits = Counter(UUID(r["target"]) for r in read[(AUDIT_SQL, None)])
        for job_id, job in self.jobs.items():
            row = rows[job_id]
            self.check_transition(job_id, row, audits[job_id])
            expected = {
                "state": job.state.value,
                "attempt": job.attempt,
                "max_attempts": job.max_attempts,
                "fence": job.fence,
                "state_version": job.state_version,
                "lease_owner": job.lease_owner,
                "lease_until": job.lease_until,
                "next_attempt_at": job.next_attempt_at,
                "deadline_at": job.deadline_at,
                "reason": job.reason,
                "finished": job.state in FINISHED_STATES,
            }
            assert {k: row[k] for k in expected} == expected, f"job {job_id} differs from the model"

            numbers = sorted(a["attempt"] for a in attempts[job_id])
            assert numbers == list(range(1, row["attempt"] + 1)), (
                "the attempt counter equals the attempt records"
            )
            assert {a["attempt"]: (a["fence"], a["outcome"]) for a in attempts[job_id]} == job.attempts
            open_attempts = [a for a in attempts[job_id] if a["finished_at"] is None]
            assert all(a["outcome"] is None for a in open_attempts)
            if row["state"] != JobState.RUNNING:
                assert open_attempts == [], "only a running job has an open attempt"
            assert all(a["fence"] == row["fence"] for a in open_attempts), "an open attempt holds the fence"

            assert len(results[job_id]) <= 1, "a job has at most one result"
            assert [r["attempt"] for r in results[job_id]] == (
                [job.result_attempt] if job.result_attempt else []
            )
            kinds = Counter((e["event_type"], e["reason"]) for e in events[job_id])
            announced = kinds[(EXTRACTION_COMPLETED, None)] + kinds[(EXTRACTION_REVIEW_REQUIRED, None)]
            assert announced <= 1, "a job announces at most one result"
            assert kinds == job.events
            changes = [(e["state_version"], e["state"]) for e in state_events[job_id]]
            assert [version for version, _ in changes] == list(range(1, row["state_version"] + 1)), (
                "every state change, and nothing else, wrote one numbered event, in order"
            )
            assert changes[-1][1] == row["state"]
            assert audits[job_id] == job.audits
        self.counters_match_a_recount(read)

    def read_the_database(self) -> dict[tuple[str, UUID | None], list[dict[str, Any]]]:
        """Every read of the check, by query (and tenant), in one round trip: pipeline mode sends them all
        before it waits for the first answer. The check runs after every step, and eleven round trips of a
        loaded server were a third of the run's time."""
        scope = {"tenants": self.tenants, "targets": [str(job_id) for job_id in self.jobs]}
        reads: dict[tuple[str, UUID | None], tuple[str, dict[str, Any] | None]] = {
            (sql, None): (sql, scope)
            for sql in (JOBS_SQL, ATTEMPTS_SQL, RESULTS_SQL, EVENTS_SQL, STATE_EVENTS_SQL, AUDIT_SQL)
        }
        reads[(SHARDS_SQL, None)] = (SHARDS_SQL, None)
        for tenant in self.tenants:
            for sql in (QUEUE_SQL, RECOUNT_SQL):
                reads[(sql, tenant)] = (sql, {"tenant": tenant})
        with self.owner.pipeline():
            cursors = {key: self.owner.execute(sql, params) for key, (sql, params) in reads.items()}
        return {key: cursor.fetchall() for key, cursor in cursors.items()}

    def counters_match_a_recount(self, read: dict[tuple[str, UUID | None], list[dict[str, Any]]]) -> None:
        """The run-queue rows and backlog shards the trigger keeps equal a recount of the jobs, and the
        model's own count of what is unfinished, running and queued."""
        for tenant in self.tenants:
            kept, recounted = (next(iter(read[(sql, tenant)]), None) for sql in (QUEUE_SQL, RECOUNT_SQL))
            assert kept == recounted, f"tenant {tenant}'s counters drifted from a recount"
            mine = [j for j in self.jobs.values() if j.tenant_id == tenant]
            assert kept["pending_jobs"] == sum(not j.state.is_finished for j in mine)
            assert kept["running_jobs"] == sum(j.state is JobState.RUNNING for j in mine)
            assert kept["ready_jobs"] == sum(j.state is JobState.READY for j in mine)
            assert kept["retry_jobs"] == sum(j.state is JobState.RETRY_SCHEDULED for j in mine)
        [shards] = read[(SHARDS_SQL, None)]
        assert (shards["unfinished"], shards["running"]) == (shards["counted"], shards["counted_running"])

    def check_transition(self, job_id: UUID, row: dict[str, Any], audits: int) -> None:
        """Whatever the model says: a state moves only along the table, and a terminal row never changes
        unless an audited redrive gave it a new attempt budget."""
        before = self.seen.get(job_id)
        self.seen[job_id] = {**row, "audits": audits}
        if before is None:
            return
        redriven = audits > before["audits"]
        old, new = JobState(before["state"]), JobState(row["state"])
        if old.is_final and not redriven:
            assert {**row, "audits": audits} == before, f"terminal job {job_id} changed without a redrive"
        if redriven:
            assert (old, new) == (JobState.FAILED_TERMINAL, JobState.READY)
            assert row["max_attempts"] > row["attempt"], "a redrive grants a new attempt budget"
        elif old is not new:
            assert can_transition(old, new), f"{old} -> {new} is not a transition"

    def by_job(self, rows: list[dict[str, Any]]) -> dict[UUID, list[dict[str, Any]]]:
        grouped: dict[UUID, list[dict[str, Any]]] = {job_id: [] for job_id in self.jobs}
        for row in rows:
            grouped[row["job_id"]].append(row)
        return grouped


JOBS_SQL = """
SELECT job_id, state, attempt, max_attempts, fence, state_version, lease_owner, lease_until,
       next_attempt_at, deadline_at, last_error->>'reason' AS reason, finished_at IS NOT NULL AS finished
FROM extraction_jobs WHERE tenant_id = ANY(%(tenants)s)"""
ATTEMPTS_SQL = """
SELECT job_id, attempt, fence, outcome, finished_at FROM job_attempts WHERE tenant_id = ANY(%(tenants)s)"""
RESULTS_SQL = "SELECT job_id, attempt FROM extraction_results WHERE tenant_id = ANY(%(tenants)s)"
EVENTS_SQL = """
SELECT aggregate_id AS job_id, event_type, payload->>'reason' AS reason
FROM outbox_events WHERE tenant_id = ANY(%(tenants)s) AND event_type <> 'job.state_changed.v1'"""
# Live notifications' events (migration 0021), checked apart: one per state change, whoever made it.
STATE_EVENTS_SQL = """
SELECT job_id, state, state_version FROM job_state_events WHERE tenant_id = ANY(%(tenants)s) ORDER BY seq"""
AUDIT_SQL = "SELECT target FROM support_audit WHERE action = 'job_retry' AND target = ANY(%(targets)s)"
QUEUE_SQL = """
SELECT pending_jobs, pending_bytes, pending_tokens, running_jobs, ready_jobs, retry_jobs,
       next_ready_at::text AS next_ready_at
FROM tenant_queues WHERE tenant_id = %(tenant)s"""
RECOUNT_SQL = """
SELECT pending_jobs, pending_bytes, pending_tokens, running_jobs, ready_jobs, retry_jobs,
       next_ready_at::text AS next_ready_at
FROM tenant_queue_recount(%(tenant)s)"""
SHARDS_SQL = """
SELECT (SELECT sum(unfinished) FROM backlog_shards) AS unfinished,
       (SELECT sum(running) FROM backlog_shards) AS running,
       (SELECT count(*) FROM extraction_jobs WHERE state IN ('READY', 'RUNNING', 'RETRY_SCHEDULED')) AS counted,
       (SELECT count(*) FROM extraction_jobs WHERE state = 'RUNNING') AS counted_running"""
SET_ASIDE_SQL = """
UPDATE extraction_jobs
SET state = 'CANCELLED', finished_at = now(), lease_owner = NULL, lease_until = NULL, next_attempt_at = NULL
WHERE tenant_id = ANY(%(tenants)s) AND state = ANY(%(unfinished)s)"""

RUN = settings(
    max_examples=120,
    stateful_step_count=40,
    deadline=None,
    database=None,  # nothing written into the checkout; a failure prints its reproduction blob
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
# The hunt for a planted bug: a fixed sequence of examples (derandomized), no shrinking, a bound on effort.
HUNT = settings(RUN, max_examples=300, derandomize=True, phases=[Phase.generate], print_blob=False)

# One rule of the protocol broken at a time, by deleting a clause from its query, and what the run must
# then report. A property run that cannot fail proves nothing: this measures that it can.
PLANTED_BUGS = {
    "a completion ignores the fence": ("finish_running_job", "AND fence = %(fence)s", "a stale attempt"),
    "a completion ignores the lease": ("finish_running_job", "AND lease_until > %(now)s", "a stale attempt"),
    "a heartbeat ignores the fence": ("extend_lease", "AND fence = %(fence)s", "heartbeat with fence"),
    "the reaper keeps the fence": ("reap_to_retry", "fence = fence + 1,", "differs from the model"),
    "a release keeps the fence": ("release_job", "fence = fence + 1,", "differs from the model"),
    "a redrive resets any job": ("reset_failed_job", "AND state = 'FAILED_TERMINAL'", "must be refused"),
}


def run_protocol(system_db: Database, app_db: Database, owner_url: str, run: settings) -> None:
    with psycopg.connect(owner_url, autocommit=True, row_factory=dict_row) as owner:
        JobProtocol.system_db, JobProtocol.app_db, JobProtocol.owner = system_db, app_db, owner
        run_state_machine_as_test(JobProtocol, settings=run)
