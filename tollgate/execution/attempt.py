"""One attempt of one claimed job: budget, provider call, validation, and the fenced write of the outcome.

The worker takes the budget first and claims after (``claim_within_budget``): a slot waiting for the
provider budget holds no job, so the fair claim across tenants is made when a call can go out, and a
tenant's job claimed late never queues behind other tenants' claimed jobs for budget. The permit is sized
by the job the claim would pick, resized to the job it did pick, and cancelled if no call is made. A job
claimed without one (the resize found the budget unreachable) waits for its own in the same way
(``wait_for_permit``), and stops waiting if it is still denied at its deadline.

The lease is renewed in the background while the call runs; if a heartbeat finds the fence moved, the
call is abandoned and nothing is written for the job. The outcome - state, result, attempt record and the
outbox event - is written in one transaction, conditioned on state RUNNING, our fence and an unexpired
lease, so a stale worker's answer is discarded, never stored.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from enum import StrEnum
from typing import Any
from uuid import UUID

from aws_lambda_powertools import Logger
from psycopg.types.json import Jsonb
from pydantic import BaseModel

from tollgate.core import checkpoints
from tollgate.core.checkpoints import AFTER_PROVIDER_RESPONSE
from tollgate.core.clock import Clock, IdFactory
from tollgate.core.documents import DocumentStore, DocumentStoreUnreachable, pages_from_canonical
from tollgate.core.errors import DocumentUnavailable
from tollgate.core.job_states import JobState, checked_transition
from tollgate.core.metrics import (
    EXTRACTIONS_VALIDATED,
    PROVIDER_CALLS,
    PROVIDER_THROTTLED,
    REVIEWS_REQUIRED,
    SPEND_BUDGET_STOPS,
    SPEND_THRESHOLDS_CROSSED,
    MetricsSink,
    RecordedMetrics,
)
from tollgate.core.observability import trace_keys
from tollgate.core.retry import Jitter, RetryPolicy, next_attempt_at
from tollgate.core.tiers import DEFAULT_SERVICE_TIER, SERVICE_TIERS, ServiceTier
from tollgate.db import Database
from tollgate.db.database import Conn
from tollgate.events import (
    ExtractionCompleted,
    ExtractionFailed,
    ExtractionReviewRequired,
    JobOutcome,
)
from tollgate.execution.leasing import ClaimedJob, claim_next_job, extend_lease, peek_next_job, release_job
from tollgate.execution.limiter.base import Limiter, LimiterUnavailable, Outcome, Permit, Reservation
from tollgate.execution.llm.client import LlmClient, LlmResult, OutcomeClass, Task
from tollgate.jobtypes.base import Complexity, JobType, TenantPolicy, ValidationReport
from tollgate.jobtypes.registry import job_type as registered_type
from tollgate.outbox.nudge import NoNudge, Nudger
from tollgate.outbox.outcomes import insert_outcome_event
from tollgate.tenants.suppliers import read_tenant_policy
from tollgate.usage.pricing import batch_cost
from tollgate.usage.service import announce_spend_thresholds, month_spend
from tollgate.usage.spend import estimated_cost, month_of, next_month_start

logger = Logger(service="tollgate-worker", child=True)

Sleep = Callable[[float], Awaitable[None]]
# How long every worker holds off after the provider refused the key or the pool's response format (an
# operator is fixing it).
PROVIDER_AUTH_COOLDOWN_SECONDS = 60.0


@dataclass(frozen=True)
class ModelRouter:
    """Which model a job's attempt calls. ``auto`` routes by the document's complexity against the job
    type's bounds (``Routing``); a job whose small-model result failed validation has been escalated and
    calls the large model from then on. ``escalate`` says whether such a result is retried on the large
    model (once) before the job goes to review."""

    small: str
    large: str
    escalate: bool = True

    def choose(self, policy: str, kind: JobType, complexity: Complexity, escalated: bool = False) -> str:
        if policy == "small":
            return self.small
        if policy == "large" or escalated:
            return self.large
        return self.small if kind.routing.small_enough(complexity) else self.large

    def escalates(self, policy: str, model: str | None, escalated: bool) -> bool:
        """Whether a result of ``model`` that failed validation is retried on the large model first: only
        an ``auto`` job's first small-model result, and only when escalation is on."""
        return self.escalate and policy == "auto" and not escalated and model == self.small != self.large


@dataclass(frozen=True)
class ExecutionDeps:
    db: Database
    documents: DocumentStore
    llm: LlmClient
    limiter: Limiter
    clock: Clock
    new_id: IdFactory
    retry_policy: RetryPolicy
    jitter: Jitter
    router: ModelRouter
    prices: Mapping[str, tuple[float, float]]
    worker_id: str
    provider_pool: str
    lease_seconds: float
    heartbeat_seconds: float
    max_output_tokens: int
    sleep: Sleep = asyncio.sleep
    # Wakes the outbox relay after a terminal outcome, so the tenant's webhook goes out at once.
    nudger: Nudger = field(default_factory=NoNudge)
    metrics: MetricsSink = field(default_factory=RecordedMetrics)
    # The system's spend budget per UTC month (tenants' own are in their rows); None is none.
    system_monthly_budget_usd: float | None = None


class AttemptEnd(StrEnum):
    SUCCEEDED = "SUCCEEDED"
    REVIEW_REQUIRED = "REVIEW_REQUIRED"
    RETRY_SCHEDULED = "RETRY_SCHEDULED"
    FAILED_TERMINAL = "FAILED_TERMINAL"
    LOST = "LOST"  # the fence moved: another owner has the job; nothing was written for it


@dataclass
class AttemptReport:
    end: AttemptEnd
    outcome: OutcomeClass | None = None
    model: str | None = None
    reasons: list[dict[str, str]] = field(default_factory=list)
    cost_usd: Decimal = Decimal("0")


class LeaseLost(Exception):
    pass


class StaleAttempt(Exception):
    """The fenced write found the job moved on: what the transaction wrote for the attempt is undone."""


class HandBack(Exception):
    """The worker stopped while the attempt waited for budget: no call went out, so the job goes back."""


def cost_of(
    prices: Mapping[str, tuple[float, float]], model: str, input_tokens: int, output_tokens: int
) -> Decimal:
    per_input, per_output = prices.get(model, (0.0, 0.0))
    cost = Decimal(str(per_input)) * input_tokens + Decimal(str(per_output)) * output_tokens
    return (cost / Decimal(1_000_000)).quantize(Decimal("0.000001"))


@dataclass(frozen=True)
class Claimed:
    """A job claimed under a permit taken for it; ``permit`` is None only when the permit could not be fitted
    to the job (the budget became unreachable), and the attempt then asks for one itself."""

    job: ClaimedJob
    permit: Permit | None


# A claim that finds the peeked job taken by another slot looks again this many times before idling.
CLAIM_ROUNDS = 3


async def claim_within_budget(
    deps: ExecutionDeps,
    *,
    tenant_cap: int,
    stop: asyncio.Event,
    service_tiers: tuple[ServiceTier, ...] = SERVICE_TIERS,
) -> Claimed | None:
    """Budget first, then the claim, for the first of ``service_tiers`` (highest first) that has a job
    runnable; the permit is asked for in that tier's share of the budget. None when nothing is runnable,
    or on stop.

    Raises LimiterUnavailable when the budget cannot be reached: nothing is claimed then (fail closed), so
    no attempt is spent on a call that could not be made.
    """
    for _ in range(CLAIM_ROUNDS):
        for tier in service_tiers:
            tokens = await asyncio.to_thread(
                peek_next_job, deps.db, deps.clock, tenant_cap=tenant_cap, service_tier=tier
            )
            if tokens is not None:
                break
        else:
            return None
        permit = await wait_for_permit(deps, tokens, stop, service_tier=tier)
        if not isinstance(permit, Permit):
            return None
        try:
            job = await asyncio.to_thread(
                claim_next_job,
                deps.db,
                deps.clock,
                worker_id=deps.worker_id,
                lease_seconds=deps.lease_seconds,
                tenant_cap=tenant_cap,
                service_tier=tier,
            )
        except BaseException:
            await _cancel_quietly(deps, permit)
            raise
        if job is None:
            await _cancel_quietly(deps, permit)  # another slot took it first: no call, nothing spent
            continue
        return Claimed(job, await _fit(deps, permit, job))
    return None


class NoPermit(StrEnum):
    """Why a wait for the budget ended without a permit; none is held then."""

    STOPPED = "stopped"  # the worker is stopping
    LEASE_LOST = "lease_lost"  # the held job has another owner
    DEADLINE = "deadline"  # the held job was still denied at its deadline


@dataclass(frozen=True)
class Holding:
    """The job a wait for budget is made with, and the event its heartbeat sets when the lease is lost."""

    job: ClaimedJob
    lost: asyncio.Event


async def wait_for_permit(
    deps: ExecutionDeps,
    tokens: int,
    stop: asyncio.Event,
    holding: Holding | None = None,
    *,
    service_tier: ServiceTier = DEFAULT_SERVICE_TIER,
) -> Permit | NoPermit:
    """The one way a slot waits for the provider budget: before its claim, or with its job held.

    A denial waits as long as the limiter says, a heartbeat at the most, and the wait ends at once on stop:
    a stopping worker takes on nothing more, so even a permit granted as the stop came is given back. The
    one difference is ``holding``, and it is a parameter because only a held job has something to lose or
    to be late for: that wait also ends when the lease is lost, and a job still denied at its deadline
    waits no longer, since its call could only start after it (before the claim, a peeked job past its
    deadline is simply not claimed).

    Raises LimiterUnavailable (fail closed, no call): what that costs is the caller's to say, as it depends
    on whether a job is held.
    """
    tier = holding.job.service_tier if holding is not None else service_tier
    reservation = Reservation(deps.provider_pool, tokens, tier)
    interrupts = (stop,) if holding is None else (stop, holding.lost)
    while (ended := _interrupted(stop, holding)) is None:
        granted = await asyncio.to_thread(deps.limiter.try_acquire, reservation)
        if isinstance(granted, Permit):
            if (ended := _interrupted(stop, holding)) is not None:
                await _cancel_quietly(deps, granted)  # it came too late: no call goes out under it
                return ended
            return granted
        wait = min(granted.wait_seconds, deps.heartbeat_seconds)
        if holding is not None:
            left = (holding.job.deadline_at - deps.clock.now()).total_seconds()
            if left <= 0:
                return NoPermit.DEADLINE
            wait = min(wait, left)  # one more ask at the deadline, then no more
        await _sleep_unless(deps, wait, *interrupts)
    return ended


def _interrupted(stop: asyncio.Event, holding: Holding | None) -> NoPermit | None:
    if holding is not None and holding.lost.is_set():
        return NoPermit.LEASE_LOST  # first: a job that is not ours any more is not ours to hand back
    if stop.is_set():
        return NoPermit.STOPPED
    return None


async def _sleep_unless(deps: ExecutionDeps, seconds: float, *interrupts: asyncio.Event) -> None:
    sleeping = asyncio.ensure_future(deps.sleep(seconds))
    waking = [asyncio.ensure_future(event.wait()) for event in interrupts]
    try:
        await asyncio.wait({sleeping, *waking}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (sleeping, *waking):
            task.cancel()


async def _fit(deps: ExecutionDeps, permit: Permit, job: ClaimedJob) -> Permit | None:
    """The permit reserving at least the claimed job's estimate. A larger reservation is kept until the
    release reconciles it with the tokens used: holding a little more for one call is safe and saves the
    limiter a write; holding less than the job may use is not."""
    if job.estimated_tokens <= permit.tokens:
        return permit
    try:
        return await asyncio.to_thread(deps.limiter.resize, permit, job.estimated_tokens)
    except LimiterUnavailable:
        # The job is claimed; the attempt asks for a permit itself and, failing closed, is retried later.
        await _cancel_quietly(deps, permit)
        return None


async def _cancel_quietly(deps: ExecutionDeps, permit: Permit) -> None:
    try:
        await asyncio.to_thread(deps.limiter.cancel, permit)
    except LimiterUnavailable:
        logger.warning("budget permit not returned; it expires on its own", exc_info=True)


async def run_attempt(
    deps: ExecutionDeps,
    job: ClaimedJob,
    permit: Permit | None = None,
    *,
    stop: asyncio.Event | None = None,
) -> AttemptReport:
    """Runs one attempt. ``permit``, when given, is the budget taken before the claim: the call goes out
    under it and it is released after the call, or cancelled when no call is made. Without one, the
    attempt waits for its own while it holds the job (``wait_for_permit``); ``stop`` ends that wait and
    hands the job back, rather than hold it until the drain runs out."""
    if stop is None:
        stop = asyncio.Event()  # never set: only the budget, the lease or the deadline ends the wait
    unused = permit
    try:
        try:
            pages = await asyncio.to_thread(load_pages, deps, job)
        except (DocumentUnavailable, DocumentStoreUnreachable) as error:
            # Retrying cannot bring a lost object version back: the job ends with the reason. A store that
            # did not answer is transient: the attempt is retried on the job's schedule, not left to the
            # lease reaper. Either way no call went out, so the budget taken for it goes back.
            if permit is not None:
                unused = None
                await _cancel_quietly(deps, permit)
            lost_for_good = isinstance(error, DocumentUnavailable)
            outcome = OutcomeClass.DOCUMENT_UNAVAILABLE if lost_for_good else OutcomeClass.TRANSIENT
            result = LlmResult(outcome, "", error=str(error))
            return await asyncio.to_thread(_finish, deps, job, task_of(job, ()), result)
        task = task_of(job, pages)
        complexity = Complexity.of(pages, task.job_type.language(task.options))
        model = deps.router.choose(job.model_policy, task.job_type, complexity, job.model_escalated)
        over_budget = await asyncio.to_thread(spend_refusal, deps, job, model)
        if over_budget is not None:
            if permit is not None:
                unused = None
                await _cancel_quietly(deps, permit)  # no call goes out under it
            return await asyncio.to_thread(_stop_for_budget, deps, job, model, over_budget)
        lost = asyncio.Event()
        heartbeat = asyncio.create_task(_heartbeat(deps, job, lost))
        try:
            unused = None  # from here the call owns the permit: it releases or cancels it
            result = await _call_within_budget(deps, job, task, model, lost, stop=stop, permit=permit)
        except LeaseLost:
            logger.warning("lease lost; attempt abandoned")
            await asyncio.to_thread(_record_discarded, deps, job, None)
            return AttemptReport(AttemptEnd.LOST, model=model)
        except HandBack:
            logger.info("stopping before the call; the job is handed back")
            released = await asyncio.to_thread(release_job, deps.db, deps.clock, job)
            return AttemptReport(AttemptEnd.RETRY_SCHEDULED if released else AttemptEnd.LOST, model=model)
        finally:
            heartbeat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await heartbeat
    finally:
        if unused is not None:
            await _cancel_quietly(deps, unused)  # the attempt ended before its call (an error, or stop)
    checkpoints.reached(AFTER_PROVIDER_RESPONSE)
    return await asyncio.to_thread(_finish, deps, job, task, result, model)


def task_of(job: ClaimedJob, pages: tuple[str, ...]) -> Task:
    kind = registered_type(job.job_type)
    return Task(kind, pages, kind.parse_options(job.options))


def job_log_keys(job: ClaimedJob) -> dict[str, Any]:
    """What every log line of one attempt carries (the worker puts them in the attempt's log context)."""
    return {
        "job_id": str(job.job_id),
        "tenant_id": str(job.tenant_id),
        "attempt": job.attempt,
        "fence": job.fence,
        **trace_keys(job.trace_context),
    }


def load_pages(deps: ExecutionDeps, job: ClaimedJob) -> tuple[str, ...]:
    with deps.db.transaction() as conn:
        row = conn.execute(deps.db.q.get_document_for_job, {"document_id": job.document_id}).fetchone()
    assert row is not None
    # A small document was committed in its row with the job; a larger one is an S3 object.
    raw = (
        row["body"]
        if row["body"] is not None
        else deps.documents.get(row["s3_key"], row["s3_version_id"], max_bytes=64 * 1024 * 1024)
    )
    return pages_from_canonical(raw)


async def _heartbeat(deps: ExecutionDeps, job: ClaimedJob, lost: asyncio.Event) -> None:
    while True:
        await deps.sleep(deps.heartbeat_seconds)
        owned = await asyncio.to_thread(extend_lease, deps.db, deps.clock, job, deps.lease_seconds)
        if not owned:
            lost.set()
            return


async def _call_within_budget(
    deps: ExecutionDeps,
    job: ClaimedJob,
    task: Task,
    model: str,
    lost: asyncio.Event,
    *,
    stop: asyncio.Event,
    permit: Permit | None = None,
) -> LlmResult:
    if permit is None:
        try:
            waited = await wait_for_permit(deps, job.estimated_tokens, stop, Holding(job, lost))
        except LimiterUnavailable as error:
            # Fail closed: no budget, no call. The claim has spent the attempt already, so the attempt ends
            # as transient and the job is retried on its schedule.
            return LlmResult(OutcomeClass.TRANSIENT, model, error=f"limiter unavailable: {error}")
        if waited is NoPermit.LEASE_LOST:
            raise LeaseLost
        if waited is NoPermit.STOPPED:
            raise HandBack
        if waited is NoPermit.DEADLINE:
            return LlmResult(OutcomeClass.TIMEOUT, model, error="no provider budget before the deadline")
        permit = waited
    elif lost.is_set():
        await _cancel_quietly(deps, permit)
        raise LeaseLost

    remaining = (job.deadline_at - deps.clock.now()).total_seconds()
    timeout = max(min(deps.retry_policy.attempt_timeout_seconds, remaining), 1.0)
    max_tokens = min(deps.max_output_tokens, task.job_type.max_output_tokens)
    call = asyncio.create_task(deps.llm.extract(task, model, timeout, max_tokens))
    watch = asyncio.create_task(lost.wait())
    try:
        await asyncio.wait({call, watch}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        # The worker is stopping: the request may have gone out, so the permit is released, not cancelled.
        call.cancel()
        await asyncio.to_thread(deps.limiter.release, permit, Outcome())
        raise
    finally:
        watch.cancel()
    deps.metrics.count(PROVIDER_CALLS)
    if not call.done():
        call.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await call
        # The request may have reached the provider: keep the reservation, free the in-flight permit.
        await asyncio.to_thread(deps.limiter.release, permit, Outcome())
        raise LeaseLost
    result = call.result()
    if result.outcome is OutcomeClass.THROTTLED:
        deps.metrics.count(PROVIDER_THROTTLED)
    cooldown = result.retry_after_seconds
    if result.outcome.pauses_pool:
        # Every worker would get the same answer: pause them all instead of spending each job's attempts.
        _alert_pool_paused(result)
        cooldown = max(cooldown or 0.0, PROVIDER_AUTH_COOLDOWN_SECONDS)
    used = (
        (result.input_tokens or 0) + (result.output_tokens or 0) if result.input_tokens is not None else None
    )
    await asyncio.to_thread(
        deps.limiter.release,
        permit,
        Outcome(
            used_tokens=used,
            throttled=result.outcome is OutcomeClass.THROTTLED or result.outcome.pauses_pool,
            retry_after_seconds=cooldown,
            rate_limit_headers=result.rate_limit_headers,
        ),
    )
    return result


def _alert_pool_paused(result: LlmResult) -> None:
    if result.outcome is OutcomeClass.PROVIDER_AUTH:
        logger.error("ALERT: the provider refused our API key", extra={"alert": "provider_auth"})
    else:
        logger.error(
            "ALERT: the provider refused the pool's response format",
            extra={"alert": "provider_format", "detail": result.error},
        )


def _tenant_policy(deps: ExecutionDeps, job: ClaimedJob) -> TenantPolicy:
    with deps.db.transaction() as conn:
        return read_tenant_policy(conn, deps.db, job.tenant_id)


def _decide(
    deps: ExecutionDeps,
    job: ClaimedJob,
    result: LlmResult,
    report: ValidationReport | None,
    now: datetime,
    *,
    routed: str | None = None,
) -> tuple[JobState, datetime | None, dict[str, Any] | None]:
    """The job's next state, when it may run again, and the error to keep on it."""
    if result.outcome is OutcomeClass.OK and report is not None:
        if report.passed:
            return JobState.SUCCEEDED, None, None
        if deps.router.escalates(job.model_policy, routed, job.model_escalated):
            start = _escalation_start(deps, job, now)
            if start is not None:
                reasons = [r.code for r in report.reasons]
                return JobState.RETRY_SCHEDULED, start, {"outcome": "escalated", "reasons": reasons}
        return JobState.REVIEW_REQUIRED, None, None
    error = {"outcome": result.outcome.value, "detail": result.error, "attempt": job.attempt}
    if result.outcome.retryable:
        start = next_attempt_at(
            deps.retry_policy,
            now=now,
            deadline_at=job.deadline_at,
            attempt=job.attempt,
            max_attempts=job.max_attempts,
            retry_after_seconds=result.retry_after_seconds,
            jitter=deps.jitter,
        )
        if start is not None:
            return JobState.RETRY_SCHEDULED, start, error
        error["reason"] = "attempts_exhausted" if job.attempt >= job.max_attempts else "deadline_exceeded"
    else:
        error["reason"] = result.outcome.value
    return JobState.FAILED_TERMINAL, None, error


def _escalation_start(deps: ExecutionDeps, job: ClaimedJob, now: datetime) -> datetime | None:
    """At once, if an attempt is left and one whole attempt fits before the deadline; otherwise the small
    model's result goes to review as it is (a late large-model answer helps no one)."""
    if job.attempt >= job.max_attempts:
        return None
    left = (job.deadline_at - now).total_seconds()
    return now if left >= deps.retry_policy.attempt_timeout_seconds else None


@dataclass(frozen=True)
class BatchLine:
    """An outcome that came as one line of a provider batch (the batch path): paid at the batch price, and its
    batch member settled in the transaction that commits it, so a poller that dies mid-download leaves
    exactly the lines not yet committed to the next one."""

    batch_id: UUID
    price_factor: float


def _attempt_params(
    deps: ExecutionDeps,
    job: ClaimedJob,
    result: LlmResult | None,
    outcome: str,
    batch: BatchLine | None = None,
) -> dict[str, Any]:
    input_tokens = result.input_tokens if result else None
    output_tokens = result.output_tokens if result else None
    cost = discount = None
    if result and input_tokens is not None:
        if batch is None:
            cost = cost_of(deps.prices, result.model, input_tokens, output_tokens or 0)
        else:
            cost, discount = batch_cost(
                deps.prices, result.model, input_tokens, output_tokens or 0, batch.price_factor
            )
    return {
        "batch_id": batch.batch_id if batch else None,
        "discount_usd": discount,
        "job_id": job.job_id,
        "attempt": job.attempt,
        "fence": job.fence,
        "now": deps.clock.now(),
        "outcome": outcome,
        "model": (result.model or None) if result else None,
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "cost_usd": cost,
        "latency_ms": result.latency_ms if result else None,
        "provider_request_id": result.request_id if result else None,
        "error": Jsonb({"detail": result.error}) if result and result.error else None,
    }


def _record_discarded(
    deps: ExecutionDeps, job: ClaimedJob, result: LlmResult | None, batch: BatchLine | None = None
) -> None:
    """The attempt's cost is real even when its answer is thrown away: keep the record, not the result.

    A batch line is settled first: when another poller settled it already (two can meet on a line when a hold
    runs out mid-settle), its record is that poller's, perhaps the accepted answer, and is left as it is."""
    params = _attempt_params(deps, job, result, "discarded_stale", batch)
    with deps.db.transaction() as conn:
        if batch is not None and not _settle_member(conn, deps, job, batch, "discarded_stale"):
            return
        conn.execute(deps.db.q.record_attempt, params)
        crossed = _announce_spend(conn, deps, job, params)
    _count_crossed(deps, crossed)


def _settle_member(conn: Conn, deps: ExecutionDeps, job: ClaimedJob, batch: BatchLine, outcome: str) -> bool:
    """Settles the job's batch member with ``outcome``; False when it was settled already."""
    settled = conn.execute(
        deps.db.q.settle_batch_member,
        {"batch_id": batch.batch_id, "job_id": job.job_id, "now": deps.clock.now(), "outcome": outcome},
    ).fetchone()
    return settled is not None


def _announce_spend(conn: Conn, deps: ExecutionDeps, job: ClaimedJob, params: dict[str, Any]) -> list[int]:
    """After record_attempt, in its transaction: the cost is in the month's spend (a trigger added it), so a
    threshold it crossed is announced here, once."""
    if not params["cost_usd"]:
        return []
    return announce_spend_thresholds(
        conn,
        deps.db.q,
        job.tenant_id,
        month_of(params["now"]),
        new_id=deps.new_id,
        trace_context=job.trace_context,
    )


def _count_crossed(deps: ExecutionDeps, crossed: list[int]) -> None:
    if crossed:
        deps.metrics.count(SPEND_THRESHOLDS_CROSSED, len(crossed))
        logger.warning("spend threshold crossed", extra={"thresholds": crossed})


def spend_refusal(deps: ExecutionDeps, job: ClaimedJob, model: str) -> str | None:
    """Why no call may start: this attempt's estimate at the model's dearest price, with the month's spent
    cost, would pass the tenant's or the system's budget. One read of counter rows by key."""
    now = deps.clock.now()
    with deps.db.transaction() as conn:
        spend = month_spend(conn, deps.db.q, job.tenant_id, month_of(now), deps.system_monthly_budget_usd)
    return spend.call_refusal(estimated_cost(deps.prices, job.estimated_tokens, model))


def _stop_for_budget(deps: ExecutionDeps, job: ClaimedJob, model: str, why: str) -> AttemptReport:
    """No call: the job waits for the next month when that is before its deadline, else it fails with reason
    spend_budget_exhausted. The attempt is closed with no tokens and outcome spend_budget_exhausted."""
    now = deps.clock.now()
    opens = next_month_start(now)
    error = {"outcome": SPEND_BUDGET_EXHAUSTED, "detail": why, "attempt": job.attempt}
    waits = opens < job.deadline_at
    if not waits:
        error["reason"] = SPEND_BUDGET_EXHAUSTED
    state = JobState.RETRY_SCHEDULED if waits else JobState.FAILED_TERMINAL
    checked_transition(JobState.RUNNING, state)
    params = _attempt_params(deps, job, None, SPEND_BUDGET_EXHAUSTED)
    with deps.db.transaction() as conn:
        if waits:
            finished = conn.execute(
                deps.db.q.defer_running_job_for_budget,
                {
                    "job_id": job.job_id,
                    "fence": job.fence,
                    "now": now,
                    "next_attempt_at": opens,
                    "last_error": Jsonb(error),
                },
            ).fetchone()
        else:
            finished = conn.execute(
                deps.db.q.finish_running_job,
                {
                    "job_id": job.job_id,
                    "fence": job.fence,
                    "now": now,
                    "state": state.value,
                    "next_attempt_at": None,
                    "last_error": Jsonb(error),
                    "finished_at": now,
                    "escalate": False,
                },
            ).fetchone()
        conn.execute(deps.db.q.record_attempt, params)
        if finished is not None:
            _insert_event(conn, deps, job, state=state, finished=finished, reasons=[], error=error)
    deps.metrics.count(SPEND_BUDGET_STOPS)
    if finished is None:
        return AttemptReport(AttemptEnd.LOST, model=model)
    logger.warning("no call: the spend budget would be passed", extra={"state": state.value, "detail": why})
    if state in EVENT_FOR_STATE:
        deps.nudger.nudge()
    return AttemptReport(AttemptEnd(state.value), model=model)


SPEND_BUDGET_EXHAUSTED = "spend_budget_exhausted"


def finish_batch_line(
    deps: ExecutionDeps, job: ClaimedJob, task: Task, result: LlmResult, *, routed: str, line: BatchLine
) -> AttemptReport:
    """Commits one provider batch line's answer for ``job`` exactly as an immediate attempt's (validation,
    result, attempt record, event), under the fence the line was written with, at the batch price."""
    return _finish(deps, job, task, result, routed, batch=line)


def _finish(
    deps: ExecutionDeps,
    job: ClaimedJob,
    task: Task,
    result: LlmResult,
    routed: str | None = None,
    *,
    batch: BatchLine | None = None,
) -> AttemptReport:
    """``routed`` is the model the router chose (the provider may answer with a dated name of it)."""
    report = None
    if result.outcome is OutcomeClass.OK and result.output is not None:
        policy = _tenant_policy(deps, job)
        report = task.job_type.validate(result.output, task.pages, task.options, policy)
    now = deps.clock.now()
    state, next_at, error = _decide(deps, job, result, report, now, routed=routed)
    checked_transition(JobState.RUNNING, state)
    escalated = state is JobState.RETRY_SCHEDULED and report is not None
    reasons = [r.as_dict() for r in report.reasons] if report and not escalated else []
    outcome = "escalated" if escalated else result.outcome.value
    params = _attempt_params(deps, job, result, outcome, batch)
    if escalated and report is not None:
        # The attempt record keeps what the small model got wrong; the result itself is not stored.
        params["error"] = Jsonb({"reasons": [r.as_dict() for r in report.reasons]})
    crossed: list[int] = []
    try:
        with deps.db.transaction() as conn:
            # The attempt first: its cost takes the month's spend rows before the job's update takes its
            # queue rows, the order acceptance takes them in, so the two never wait on each other in a
            # cycle. A stale attempt undoes it (StaleAttempt rolls the transaction back).
            conn.execute(deps.db.q.record_attempt, params)
            finished = conn.execute(
                deps.db.q.finish_running_job,
                {
                    "job_id": job.job_id,
                    "fence": job.fence,
                    "now": now,
                    "state": state.value,
                    "next_attempt_at": next_at,
                    "last_error": Jsonb(error) if error else None,
                    "finished_at": now if state.is_finished else None,
                    "escalate": escalated,
                },
            ).fetchone()
            if finished is None:
                raise StaleAttempt
            crossed = _announce_spend(conn, deps, job, params)
            if report is not None and result.output is not None and not escalated:
                _insert_result(
                    conn,
                    deps,
                    job,
                    output=result.output,
                    policy_version=report.policy_version,
                    reasons=reasons,
                    located=report.located_json(task.pages),
                )
            _insert_event(conn, deps, job, state=state, finished=finished, reasons=reasons, error=error)
            if batch is not None:
                _settle_member(conn, deps, job, batch, state.value)
    except StaleAttempt:
        finished = None
    if finished is None:
        logger.warning("stale attempt: the job moved on; its answer is discarded")
        _record_discarded(deps, job, result, batch)
        return AttemptReport(AttemptEnd.LOST, result.outcome, result.model)
    _count_crossed(deps, crossed)
    if state in EVENT_FOR_STATE:
        deps.nudger.nudge()
    if report is not None and not escalated:
        # A result was judged for good: the review rate is those that went to review among them.
        deps.metrics.count(EXTRACTIONS_VALIDATED)
        deps.metrics.count(REVIEWS_REQUIRED, int(state is JobState.REVIEW_REQUIRED))
    logger.info("attempt finished", extra={"state": state.value, "outcome": result.outcome.value})
    return AttemptReport(
        AttemptEnd(state.value), result.outcome, result.model, reasons, params["cost_usd"] or Decimal("0")
    )


def _insert_result(
    conn: Conn,
    deps: ExecutionDeps,
    job: ClaimedJob,
    *,
    output: BaseModel,
    policy_version: str,
    reasons: list[dict[str, str]],
    located: list[dict[str, object]],
) -> None:
    conn.execute(
        deps.db.q.insert_result,
        {
            "job_id": job.job_id,
            "tenant_id": job.tenant_id,
            "attempt": job.attempt,
            "policy_version": policy_version,
            "result": Jsonb(output.model_dump(mode="json")),
            "review_reasons": Jsonb(reasons),
            "located_evidence": Jsonb(located),
        },
    )


OUTCOME_EVENTS: dict[JobState, type[JobOutcome]] = {
    JobState.SUCCEEDED: ExtractionCompleted,
    JobState.REVIEW_REQUIRED: ExtractionReviewRequired,
    JobState.FAILED_TERMINAL: ExtractionFailed,
}
EVENT_FOR_STATE = {state: model.event_type for state, model in OUTCOME_EVENTS.items()}


def _insert_event(
    conn: Conn,
    deps: ExecutionDeps,
    job: ClaimedJob,
    *,
    state: JobState,
    finished: dict[str, Any],
    reasons: list[dict[str, str]],
    error: dict[str, Any] | None,
) -> None:
    """A terminal state gets its outbox event (webhooks, results bus), with the job's totals; a retry does
    not."""
    model = OUTCOME_EVENTS.get(state)
    if model is None:
        return
    insert_outcome_event(
        conn,
        deps.db,
        model,
        event_id=deps.new_id(),
        trace_context=finished["trace_context"],
        job_id=job.job_id,
        tenant_id=job.tenant_id,
        state=state.value,
        state_version=finished["state_version"],
        attempt=job.attempt,
        review_reasons=[r["code"] for r in reasons],
        reason=(error or {}).get("reason"),
    )
