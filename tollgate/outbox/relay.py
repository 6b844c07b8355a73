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
from typing import TYPE_CHECKING, Any, Protocol
from uuid import UUID

from pydantic import BaseModel

from tollgate.core import checkpoints
from tollgate.core.checkpoints import RELAY_AFTER_PUBLISH
from tollgate.core.clock import Clock
from tollgate.db import Database
from tollgate.events import EventPayload, parse_payload

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient

SQS_BATCH_LIMIT = 10


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

    def data(self) -> EventPayload:
        """The payload, parsed by its event type's model; ValidationError or UnknownEventType otherwise."""
        return parse_payload(self.event_type, self.payload)

    def body_sha256(self) -> str:
        return hashlib.sha256(self.body().encode()).hexdigest()


class Publisher(Protocol):
    def publish(self, events: Sequence[OutboxEvent]) -> dict[UUID, str | None]:
        """Sends the events; returns, per event id, None when confirmed or the reason it was not."""


def message_group(event: OutboxEvent, shards_per_tenant: int) -> str:
    """A tenant's events spread over a few groups of its own: FIFO order holds within a job, one tenant's
    backlog never sits in front of another tenant's, and a heavy tenant is not limited to one in-flight
    message (SQS FIFO delivers one group's messages one at a time)."""
    shard = int(hashlib.sha256(event.aggregate_id.bytes).hexdigest(), 16) % shards_per_tenant
    return f"{event.tenant_id}.{shard}"


class SqsFifoPublisher:
    def __init__(self, client: SQSClient, queue_url: str, shards_per_tenant: int = 8) -> None:
        self._sqs = client
        self._queue_url = queue_url
        self._shards = shards_per_tenant

    def publish(self, events: Sequence[OutboxEvent]) -> dict[UUID, str | None]:
        outcome: dict[UUID, str | None] = {}
        for start in range(0, len(events), SQS_BATCH_LIMIT):
            chunk = events[start : start + SQS_BATCH_LIMIT]
            entries = []
            for index, event in enumerate(chunk):
                attributes: dict[str, Any] = {
                    "event_type": {"DataType": "String", "StringValue": event.event_type},
                    "tenant_id": {"DataType": "String", "StringValue": str(event.tenant_id)},
                }
                if event.trace_context:
                    attributes["traceparent"] = {"DataType": "String", "StringValue": event.trace_context}
                entries.append(
                    {
                        "Id": str(index),
                        "MessageBody": event.body(),
                        "MessageDeduplicationId": str(event.event_id),
                        "MessageGroupId": message_group(event, self._shards),
                        "MessageAttributes": attributes,
                    }
                )
            try:
                response = self._sqs.send_message_batch(QueueUrl=self._queue_url, Entries=entries)  # type: ignore[arg-type]
            except Exception as error:  # the whole call failed: every entry stays unpublished
                for event in chunk:
                    outcome[event.event_id] = f"{type(error).__name__}: {error}"[:1000]
                continue
            for ok in response.get("Successful", []):
                outcome[chunk[int(ok["Id"])].event_id] = None
            for failed in response.get("Failed", []):
                reason = f"{failed.get('Code', '')}: {failed.get('Message', '')}"[:1000]
                outcome[chunk[int(failed["Id"])].event_id] = reason
        return outcome


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
