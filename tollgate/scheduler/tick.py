"""The scheduler's tick: reap expired leases, fail jobs past their deadline, restart webhook deliveries
that nothing drives any more, publish backlog, review and provider batch metrics, apply retention
(``retention.py``).

Runs every minute (and can run twice at once safely: rows are locked with SKIP LOCKED and every update is
conditioned on the fence it read). A job that ends here gets its ``extraction.failed.v1`` outbox event in
the same transaction.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from uuid import UUID

from aws_lambda_powertools import Logger
from psycopg.errors import LockNotAvailable
from psycopg.types.json import Jsonb

from tollgate.core.clock import Clock, IdFactory
from tollgate.core.job_states import JobState, checked_transition
from tollgate.core.metrics import (
    COUNTER_DRIFT,
    DELIVERIES_RESTARTED,
    OLDEST_ELIGIBLE_JOB_AGE,
    OLDEST_OPEN_BATCH_AGE,
    OLDEST_UNPUBLISHED_OUTBOX_AGE,
    OLDEST_WAITING_REVIEW_AGE,
    OPEN_PROVIDER_BATCHES,
    REVIEW_DECISIONS,
    REVIEW_TIME_TO_DECISION,
    REVIEWS_WAITING,
    RUNNABLE_JOBS,
    RUNNING_JOBS,
    UNPUBLISHED_OUTBOX_EVENTS,
    WAITING_RETRIES,
    MetricsSink,
)
from tollgate.core.retry import Jitter, RetryPolicy, next_attempt_at
from tollgate.db import Database
from tollgate.db.database import Conn
from tollgate.delivery.deliveries import DeliveryStarter, execution_name
from tollgate.execution.leasing import fail_job
from tollgate.scheduler.retention import RetentionPolicy, RetentionStore, apply_retention

logger = Logger(service="tollgate-scheduler", child=True)


@dataclass(frozen=True)
class SchedulerDeps:
    db: Database
    clock: Clock
    new_id: IdFactory
    metrics: MetricsSink
    retry_policy: RetryPolicy
    jitter: Jitter
    batch_size: int = 500
    # Starts dispatcher executions; None where no dispatcher is deployed (deliveries are then left alone).
    deliveries: DeliveryStarter | None = None
    # A PENDING delivery this long past its due attempt has no execution driving it: the longest wait an
    # execution makes is its recorded next_attempt_at, and Step Functions is then seconds late, not minutes.
    delivery_stall: timedelta = timedelta(minutes=15)
    # Where retention archives and deletes document objects; None leaves every row in place (tests of the
    # other steps).
    retention_store: RetentionStore | None = None
    retention: RetentionPolicy = field(default_factory=RetentionPolicy)
    # Run-queue rows recounted per tick, oldest recount first: 10 a minute reaches 14,400 tenants a day.
    # Each recount is an index range of one tenant's unfinished jobs.
    reconcile_per_tick: int = 10


@dataclass
class SchedulerReport:
    reaped_to_retry: int = 0
    reaped_to_failed: int = 0
    expired: int = 0
    deliveries_restarted: int = 0
    runnable: int = 0
    oldest_eligible_age_seconds: float = 0.0
    oldest_unpublished_age_seconds: float = 0.0
    retention: dict[str, int] = field(default_factory=dict)
    queues_reconciled: int = 0
    queues_drifted: int = 0
    tier_queues_reconciled: int = 0
    tier_queues_drifted: int = 0
    backlog_shards_drifted: bool = False
    reviews_waiting: int = 0
    oldest_waiting_review_age_seconds: float = 0.0
    review_decisions_counted: int = 0
    open_batches: int = 0
    oldest_open_batch_age_seconds: float = 0.0


def run_scheduler(deps: SchedulerDeps) -> SchedulerReport:
    report = SchedulerReport()
    reap_expired_leases(deps, report)
    expire_past_deadline(deps, report)
    restart_stalled_deliveries(deps, report)
    publish_backlog_metrics(deps, report)
    publish_review_metrics(deps, report)
    publish_batch_metrics(deps, report)
    reconcile_queue_counters(deps, report)
    reconcile_tier_queues(deps, report)
    reconcile_backlog_shards(deps, report)
    drifted = report.queues_drifted + report.tier_queues_drifted + int(report.backlog_shards_drifted)
    deps.metrics.gauge(COUNTER_DRIFT, drifted)
    if deps.retention_store is not None:
        report.retention = apply_retention(deps.db, deps.clock, deps.retention_store, deps.retention).counts()
    return report


def _fail(conn: Conn, deps: SchedulerDeps, *, job_id: UUID, fence: int, now: datetime, reason: str) -> bool:
    return fail_job(conn, deps.db, deps.new_id, job_id=job_id, fence=fence, now=now, reason=reason)


def reap_expired_leases(deps: SchedulerDeps, report: SchedulerReport) -> None:
    """A RUNNING job whose lease expired lost its worker: retry it, or end it when nothing is left."""
    q, now = deps.db.q, deps.clock.now()
    with deps.db.transaction() as conn:
        for job in conn.execute(q.lock_expired_leases, {"now": now, "limit": deps.batch_size}).fetchall():
            conn.execute(
                q.close_open_attempt,
                {"job_id": job["job_id"], "fence": job["fence"], "now": now, "outcome": "lease_expired"},
            )
            start = next_attempt_at(
                deps.retry_policy,
                now=now,
                deadline_at=job["deadline_at"],
                attempt=job["attempt"],
                max_attempts=job["max_attempts"],
                jitter=deps.jitter,
            )
            if start is None:
                reason = (
                    "attempts_exhausted" if job["attempt"] >= job["max_attempts"] else "deadline_exceeded"
                )
                if _fail(conn, deps, job_id=job["job_id"], fence=job["fence"], now=now, reason=reason):
                    report.reaped_to_failed += 1
                continue
            checked_transition(JobState.RUNNING, JobState.RETRY_SCHEDULED)
            conn.execute(
                q.reap_to_retry,
                {
                    "job_id": job["job_id"],
                    "fence": job["fence"],
                    "now": now,
                    "next_attempt_at": start,
                    "error": Jsonb({"reason": "lease_expired", "attempt": job["attempt"]}),
                },
            )
            report.reaped_to_retry += 1


def expire_past_deadline(deps: SchedulerDeps, report: SchedulerReport) -> None:
    q, now = deps.db.q, deps.clock.now()
    with deps.db.transaction() as conn:
        for job in conn.execute(q.lock_past_deadline, {"now": now, "limit": deps.batch_size}).fetchall():
            if _fail(
                conn, deps, job_id=job["job_id"], fence=job["fence"], now=now, reason="deadline_exceeded"
            ):
                report.expired += 1


def restart_stalled_deliveries(deps: SchedulerDeps, report: SchedulerReport) -> None:
    """A delivery whose execution ended without delivering it (the state machine's retries of a failing
    attempt spent during a long outage, an execution lost) would stay PENDING forever: start a new execution
    for it. Counted and committed first, so a crash before the start is found again on the next tick; if
    the old execution was in fact alive, the receiver sees the same webhook-id twice and keeps one."""
    if deps.deliveries is None:
        return
    q, now = deps.db.q, deps.clock.now()
    with deps.db.transaction() as conn:
        rows = conn.execute(
            q.restart_stalled_deliveries,
            {"now": now, "stalled_before": now - deps.delivery_stall, "limit": deps.batch_size},
        ).fetchall()
    for row in rows:
        logger.warning(
            "restarting a stalled webhook delivery",
            extra={
                "delivery_id": str(row["delivery_id"]),
                "tenant_id": str(row["tenant_id"]),
                "endpoint_id": str(row["endpoint_id"]),
                "restarts": row["restarts"],
            },
        )
        deps.deliveries.start(
            row["delivery_id"], execution_name(row["delivery_id"], row["replays"], row["restarts"])
        )
        report.deliveries_restarted += 1
    deps.metrics.count(DELIVERIES_RESTARTED, report.deliveries_restarted)


def publish_backlog_metrics(deps: SchedulerDeps, report: SchedulerReport) -> None:
    q, now = deps.db.q, deps.clock.now()
    with deps.db.transaction() as conn:
        backlog = conn.execute(q.backlog_metrics, {"now": now}).fetchone()
        outbox = conn.execute(q.oldest_unpublished_outbox).fetchone()
    assert backlog is not None
    assert outbox is not None
    report.runnable = backlog["runnable"]
    report.oldest_eligible_age_seconds = _age(now, backlog["oldest_eligible"])
    report.oldest_unpublished_age_seconds = _age(now, outbox["oldest"])
    deps.metrics.gauge(RUNNABLE_JOBS, report.runnable)
    deps.metrics.gauge(RUNNING_JOBS, backlog["running"])
    deps.metrics.gauge(WAITING_RETRIES, backlog["waiting"])
    deps.metrics.gauge(OLDEST_ELIGIBLE_JOB_AGE, report.oldest_eligible_age_seconds, "Seconds")
    deps.metrics.gauge(OLDEST_UNPUBLISHED_OUTBOX_AGE, report.oldest_unpublished_age_seconds, "Seconds")
    deps.metrics.gauge(UNPUBLISHED_OUTBOX_EVENTS, outbox["unpublished"])


def publish_review_metrics(deps: SchedulerDeps, report: SchedulerReport) -> None:
    """The review queue's size and the age of its oldest entry (an alarm watches it), and each decision made
    since the last tick: one count per kind and the seconds it waited. Decisions are marked counted in a
    transaction and published after its commit, so none is counted twice (a crash in between loses them from
    the figures, not from the record)."""
    q, now = deps.db.q, deps.clock.now()
    with deps.db.transaction() as conn:
        queue = conn.execute(q.review_queue_gauges).fetchone()
        decided = conn.execute(q.count_review_decisions, {"now": now, "limit": deps.batch_size}).fetchall()
    assert queue is not None
    report.reviews_waiting = queue["waiting"]
    report.oldest_waiting_review_age_seconds = _age(now, queue["oldest"])
    report.review_decisions_counted = len(decided)
    deps.metrics.gauge(REVIEWS_WAITING, report.reviews_waiting)
    deps.metrics.gauge(OLDEST_WAITING_REVIEW_AGE, report.oldest_waiting_review_age_seconds, "Seconds")
    for kind, name in REVIEW_DECISIONS.items():
        deps.metrics.count(name, sum(1 for row in decided if row["decision"] == kind))
    for row in decided:
        deps.metrics.observe(REVIEW_TIME_TO_DECISION, max(row["waited_seconds"], 0.0), "Seconds")


def publish_batch_metrics(deps: SchedulerDeps, report: SchedulerReport) -> None:
    """The provider batches not yet settled and the age of the oldest (an alarm watches it). A batch outlives
    its jobs' leases only when no poller follows it: no worker with the Batch API on serves the batch tier,
    or every poll of it fails."""
    now = deps.clock.now()
    with deps.db.transaction() as conn:
        batches = conn.execute(deps.db.q.open_batch_gauges).fetchone()
    assert batches is not None
    report.open_batches = batches["open"]
    report.oldest_open_batch_age_seconds = _age(now, batches["oldest"])
    deps.metrics.gauge(OPEN_PROVIDER_BATCHES, report.open_batches)
    deps.metrics.gauge(OLDEST_OPEN_BATCH_AGE, report.oldest_open_batch_age_seconds, "Seconds")


def reconcile_queue_counters(deps: SchedulerDeps, report: SchedulerReport) -> None:
    """Recounts a few tenants' unfinished jobs and sets their run-queue rows to the recount. A difference is
    a bug in the trigger that keeps them (or a change made with triggers off): corrected here, logged, and
    counted in the ``CounterDrift`` metric, which an alarm watches."""
    q, now = deps.db.q, deps.clock.now()
    with deps.db.transaction() as conn:
        locked = conn.execute(q.lock_queues_to_reconcile, {"limit": deps.reconcile_per_tick}).fetchall()
        for row in locked:
            result = conn.execute(q.reconcile_queue, {"tenant_id": row["tenant_id"], "now": now}).fetchone()
            report.queues_reconciled += 1
            if result is not None and result["drifted"]:
                report.queues_drifted += 1
                logger.error(
                    "run-queue counters drifted from a recount", extra={"tenant_id": row["tenant_id"]}
                )


def reconcile_tier_queues(deps: SchedulerDeps, report: SchedulerReport) -> None:
    """The same for the claim's run-queue rows per tenant and service tier (migration 0017): a few a tick,
    corrected to a recount, a difference logged and counted in ``CounterDrift``."""
    q, now = deps.db.q, deps.clock.now()
    with deps.db.transaction() as conn:
        locked = conn.execute(q.lock_tier_queues_to_reconcile, {"limit": deps.reconcile_per_tick}).fetchall()
        for row in locked:
            result = conn.execute(q.reconcile_tier_queue, {**row, "now": now}).fetchone()
            report.tier_queues_reconciled += 1
            if result is not None and result["drifted"]:
                report.tier_queues_drifted += 1
                logger.error("tier run-queue counters drifted from a recount", extra=dict(row))


def reconcile_backlog_shards(deps: SchedulerDeps, report: SchedulerReport) -> None:
    """Checks the system backlog's shards against the run-queue rows (both kept by one trigger) and, when
    they differ, recounts the shards. The check reads a row per tenant while job changes wait a moment; the
    recount, a pass over the unfinished jobs, runs only then, and a shard it corrects counts in
    ``CounterDrift``."""
    q = deps.db.q
    try:
        with deps.db.transaction() as conn:
            conn.execute(q.limit_shard_lock_wait)
            conn.execute(q.lock_backlog_shards)
            check = conn.execute(q.backlog_shards_drift).fetchone()
            assert check is not None
            if not check.pop("drifted"):
                return
            corrected = conn.execute(q.recount_backlog_shards).fetchall()
    except LockNotAvailable:
        # Jobs were changing under the shards (another scheduler reaping, say): checked at the next tick.
        logger.info("system backlog shards busy; their check waits for the next tick")
        return
    if corrected:
        report.backlog_shards_drifted = True
        logger.error("system backlog shards drifted from a recount; corrected", extra=check)
    else:  # the shards were right: a tenant's queue row is off, and its own recount will correct it
        logger.warning("run-queue rows disagree with the system backlog shards", extra=check)


def _age(now: datetime, since: datetime | None) -> float:
    return max((now - since).total_seconds(), 0.0) if since else 0.0


@dataclass(frozen=True)
class PipelineProgress:
    events: int
    published: int
    received: int


def read_pipeline_progress(db: Database) -> PipelineProgress:
    """How far events have travelled: written to the outbox, published, taken in by a worker."""
    with db.transaction() as conn:
        row = conn.execute(db.q.pipeline_progress).fetchone()
    assert row is not None
    return PipelineProgress(**row)
