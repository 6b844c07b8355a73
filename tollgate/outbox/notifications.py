"""The relay's destination for job state changes: one SQS FIFO message per tenant and relay batch, naming the
highest sequence number among that tenant's changes in it. The notifier reads the changes themselves from
PostgreSQL after each connection's position, so a message only has to say "this tenant has news up to n":
a batch of a thousand changes of one tenant is one message, not a thousand."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING
from uuid import UUID

from pydantic import BaseModel, ConfigDict

from tollgate.events import JobStateChanged
from tollgate.outbox.relay import OutboxEvent
from tollgate.outbox.sqs import SQS_BATCH_LIMIT

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient


class TenantNews(BaseModel):
    """The notifications queue's message: the tenant has job state changes up to ``sequence``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tenant_id: UUID
    sequence: int


class TenantNewsPublisher:
    def __init__(self, client: SQSClient, queue_url: str) -> None:
        self._sqs = client
        self._queue_url = queue_url

    def publish(self, events: Sequence[OutboxEvent]) -> dict[UUID, str | None]:
        """Every event of a tenant is confirmed when its tenant's message is."""
        by_tenant: dict[UUID, list[OutboxEvent]] = {}
        latest: dict[UUID, int] = {}
        outcome: dict[UUID, str | None] = {}
        for event in events:
            data = event.data()
            if not isinstance(data, JobStateChanged):
                outcome[event.event_id] = f"not a job state change: {event.event_type}"
                continue
            by_tenant.setdefault(data.tenant_id, []).append(event)
            latest[data.tenant_id] = max(latest.get(data.tenant_id, 0), data.sequence)
        tenants = list(by_tenant)
        for start in range(0, len(tenants), SQS_BATCH_LIMIT):
            chunk = tenants[start : start + SQS_BATCH_LIMIT]
            entries = [
                {
                    "Id": str(index),
                    "MessageBody": TenantNews(tenant_id=tenant, sequence=latest[tenant]).model_dump_json(),
                    # Deduplicated per tenant and number: a republished batch adds nothing.
                    "MessageDeduplicationId": f"{tenant}:{latest[tenant]}",
                    # One group per tenant: order does not matter (delivery reads the database), and one
                    # tenant's news never waits behind another's.
                    "MessageGroupId": str(tenant),
                }
                for index, tenant in enumerate(chunk)
            ]
            try:
                response = self._sqs.send_message_batch(QueueUrl=self._queue_url, Entries=entries)  # type: ignore[arg-type]
            except (
                Exception
            ) as error:  # the whole call failed: every event of these tenants stays unpublished
                for tenant in chunk:
                    for event in by_tenant[tenant]:
                        outcome[event.event_id] = f"{type(error).__name__}: {error}"[:1000]
                continue
            for ok in response.get("Successful", []):
                for event in by_tenant[chunk[int(ok["Id"])]]:
                    outcome[event.event_id] = None
            for failed in response.get("Failed", []):
                reason = f"{failed.get('Code', '')}: {failed.get('Message', '')}"[:1000]
                for event in by_tenant[chunk[int(failed["Id"])]]:
                    outcome[event.event_id] = reason
        return outcome
