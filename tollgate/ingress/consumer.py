"""The worker's ingress: SQS messages become execution_inbox rows, exactly once per event id.

A message is deleted only after its row committed. A redelivery finds the row and changes nothing (it
never touches the job, so a RUNNING or finished job stays as it is). The same event id with a different
payload is quarantined and raised as an alert, never executed. A message that cannot be taken in is left
on the queue; after maxReceiveCount receives, SQS moves it to the dead-letter queue.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools import Logger
from pydantic import ValidationError

from tollgate.core import checkpoints
from tollgate.core.checkpoints import BEFORE_SQS_DELETE
from tollgate.core.clock import Clock
from tollgate.core.observability import log_context, trace_keys
from tollgate.db import Database
from tollgate.events import UnknownEventType
from tollgate.outbox.relay import OutboxEvent

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient

logger = Logger(service="tollgate-worker", child=True)


class IngressOutcome(StrEnum):
    RECORDED = "recorded"
    DUPLICATE = "duplicate"
    QUARANTINED = "quarantined"


@dataclass(frozen=True)
class IngressDeps:
    db: Database
    sqs: SQSClient
    queue_url: str
    clock: Clock
    wait_seconds: int = 20
    max_messages: int = 10
    # How long a message that failed stays invisible before its next receive (and, eventually, the DLQ).
    failure_visibility_seconds: int = 30
    # The job type whose queue this is: it names the consumer in logs.
    job_type: str | None = None


@dataclass
class IngressReport:
    received: int = 0
    outcomes: dict[IngressOutcome, int] = field(default_factory=lambda: dict.fromkeys(IngressOutcome, 0))
    failed: int = 0
    deleted: int = 0


class PoisonMessage(ValueError):
    """A body that is not an outbox event; it stays on the queue until the DLQ takes it."""


def record_event(db: Database, clock: Clock, body: str, message_id: str) -> IngressOutcome:
    try:
        event = OutboxEvent.model_validate_json(body)
        job_id = event.job_data().job_id
    except (ValidationError, UnknownEventType) as error:
        raise PoisonMessage(f"message {message_id} is not an extraction event: {error}") from None
    digest = hashlib.sha256(body.encode()).hexdigest()
    now = clock.now()
    with db.transaction() as conn:
        inserted = conn.execute(
            db.q.insert_inbox_event,
            {
                "event_id": event.event_id,
                "tenant_id": event.tenant_id,
                "job_id": job_id,
                "event_type": event.event_type,
                "payload_sha256": digest,
                "message_id": message_id,
                "received_at": now,
            },
        ).fetchone()
        if inserted is not None:
            return IngressOutcome.RECORDED
        existing = conn.execute(db.q.get_inbox_event, {"event_id": event.event_id}).fetchone()
        assert existing is not None
        if existing["payload_sha256"] == digest:
            return IngressOutcome.DUPLICATE
        conn.execute(
            db.q.insert_quarantine,
            {
                "event_id": event.event_id,
                "expected_sha256": existing["payload_sha256"],
                "received_sha256": digest,
                "message_id": message_id,
                "body": body,
                "received_at": now,
            },
        )
    logger.error(
        "ALERT: event id reused with a different payload; quarantined",
        extra={"event_id": str(event.event_id), "message_id": message_id, "alert": "inbox_quarantine"},
    )
    return IngressOutcome.QUARANTINED


def ingest_once(deps: IngressDeps) -> IngressReport:
    """One receive (long poll), each message recorded in its own transaction, then one batch delete."""
    response = deps.sqs.receive_message(
        QueueUrl=deps.queue_url,
        MaxNumberOfMessages=deps.max_messages,
        WaitTimeSeconds=deps.wait_seconds,
        MessageSystemAttributeNames=["ApproximateReceiveCount"],
        MessageAttributeNames=["traceparent"],
    )
    messages: list[Any] = response.get("Messages", [])
    report = IngressReport(received=len(messages))
    done: list[dict[str, str]] = []
    for message in messages:
        traceparent = message.get("MessageAttributes", {}).get("traceparent", {}).get("StringValue")
        queue_keys = {"job_type": deps.job_type} if deps.job_type else {}
        with log_context(message_id=message["MessageId"], **queue_keys, **trace_keys(traceparent)):
            try:
                outcome = record_event(deps.db, deps.clock, message["Body"], message["MessageId"])
            except Exception:
                report.failed += 1
                logger.exception(
                    "message not taken in; it stays on the queue",
                    extra={"receive_count": message.get("Attributes", {}).get("ApproximateReceiveCount")},
                )
                deps.sqs.change_message_visibility(
                    QueueUrl=deps.queue_url,
                    ReceiptHandle=message["ReceiptHandle"],
                    VisibilityTimeout=deps.failure_visibility_seconds,
                )
                continue
            logger.debug("message taken in", extra={"outcome": outcome.value})
        report.outcomes[outcome] += 1
        done.append({"Id": str(len(done)), "ReceiptHandle": message["ReceiptHandle"]})
    if done:
        checkpoints.reached(
            BEFORE_SQS_DELETE
        )  # recorded and committed, not yet deleted: the redelivery window
        deleted = deps.sqs.delete_message_batch(QueueUrl=deps.queue_url, Entries=done)  # type: ignore[arg-type]
        report.deleted = len(deleted.get("Successful", []))
    return report
