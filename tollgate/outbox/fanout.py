"""One route, several destinations: an outcome event goes to the tenant's webhooks and to the results bus,
and counts as published only when every destination confirmed it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from uuid import UUID

from aws_lambda_powertools import Logger

from tollgate.outbox.relay import OutboxEvent, Publisher

logger = Logger(service="tollgate-relay", child=True)


@dataclass(frozen=True)
class FanOutPublisher:
    """Sends every event to each destination in turn. An event one of them refused stays unpublished and goes
    to all of them again on the next run; that is safe because each destination takes a repeat: webhook
    deliveries are unique per (event, endpoint), and bus consumers dedupe on the event id."""

    destinations: Sequence[tuple[str, Publisher]]

    def publish(self, events: Sequence[OutboxEvent]) -> dict[UUID, str | None]:
        errors: dict[UUID, list[str]] = {event.event_id: [] for event in events}
        for name, destination in self.destinations:
            outcome = destination.publish(events)
            for event in events:
                if event.event_id not in outcome:
                    errors[event.event_id].append(f"{name}: no confirmation")
                elif (error := outcome[event.event_id]) is not None:
                    errors[event.event_id].append(f"{name}: {error}")
        return {event_id: "; ".join(found)[:1000] or None for event_id, found in errors.items()}


class NoSubscriber:
    """Where an event type has no destination configured (a bus-only event with no results bus): each event
    is confirmed as published to nobody, so it is not claimed again by every relay run."""

    def publish(self, events: Sequence[OutboxEvent]) -> dict[UUID, str | None]:
        if events:
            logger.warning(
                "no destination configured for these events; marked published",
                extra={"event_types": sorted({event.event_type for event in events}), "count": len(events)},
            )
        return {event.event_id: None for event in events}
