"""The relay's destination for requested events: each job type has its own queue, picked by the event's
``job_type``, so a type whose jobs pile up or dead-letter stays apart from the others."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from uuid import UUID

from pydantic import ValidationError

from tollgate.events import UnknownEventType
from tollgate.outbox.relay import OutboxEvent, Publisher


class JobTypeQueues:
    """A publisher over one publisher per job type. An event whose type has no queue (a row written by a
    newer release, say) is reported as failed, so it stays in the outbox with its reason while the rest of
    the batch goes out."""

    def __init__(self, queues: Mapping[str, Publisher]) -> None:
        self._queues = dict(queues)

    def publish(self, events: Sequence[OutboxEvent]) -> dict[UUID, str | None]:
        outcome: dict[UUID, str | None] = {}
        by_type: dict[str, list[OutboxEvent]] = defaultdict(list)
        for event in events:
            try:
                job_type = getattr(event.data(), "job_type", None)
            except (ValidationError, UnknownEventType) as error:
                outcome[event.event_id] = f"the payload does not parse: {error}"[:1000]
                continue
            if not isinstance(job_type, str) or job_type not in self._queues:
                outcome[event.event_id] = f"no queue for job type {job_type!r}"
                continue
            by_type[job_type].append(event)
        for job_type, grouped in by_type.items():
            outcome.update(self._queues[job_type].publish(grouped))
        return outcome
