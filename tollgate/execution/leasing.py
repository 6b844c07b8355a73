"""Claiming jobs with a lease and a fence, and keeping the lease alive while the attempt runs.

The claim is one short transaction for one service tier: pick fairly across the tenants with work in that
tier (the per-tenant, per-tier run-queue of migrations 0010 and 0017), move the job to RUNNING with
attempt+1 and fence+1, open the attempt record, commit. Inference runs after that commit. A worker claims
only once it holds the provider budget for a call (sized by ``peek_next_job``), so a claimed job never
waits for budget and the claim's choice across tenants is made when a call can go out. A heartbeat extends
the lease only while the fence still matches; when it does not, the attempt has lost the job and must stop.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from psycopg.types.json import Jsonb

from tollgate.core.clock import Clock, IdFactory, new_id
from tollgate.core.job_states import JobState, checked_transition
from tollgate.core.tiers import DEFAULT_SERVICE_TIER, ServiceTier
from tollgate.db import Database
from tollgate.db.database import Conn
from tollgate.events import ExtractionFailed
from tollgate.outbox.outcomes import insert_outcome_event


@dataclass(frozen=True)
class ClaimedJob:
    job_id: UUID
    tenant_id: UUID
    attempt: int
    max_attempts: int
    fence: int
    deadline_at: datetime
    document_id: UUID
    model_policy: str
    estimated_tokens: int
    trace_context: str | None
    state_version: int
    # No defaults: a claim query that forgot one would otherwise run every job as an invoice, silently.
    job_type: str
    options: dict[str, Any]
    model_escalated: bool  # the small model's result failed validation: this attempt is the large model's
    service_tier: ServiceTier
    batch_offers: int  # times the job went to the provider's Batch API (the batch path offers it once)


# How many tenants a claim looks at per read of the run-queue, and how many it tries in all before it
# answers "nothing": a tenant it cannot take from (its jobs held by other workers that very moment, or none
# due after all) costs one probe, never a scan.
TENANTS_PER_READ = 8
TENANTS_PER_CLAIM = 32
# Tenants promoted into the run-queue per claim, and jobs found past their deadline that one claim ends.
PROMOTIONS_PER_CLAIM = 16
EXPIRIES_PER_CLAIM = 16
# Tenants whose next job is past its deadline a claim walks past once it has ended its share of them.
EXPIRED_TENANTS_PASSED = 4
# Before every tenant in the run-queue's order (vtime ascending, then seq descending).
_BEFORE_EVERY_TENANT = (-1.0, 2**63 - 1)


def claim_next_job(
    db: Database,
    clock: Clock,
    *,
    worker_id: str,
    lease_seconds: float,
    tenant_cap: int,
    service_tier: ServiceTier = DEFAULT_SERVICE_TIER,
    new_id: IdFactory = new_id,
) -> ClaimedJob | None:
    """The fair claim within one service tier: the tier's runnable tenant with the least virtual time, then
    its best job of that tier (DESIGN §4).

    One short transaction of index reads, whatever the number of tenants, jobs or waiting retries: promote
    the few tenants whose time has come, walk the run-queue from the least virtual time, and take the first
    tenant's best job that no other worker holds. A job met past its deadline is ended here, with its
    event, instead of being stepped over (each such job costs one claim this once, never every claim).
    """
    with db.transaction() as conn:
        return claim_in(
            conn,
            db,
            now=clock.now(),
            worker_id=worker_id,
            lease_seconds=lease_seconds,
            tenant_cap=tenant_cap,
            service_tier=service_tier,
            new_id=new_id,
        )


def claim_in(
    conn: Conn,
    db: Database,
    *,
    now: datetime,
    worker_id: str,
    lease_seconds: float,
    tenant_cap: int,
    new_id: IdFactory,
    service_tier: ServiceTier = DEFAULT_SERVICE_TIER,
) -> ClaimedJob | None:
    """``claim_next_job`` in the caller's transaction (the scale benchmark rolls it back each time)."""
    checked_transition(frozenset({JobState.READY, JobState.RETRY_SCHEDULED}), JobState.RUNNING)
    params = {
        "now": now,
        "worker_id": worker_id,
        "lease_until": now + timedelta(seconds=lease_seconds),
        "service_tier": service_tier,
    }
    expired = tried = passed = 0
    conn.execute(
        db.q.promote_waking_tier_queues,
        {"now": now, "limit": PROMOTIONS_PER_CLAIM, "service_tier": service_tier},
    )
    after_vtime, after_seq = _BEFORE_EVERY_TENANT
    while tried < TENANTS_PER_CLAIM:
        tenants = conn.execute(
            db.q.runnable_tier_tenants,
            {
                "service_tier": service_tier,
                "tenant_cap": tenant_cap,
                "after_vtime": after_vtime,
                "after_seq": after_seq,
                "limit": TENANTS_PER_READ,
            },
        ).fetchall()
        if not tenants:
            return None
        for tenant in tenants:
            tried += 1
            after_vtime, after_seq = tenant["vtime"], tenant["seq"]
            while True:
                row = conn.execute(
                    db.q.claim_tenant_job, {**params, "tenant_id": tenant["tenant_id"]}
                ).fetchone()
                if row is None:
                    # Nothing due, or every due job held by another worker right now: only the first
                    # takes the tenant's tier queue out of the run-queue until its next job's time.
                    conn.execute(
                        db.q.demote_tier_queue,
                        {"tenant_id": tenant["tenant_id"], "service_tier": service_tier, "now": now},
                    )
                    break
                outcome = row.pop("outcome")
                if outcome == "claimed":
                    return ClaimedJob(**row)
                if expired >= EXPIRIES_PER_CLAIM:
                    # This claim has ended its share: the rest of this tenant's expired jobs wait for the
                    # next claim or the scheduler's deadline pass, and the walk goes on to the next tenant,
                    # so a few tenants' expired jobs at the front of the run-queue do not keep a runnable
                    # job from a slot. In a storm of them it stops after a few such tenants more: each costs
                    # a probe that ends nothing.
                    passed += 1
                    if passed > EXPIRED_TENANTS_PASSED:
                        return None
                    break
                fail_job(conn, db, new_id, job_id=row["job_id"], fence=row["fence"], now=now)
                expired += 1
    return None


def fail_job(
    conn: Conn,
    db: Database,
    new_id: IdFactory,
    *,
    job_id: UUID,
    fence: int,
    now: datetime,
    reason: str = "deadline_exceeded",
) -> bool:
    """Ends an unfinished job as FAILED_TERMINAL with ``reason`` and its ``extraction.failed.v1`` event, in
    the caller's transaction; False when the fence moved (someone else changed the job first)."""
    checked_transition(
        frozenset({JobState.READY, JobState.RUNNING, JobState.RETRY_SCHEDULED}), JobState.FAILED_TERMINAL
    )
    failed = conn.execute(
        db.q.fail_job_terminally,
        {"job_id": job_id, "fence": fence, "now": now, "error": Jsonb({"reason": reason})},
    ).fetchone()
    if failed is None:
        return False
    # The same event the worker writes when it ends a job: one model, so tenants get one shape of it.
    insert_outcome_event(
        conn,
        db,
        ExtractionFailed,
        event_id=new_id(),
        trace_context=None,
        job_id=job_id,
        tenant_id=failed["tenant_id"],
        state_version=failed["state_version"],
        attempt=failed["attempt"],
        reason=reason,
    )
    return True


def peek_next_job(
    db: Database, clock: Clock, *, tenant_cap: int, service_tier: ServiceTier = DEFAULT_SERVICE_TIER
) -> int | None:
    """The estimated tokens of the job a claim for ``service_tier`` would pick now, or None when nothing of
    that tier is runnable. Takes nothing: a slot sizes the budget it acquires before claiming by this."""
    with db.transaction() as conn:
        row = conn.execute(
            db.q.peek_next_tier_job,
            {
                "now": clock.now(),
                "tenant_cap": tenant_cap,
                "limit": TENANTS_PER_READ,
                "service_tier": service_tier,
            },
        ).fetchone()
    return None if row is None else int(row["estimated_tokens"])


def extend_lease(db: Database, clock: Clock, job: ClaimedJob, lease_seconds: float) -> bool:
    """True while this attempt still owns the job; False once the fence moved (reaped, or taken over)."""
    with db.transaction() as conn:
        row = conn.execute(
            db.q.extend_lease,
            {
                "job_id": job.job_id,
                "fence": job.fence,
                "lease_until": clock.now() + timedelta(seconds=lease_seconds),
            },
        ).fetchone()
    return row is not None


def release_job(db: Database, clock: Clock, job: ClaimedJob) -> bool:
    """Gives a claimed job back (shutdown): RETRY_SCHEDULED now, fence moved, attempt kept and closed."""
    now = clock.now()
    checked_transition(JobState.RUNNING, JobState.RETRY_SCHEDULED)
    with db.transaction() as conn:
        released = conn.execute(
            db.q.release_job, {"job_id": job.job_id, "fence": job.fence, "now": now}
        ).fetchone()
        conn.execute(
            db.q.close_open_attempt,
            {"job_id": job.job_id, "fence": job.fence, "now": now, "outcome": "released"},
        )
    return released is not None
