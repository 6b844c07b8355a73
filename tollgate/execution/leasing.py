"""Claiming jobs with a lease and a fence, and keeping the lease alive while the attempt runs.

The claim is one short transaction: pick fairly across tenants, move the job to RUNNING with attempt+1 and
fence+1, open the attempt record, commit. Inference runs after that commit. A worker claims only once it
holds the provider budget for a call (sized by ``peek_next_job``), so a claimed job never waits for budget
and the claim's choice across tenants is made when a call can go out. A heartbeat extends the lease only
while the fence still matches; when it does not, the attempt has lost the job and must stop.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from uuid import UUID

from tollgate.core.clock import Clock
from tollgate.core.job_states import JobState, checked_transition
from tollgate.db import Database


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


def claim_next_job(
    db: Database, clock: Clock, *, worker_id: str, lease_seconds: float, tenant_cap: int
) -> ClaimedJob | None:
    now = clock.now()
    checked_transition(frozenset({JobState.READY, JobState.RETRY_SCHEDULED}), JobState.RUNNING)
    with db.transaction() as conn:
        row = conn.execute(
            db.q.claim_next_job,
            {
                "now": now,
                "worker_id": worker_id,
                "lease_until": now + timedelta(seconds=lease_seconds),
                "tenant_cap": tenant_cap,
            },
        ).fetchone()
        if row is None:
            return None
        job = ClaimedJob(**row)
        conn.execute(
            db.q.insert_attempt,
            {
                "job_id": job.job_id,
                "attempt": job.attempt,
                "tenant_id": job.tenant_id,
                "fence": job.fence,
                "worker_id": worker_id,
                "now": now,
            },
        )
    return job


def peek_next_job(db: Database, clock: Clock, *, tenant_cap: int) -> int | None:
    """The estimated tokens of the job a claim would pick now, or None when nothing is runnable. Takes
    nothing: a slot sizes the budget it acquires before claiming by this."""
    with db.transaction() as conn:
        row = conn.execute(db.q.peek_next_job, {"now": clock.now(), "tenant_cap": tenant_cap}).fetchone()
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
