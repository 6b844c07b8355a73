"""The relay's SQS FIFO destination: events in batches of ten, deduplicated by event id, grouped per tenant
shard so one tenant's backlog never sits in front of another's."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any
from uuid import UUID

from tollgate.outbox.relay import OutboxEvent

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient

SQS_BATCH_LIMIT = 10


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
