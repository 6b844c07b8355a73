"""A job's timeline for support (``tollgate jobs show``): its state changes with versions and times, the
escalations from the small model to the large one, the reviewer's decision, and every webhook delivery of its
events with each attempt to send it. The attempts themselves are the job's attempt records (``JobDetail``).

Each part is read by the job's id through an index of its own, so showing one job costs the same however
many other jobs and tenants the database holds.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any
from uuid import UUID

from pydantic import BaseModel, Field

if TYPE_CHECKING:
    from collections.abc import Sequence

    from tollgate.db import Database
    from tollgate.db.database import Conn
    from tollgate.support.service import AttemptRecord

ESCALATED = "escalated"  # the outcome of a small model's attempt whose result failed validation


class StateChange(BaseModel):
    sequence: int = Field(description="The tenant's event sequence number (the live feed's cursor).")
    state: str
    state_version: int
    occurred_at: datetime


class Escalation(BaseModel):
    """A small model's result failed validation and the job was retried at once on the large model."""

    attempt: int = Field(description="The small model's attempt.")
    at: datetime | None
    from_model: str | None
    to_model: str | None = Field(description="The next attempt's model; null until it has started.")
    reasons: list[dict[str, Any]] = Field(description="The rules the small model's result broke.")


class ReviewRecord(BaseModel):
    decision: str
    reviewer: str
    note: str
    decided_on_version: int
    reasons: list[dict[str, Any]]
    review_requested_at: datetime
    decided_at: datetime


class DeliveryAttemptRecord(BaseModel):
    attempt: int
    started_at: datetime
    status: int | None
    error: str | None
    elapsed_ms: int | None


class DeliveryRecord(BaseModel):
    delivery_id: UUID = Field(description="Sent as webhook-id, the same on every attempt and replay.")
    endpoint_id: UUID
    url: str
    event_type: str
    state: str
    replays: int
    created_at: datetime
    delivered_at: datetime | None
    next_attempt_at: datetime | None
    attempts: list[DeliveryAttemptRecord]


class JobTimeline(BaseModel):
    state_changes: list[StateChange]
    missing_versions: list[int] = Field(
        description="State versions with no change kept: state changes are kept for the live feed's replay "
        "window (RETENTION_STATE_EVENT_HOURS), so an older job's early ones are gone."
    )
    escalations: list[Escalation]
    review: ReviewRecord | None
    deliveries: list[DeliveryRecord]


def read_timeline(
    db: Database, conn: Conn, job_id: UUID, state_version: int, attempts: Sequence[AttemptRecord]
) -> JobTimeline:
    """The job's timeline, read in the caller's transaction (the job and its attempts already read there, so
    every part is of the same moment)."""
    q = db.q
    changes = [
        StateChange.model_validate(row)
        for row in conn.execute(q.timeline_state_changes, {"job_id": job_id}).fetchall()
    ]
    decision = conn.execute(q.timeline_review_decision, {"job_id": job_id}).fetchone()
    deliveries = conn.execute(q.timeline_deliveries, {"job_id": job_id}).fetchall()
    seen = {change.state_version for change in changes}
    return JobTimeline(
        state_changes=changes,
        missing_versions=[v for v in range(1, state_version + 1) if v not in seen],
        escalations=_escalations(attempts),
        review=None
        if decision is None
        else ReviewRecord.model_validate({**decision, "decided_on_version": decision["state_version"]}),
        deliveries=[DeliveryRecord.model_validate(row) for row in deliveries],
    )


def _escalations(attempts: Sequence[AttemptRecord]) -> list[Escalation]:
    by_number = {a.attempt: a for a in attempts}
    escalations = []
    for attempt in attempts:
        if attempt.outcome != ESCALATED:
            continue
        following = by_number.get(attempt.attempt + 1)
        error = attempt.error if isinstance(attempt.error, dict) else {}
        escalations.append(
            Escalation(
                attempt=attempt.attempt,
                at=attempt.finished_at,
                from_model=attempt.model,
                to_model=following.model if following else None,
                reasons=list(error.get("reasons", [])),
            )
        )
    return escalations
