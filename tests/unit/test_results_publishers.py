"""The results bus publisher's batching and per-entry outcomes, and the fan-out route's confirmation rule,
against in-memory destinations."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from uuid import UUID, uuid4

from tollgate.events import EXTRACTION_COMPLETED, EXTRACTION_REQUESTED, ExtractionCompleted
from tollgate.outbox.eventbridge import (
    PUT_EVENTS_BYTES_LIMIT,
    PUT_EVENTS_ENTRY_LIMIT,
    EventBridgePublisher,
    entry_size,
)
from tollgate.outbox.fanout import FanOutPublisher
from tollgate.outbox.relay import OutboxEvent

TENANT = UUID("6f1e7a7e-0000-4000-8000-00000000000b")
AT = datetime(2026, 3, 1, 12, 30, tzinfo=UTC)


def completed(**payload_overrides) -> OutboxEvent:
    job_id = uuid4()
    payload = ExtractionCompleted(job_id=job_id, tenant_id=TENANT, state_version=3, attempt=1).model_dump(
        mode="json"
    )
    return OutboxEvent(
        event_id=uuid4(),
        event_type=EXTRACTION_COMPLETED,
        tenant_id=TENANT,
        aggregate_id=job_id,
        payload={**payload, **payload_overrides},
        created_at=AT,
    )


class RecordingBus:
    """PutEvents in memory: accepts every entry unless its detail's job is in ``refuse``."""

    def __init__(self, refuse: set[str] | None = None) -> None:
        self.calls: list[list[dict]] = []
        self.refuse = refuse or set()

    def put_events(self, *, Entries):
        self.calls.append(list(Entries))
        results = [
            {"ErrorCode": "InternalFailure", "ErrorMessage": "try again"}
            if json.loads(entry["Detail"])["job_id"] in self.refuse
            else {"EventId": str(uuid4())}
            for entry in Entries
        ]
        return {"FailedEntryCount": sum("ErrorCode" in r for r in results), "Entries": results}


def test_entries_go_in_calls_of_at_most_ten_and_each_is_confirmed():
    bus = RecordingBus()
    events = [completed() for _ in range(23)]

    outcome = EventBridgePublisher(bus, "tollgate-dev-results", "tollgate.dev").publish(events)

    assert [len(call) for call in bus.calls] == [10, 10, 3]
    assert all(len(call) <= PUT_EVENTS_ENTRY_LIMIT for call in bus.calls)
    assert outcome == {event.event_id: None for event in events}
    entry = bus.calls[0][0]
    assert (entry["EventBusName"], entry["Source"], entry["DetailType"]) == (
        "tollgate-dev-results",
        "tollgate.dev",
        EXTRACTION_COMPLETED,
    )
    detail = json.loads(entry["Detail"])
    assert detail["event_id"] == str(events[0].event_id) and detail["occurred_at"] == "2026-03-01T12:30:00Z"


def test_a_call_never_passes_256_kb():
    bus = RecordingBus()
    # A source of a third of the limit makes each entry a bit over a third: two fit in a call, three do not.
    publisher = EventBridgePublisher(bus, "bus", "tollgate." + "x" * (PUT_EVENTS_BYTES_LIMIT // 3))

    outcome = publisher.publish([completed() for _ in range(4)])

    assert [len(call) for call in bus.calls] == [2, 2]
    assert all(sum(entry_size(entry) for entry in call) <= PUT_EVENTS_BYTES_LIMIT for call in bus.calls)
    assert set(outcome.values()) == {None}


def test_an_entry_over_the_limit_alone_is_reported_not_sent():
    event = completed()
    outcome = EventBridgePublisher(RecordingBus(), "bus", "x" * PUT_EVENTS_BYTES_LIMIT).publish([event])
    assert "over PutEvents" in (outcome[event.event_id] or "")


def test_only_the_entries_that_failed_are_reported_failed():
    events = [completed() for _ in range(3)]
    bus = RecordingBus(refuse={events[1].payload["job_id"]})

    outcome = EventBridgePublisher(bus, "bus", "tollgate.dev").publish(events)

    assert outcome[events[0].event_id] is None and outcome[events[2].event_id] is None
    assert outcome[events[1].event_id] == "InternalFailure: try again"


def test_a_payload_its_model_refuses_is_never_put():
    broken = completed(state="FAILED_TERMINAL")
    bus = RecordingBus()

    outcome = EventBridgePublisher(bus, "bus", "tollgate.dev").publish([broken])

    assert bus.calls == [] and "ValidationError" in (outcome[broken.event_id] or "")


def test_a_requested_event_is_not_a_results_bus_event():
    event = completed().model_copy(update={"event_type": EXTRACTION_REQUESTED})
    outcome = EventBridgePublisher(RecordingBus(), "bus", "tollgate.dev").publish([event])
    assert "UnknownEventType" in (outcome[event.event_id] or "")


class Destination:
    def __init__(self, answers: dict[UUID, str | None]) -> None:
        self.answers = answers
        self.seen: list[UUID] = []

    def publish(self, events):
        self.seen += [event.event_id for event in events]
        return {
            event.event_id: self.answers.get(event.event_id)
            for event in events
            if event.event_id in self.answers
        }


def test_fan_out_confirms_an_event_only_when_every_destination_did():
    both, bus_down, unanswered = completed(), completed(), completed()
    webhooks = Destination({both.event_id: None, bus_down.event_id: None, unanswered.event_id: None})
    bus = Destination({both.event_id: None, bus_down.event_id: "ThrottlingException: slow down"})

    outcome = FanOutPublisher((("webhooks", webhooks), ("results bus", bus))).publish(
        [both, bus_down, unanswered]
    )

    assert outcome[both.event_id] is None
    assert outcome[bus_down.event_id] == "results bus: ThrottlingException: slow down"
    assert outcome[unanswered.event_id] == "results bus: no confirmation"
    assert webhooks.seen == bus.seen, "each destination is offered every event"
