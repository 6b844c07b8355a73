"""The outbox relay: publishes committed events to their destinations, at least once.

A bounded batch is claimed in a short transaction (claim lease, SKIP LOCKED), published with no
transaction open, and marked published only after the destination confirmed it. A crash between
publishing and marking publishes again; every consumer is idempotent by event id.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol
from uuid import UUID

from pydantic import BaseModel

from tollgate.core import checkpoints
from tollgate.core.checkpoints import RELAY_AFTER_PUBLISH
from tollgate.core.clock import Clock
from tollgate.db import Database
from tollgate.events import BaseEvent, EventPayload, UnknownEventType, parse_payload


class OutboxEvent(BaseModel):
    """An event as it leaves the outbox; the SQS message body is exactly this, as JSON. The payload is kept
    as stored (its bytes are what ingress digests); ``data()`` is its typed form."""

    event_id: UUID
    event_type: str
    tenant_id: UUID
    aggregate_id: UUID
    payload: dict[str, Any]
    trace_context: str | None = None
    created_at: datetime

    def body(self) -> str:
        return self.model_dump_json()

    def data(self) -> BaseEvent:
        """The payload, parsed by its event type's model; ValidationError or UnknownEventType otherwise."""
        return parse_payload(self.event_type, self.payload)

    def job_data(self) -> EventPayload:
        """The payload of an event about a job; UnknownEventType for an event about a tenant as a whole."""
        data = self.data()
        if not isinstance(data, EventPayload):
            raise UnknownEventType(f"{self.event_type!r} is not an event about a job")
        return data

    def body_sha256(self) -> str:
        return hashlib.sha256(self.body().encode()).hexdigest()


class Publisher(Protocol):
    def publish(self, events: Sequence[OutboxEvent]) -> dict[UUID, str | None]:
        """Sends the events; returns, per event id, None when confirmed or the reason it was not."""


@dataclass(frozen=True)
class RelayDeps:
    db: Database
    clock: Clock
    routes: Mapping[str, Publisher]
    batch_size: int = 100
    claim_seconds: int = 60


@dataclass
class RelayReport:
    claimed: int = 0
    published: int = 0
    failed: int = 0
    unroutable: int = 0
    errors: dict[str, str] = field(default_factory=dict)


def relay_outbox(deps: RelayDeps, max_batches: int = 10) -> RelayReport:
    """Relays until the outbox is empty or ``max_batches`` batches went out (a bounded run per invocation)."""
    report = RelayReport()
    for _ in range(max_batches):
        batch = relay_batch(deps)
        report.claimed += batch.claimed
        report.published += batch.published
        report.failed += batch.failed
        report.unroutable += batch.unroutable
        report.errors.update(batch.errors)
        if batch.claimed < deps.batch_size:
            break
    return report


def relay_batch(deps: RelayDeps) -> RelayReport:
    q = deps.db.q
    with deps.db.transaction() as conn:
        rows = conn.execute(
            q.claim_outbox_batch,
            {"now": deps.clock.now(), "claim_seconds": deps.claim_seconds, "limit": deps.batch_size},
        ).fetchall()
    report = RelayReport(claimed=len(rows))
    if not rows:
        return report

    by_route: dict[str, list[OutboxEvent]] = defaultdict(list)
    outcome: dict[UUID, str | None] = {}
    for row in rows:
        event = OutboxEvent.model_validate(row)
        if event.event_type in deps.routes:
            by_route[event.event_type].append(event)
        else:
            outcome[event.event_id] = f"no route for event type {event.event_type!r}"
            report.unroutable += 1
    for event_type, events in by_route.items():
        outcome.update(deps.routes[event_type].publish(events))
    checkpoints.reached(RELAY_AFTER_PUBLISH)  # sent, not yet marked: the republish window

    confirmed = [event_id for event_id, error in outcome.items() if error is None]
    with deps.db.transaction() as conn:
        if confirmed:
            conn.execute(q.mark_outbox_published, {"now": deps.clock.now(), "event_ids": confirmed})
        for event_id, error in outcome.items():
            if error is not None:
                conn.execute(q.release_outbox_failure, {"event_id": event_id, "error": error})
                report.errors[str(event_id)] = error
    report.published = len(confirmed)
    report.failed = len(outcome) - len(confirmed) - report.unroutable
    return report
