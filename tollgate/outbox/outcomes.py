"""Outcome events as every producer writes them: the event's model filled with the job's usage totals, read
in the same transaction that writes the event, so the totals and the state it reports commit together."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from tollgate.db import Database
from tollgate.db.database import Conn
from tollgate.events import JobOutcome, JobTotals, outbox_row


def job_totals(conn: Conn, db: Database, job_id: UUID) -> JobTotals:
    """The job's type, last model and token and cost totals over its attempts. The one place they are read:
    per-job total columns, once they exist, replace this query and nothing else."""
    row = conn.execute(db.q.job_outcome_totals, {"job_id": job_id}).fetchone()
    if row is None:
        raise LookupError(f"no job {job_id} to total")
    return JobTotals.model_validate(dict(row))


def insert_outcome_event(
    conn: Conn,
    db: Database,
    model: type[JobOutcome],
    *,
    event_id: UUID,
    trace_context: str | None,
    job_id: UUID,
    **fields: Any,
) -> JobOutcome:
    """Builds ``model`` for the job from ``fields`` and its totals, and writes it to the outbox in the
    caller's transaction."""
    totals = job_totals(conn, db, job_id)
    event = model(job_id=job_id, **fields, **dict(totals))
    conn.execute(db.q.insert_outbox_event, outbox_row(event, event_id=event_id, trace_context=trace_context))
    return event
