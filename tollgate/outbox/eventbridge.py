"""The relay's results bus destination: outcome events as EventBridge entries, in PutEvents calls of at most
ten entries and 256 KB, with each entry's failure reported for its own event so only those are retried."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol
from uuid import UUID

from tollgate.events import bus_detail
from tollgate.outbox.relay import OutboxEvent

PUT_EVENTS_ENTRY_LIMIT = 10
PUT_EVENTS_BYTES_LIMIT = 256 * 1024
# EventBridge counts a Time field as 14 bytes, whatever its value.
TIME_BYTES = 14


def entry_size(entry: dict[str, Any]) -> int:
    """An entry's size as EventBridge computes it against the 256 KB limit (UTF-8 bytes of its fields)."""
    size = TIME_BYTES if "Time" in entry else 0
    for name in ("Source", "DetailType", "Detail"):
        size += len(entry.get(name, "").encode())
    size += sum(len(resource.encode()) for resource in entry.get("Resources", []))
    return size


class PutEventsClient(Protocol):
    """The one call of boto3's EventBridge client this publisher makes."""

    def put_events(self, *, Entries: Sequence[Mapping[str, Any]]) -> Mapping[str, Any]: ...


class EventBridgePublisher:
    """Publishes on one bus under one source (``tollgate.<stage>``): detail-type is the event type, detail the
    payload with ``event_id`` and ``occurred_at``. EventBridge has no deduplication: a republish is a second
    event with the same ``event_id`` in its detail, which consumers skip."""

    def __init__(self, client: PutEventsClient, bus_name: str, source: str) -> None:
        self._events = client
        self._bus = bus_name
        self._source = source

    def publish(self, events: Sequence[OutboxEvent]) -> dict[UUID, str | None]:
        outcome: dict[UUID, str | None] = {}
        batch: list[tuple[OutboxEvent, dict[str, Any]]] = []
        batch_bytes = 0
        for event in events:
            try:
                entry = self._entry(event)
            except Exception as error:  # a payload its model refuses is never published
                outcome[event.event_id] = f"{type(error).__name__}: {error}"[:1000]
                continue
            size = entry_size(entry)
            if size > PUT_EVENTS_BYTES_LIMIT:
                outcome[event.event_id] = f"entry of {size} bytes is over PutEvents' {PUT_EVENTS_BYTES_LIMIT}"
                continue
            if len(batch) == PUT_EVENTS_ENTRY_LIMIT or batch_bytes + size > PUT_EVENTS_BYTES_LIMIT:
                outcome.update(self._put(batch))
                batch, batch_bytes = [], 0
            batch.append((event, entry))
            batch_bytes += size
        if batch:
            outcome.update(self._put(batch))
        return outcome

    def _entry(self, event: OutboxEvent) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "EventBusName": self._bus,
            "Source": self._source,
            "DetailType": event.event_type,
            "Detail": bus_detail(
                event.event_type, event.payload, event_id=event.event_id, created_at=event.created_at
            ),
            "Time": event.created_at,
        }
        if event.trace_context:
            entry["TraceHeader"] = event.trace_context
        return entry

    def _put(self, batch: Sequence[tuple[OutboxEvent, dict[str, Any]]]) -> dict[UUID, str | None]:
        try:
            response = self._events.put_events(Entries=[entry for _, entry in batch])
        except Exception as error:  # the whole call failed: every entry stays unpublished
            reason = f"{type(error).__name__}: {error}"[:1000]
            return {event.event_id: reason for event, _ in batch}
        # Results come back in the order of the entries: one with an ErrorCode was not put, the rest were.
        results = response.get("Entries", [])
        outcome: dict[UUID, str | None] = {}
        for index, (event, _) in enumerate(batch):
            result = results[index] if index < len(results) else {"ErrorCode": "MissingResult"}
            if result.get("ErrorCode"):
                outcome[event.event_id] = f"{result['ErrorCode']}: {result.get('ErrorMessage', '')}"[:1000]
            else:
                outcome[event.event_id] = None
        return outcome
