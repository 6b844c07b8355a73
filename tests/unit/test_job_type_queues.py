"""The relay's requested-event destination: each event goes to its job type's queue; an event whose type has
no queue, or whose payload does not parse, fails alone while the rest of the batch goes out."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any
from uuid import UUID, uuid4

from tollgate.events import EXTRACTION_REQUESTED, ExtractionRequested
from tollgate.outbox.job_queues import JobTypeQueues
from tollgate.outbox.relay import OutboxEvent

TENANT = uuid4()


class RecordingQueue:
    """A fake queue: keeps what it was given and confirms it (or fails everything it was given)."""

    def __init__(self, fail: str | None = None) -> None:
        self.sent: list[OutboxEvent] = []
        self.fail = fail

    def publish(self, events: Sequence[OutboxEvent]) -> dict[UUID, str | None]:
        self.sent.extend(events)
        return {event.event_id: self.fail for event in events}


def requested(payload: dict[str, Any]) -> OutboxEvent:
    return OutboxEvent(
        event_id=uuid4(),
        event_type=EXTRACTION_REQUESTED,
        tenant_id=TENANT,
        aggregate_id=uuid4(),
        payload=payload,
        created_at=datetime.now(UTC),
    )


def of_type(job_type: str) -> OutboxEvent:
    payload = ExtractionRequested(job_id=uuid4(), tenant_id=TENANT, state_version=1, job_type=job_type)
    return requested(payload.model_dump(mode="json"))


def test_each_event_goes_to_its_types_queue_only():
    invoices, summaries = RecordingQueue(), RecordingQueue()
    router = JobTypeQueues({"invoice_extraction": invoices, "document_summary": summaries})
    events = [of_type("invoice_extraction"), of_type("document_summary"), of_type("invoice_extraction")]

    outcome = router.publish(events)

    assert outcome == {event.event_id: None for event in events}
    assert invoices.sent == [events[0], events[2]]
    assert summaries.sent == [events[1]]


def test_a_row_written_before_job_types_had_queues_goes_to_the_invoice_queue():
    invoices = RecordingQueue()
    old = requested({"job_id": str(uuid4()), "tenant_id": str(TENANT), "state_version": 1})

    assert JobTypeQueues({"invoice_extraction": invoices}).publish([old]) == {old.event_id: None}
    assert invoices.sent == [old]


def test_an_unknown_type_fails_that_event_and_the_others_still_go_out():
    invoices = RecordingQueue()
    stranger, known = of_type("translation"), of_type("invoice_extraction")

    outcome = JobTypeQueues({"invoice_extraction": invoices}).publish([stranger, known])

    assert outcome == {stranger.event_id: "no queue for job type 'translation'", known.event_id: None}
    assert invoices.sent == [known]


def test_a_payload_that_does_not_parse_fails_alone():
    invoices = RecordingQueue()
    broken, known = requested({"job_id": "not a uuid"}), of_type("invoice_extraction")

    outcome = JobTypeQueues({"invoice_extraction": invoices}).publish([broken, known])

    assert outcome[known.event_id] is None
    assert (outcome[broken.event_id] or "").startswith("the payload does not parse")


def test_one_queues_failure_is_reported_for_its_events_only():
    router = JobTypeQueues(
        {
            "invoice_extraction": RecordingQueue(),
            "document_summary": RecordingQueue(fail="Throttled: slow down"),
        }
    )
    invoice, summary = of_type("invoice_extraction"), of_type("document_summary")

    assert router.publish([invoice, summary]) == {
        invoice.event_id: None,
        summary.event_id: "Throttled: slow down",
    }
