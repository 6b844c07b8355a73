"""Deliveries: one per (event, endpoint), fanned out when the relay routes a webhook event, and started as
one Step Functions execution each. Replays re-run a delivery under the same id (the ``webhook-id``)."""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol
from uuid import UUID

from aws_lambda_powertools import Logger
from pydantic import BaseModel

from tollgate.core.clock import Clock
from tollgate.core.errors import NotFound
from tollgate.db import Database
from tollgate.delivery.states import DeliveryState, checked_transition
from tollgate.events import UnknownEventType, webhook_body
from tollgate.outbox.relay import OutboxEvent

if TYPE_CHECKING:
    from mypy_boto3_stepfunctions import SFNClient

logger = Logger(service="tollgate-webhooks", child=True)

# Fixed namespace: the same (event, endpoint) always gets the same delivery id, across republishes.
DELIVERY_NAMESPACE = uuid.UUID("5b0f3c0e-6f0a-4f55-9a43-77c1f2d8e0a1")


def delivery_id_for(event_id: UUID, endpoint_id: UUID) -> UUID:
    return uuid.uuid5(DELIVERY_NAMESPACE, f"{event_id}:{endpoint_id}")


def execution_name(delivery_id: UUID, replays: int, restarts: int = 0) -> str:
    """One execution per delivery (a republish cannot start a second); a replay gets a new run of it, and
    so does a stalled delivery the scheduler restarts. Each part only appears once it is counted."""
    name = str(delivery_id)
    if replays:
        name += f"-replay-{replays}"
    if restarts:
        name += f"-restart-{restarts}"
    return name


def render_body(event: OutboxEvent) -> str:
    """The exact body tenants receive, built once and stored: every attempt sends the same bytes. The
    events module builds it from the payload's model, so it is what the committed webhook schema says."""
    return webhook_body(event.event_type, event.payload, event.created_at)


def _job_of(event: OutboxEvent) -> UUID | None:
    """The job an event is about, kept on its deliveries so a job's timeline finds them; None for an event
    about a tenant as a whole."""
    try:
        return event.job_data().job_id
    except UnknownEventType:
        return None


class DeliveryStarter(Protocol):
    def start(self, delivery_id: UUID, name: str) -> None:
        """Starts the delivery's execution; an execution of that name already existing is success."""


class StepFunctionsStarter:
    def __init__(self, client: SFNClient, state_machine_arn: str) -> None:
        self._sfn = client
        self._arn = state_machine_arn

    def start(self, delivery_id: UUID, name: str) -> None:
        with contextlib.suppress(self._sfn.exceptions.ExecutionAlreadyExists):
            self._sfn.start_execution(
                stateMachineArn=self._arn, name=name, input=json.dumps({"delivery_id": str(delivery_id)})
            )


class NoDispatcher:
    """Where no dispatcher is deployed: deliveries are recorded (and can be replayed later), none start."""

    def start(self, delivery_id: UUID, name: str) -> None:
        logger.warning(
            "no webhook dispatcher configured; delivery recorded, not started",
            extra={"delivery_id": str(delivery_id)},
        )


@dataclass(frozen=True)
class WebhookDispatcher:
    """The relay's destination for webhook events: fan out to subscribed endpoints, then start deliveries."""

    db: Database
    starter: DeliveryStarter

    def publish(self, events: Sequence[OutboxEvent]) -> dict[UUID, str | None]:
        outcome: dict[UUID, str | None] = {}
        for event in events:
            try:
                for delivery_id, replays, restarts in self._fan_out(event):
                    self.starter.start(delivery_id, execution_name(delivery_id, replays, restarts))
                outcome[event.event_id] = None
            except Exception as error:  # this event stays unpublished and goes out on the next run
                outcome[event.event_id] = f"{type(error).__name__}: {error}"[:1000]
        return outcome

    def _fan_out(self, event: OutboxEvent) -> list[tuple[UUID, int, int]]:
        q = self.db.q
        body = render_body(event)
        job_id = _job_of(event)
        with self.db.transaction() as conn:
            endpoints = conn.execute(
                q.subscribed_endpoints, {"tenant_id": event.tenant_id, "event_type": event.event_type}
            ).fetchall()
            for endpoint in endpoints:
                conn.execute(
                    q.insert_delivery,
                    {
                        "delivery_id": delivery_id_for(event.event_id, endpoint["endpoint_id"]),
                        "tenant_id": event.tenant_id,
                        "endpoint_id": endpoint["endpoint_id"],
                        "event_id": event.event_id,
                        "event_type": event.event_type,
                        "body": body,
                        "trace_context": event.trace_context,
                        "job_id": job_id,
                    },
                )
            rows = conn.execute(q.deliveries_for_event, {"event_id": event.event_id}).fetchall()
        # A republish after a crash finds the rows and (re)starts the same executions, which is a no-op.
        pending = [r for r in rows if r["state"] == DeliveryState.PENDING]
        return [(r["delivery_id"], r["replays"], r["restarts"]) for r in pending]


class DeliveryAttemptView(BaseModel):
    attempt: int
    started_at: datetime
    status: int | None
    error: str | None
    elapsed_ms: int | None


class DeliveryView(BaseModel):
    delivery_id: UUID
    event_id: UUID
    event_type: str
    state: DeliveryState
    attempts: int
    replays: int
    next_attempt_at: datetime | None
    last_status: int | None
    last_error: str | None
    created_at: datetime
    delivered_at: datetime | None
    history: list[DeliveryAttemptView]


class DeliveryList(BaseModel):
    items: list[DeliveryView]


class ReplayResult(BaseModel):
    replayed: list[UUID]


def list_deliveries(db: Database, tenant_id: UUID, endpoint_id: UUID, limit: int) -> DeliveryList:
    with db.transaction(tenant_id) as conn:
        endpoint = conn.execute(
            db.q.get_endpoint, {"tenant_id": tenant_id, "endpoint_id": endpoint_id}
        ).fetchone()
        if endpoint is None:
            raise NotFound(f"no webhook endpoint {endpoint_id}")
        rows = conn.execute(
            db.q.list_endpoint_deliveries,
            {"tenant_id": tenant_id, "endpoint_id": endpoint_id, "limit": limit},
        ).fetchall()
    return DeliveryList(items=[DeliveryView.model_validate(r) for r in rows])


def _start_all(starter: DeliveryStarter, rows: list[dict[str, Any]]) -> ReplayResult:
    for row in rows:
        starter.start(row["delivery_id"], execution_name(row["delivery_id"], row["replays"], row["restarts"]))
    return ReplayResult(replayed=[row["delivery_id"] for row in rows])


@dataclass(frozen=True)
class ReplayDeps:
    db: Database
    clock: Clock
    starter: DeliveryStarter


def replay_delivery(deps: ReplayDeps, tenant_id: UUID, endpoint_id: UUID, delivery_id: UUID) -> ReplayResult:
    """Sends one delivery again, with the same webhook-id; the receiver's deduplication sees a repeat."""
    db, clock, starter = deps.db, deps.clock, deps.starter
    # reopen_delivery takes a delivery in any state: a replay sends even a delivered one again.
    checked_transition(frozenset(DeliveryState), DeliveryState.PENDING)
    with db.transaction(tenant_id) as conn:
        rows = conn.execute(
            db.q.reopen_delivery,
            {
                "tenant_id": tenant_id,
                "endpoint_id": endpoint_id,
                "delivery_id": delivery_id,
                "now": clock.now(),
            },
        ).fetchall()
    if not rows:
        raise NotFound(f"no delivery {delivery_id} for endpoint {endpoint_id}")
    return _start_all(starter, rows)


def replay_failed_since(
    deps: ReplayDeps, tenant_id: UUID, endpoint_id: UUID, since: datetime
) -> ReplayResult:
    """Sends again every delivery to this endpoint that gave up since ``since``."""
    db, clock, starter = deps.db, deps.clock, deps.starter
    checked_transition(DeliveryState.FAILED, DeliveryState.PENDING)
    with db.transaction(tenant_id) as conn:
        if (
            conn.execute(db.q.get_endpoint, {"tenant_id": tenant_id, "endpoint_id": endpoint_id}).fetchone()
            is None
        ):
            raise NotFound(f"no webhook endpoint {endpoint_id}")
        rows = conn.execute(
            db.q.reopen_failed_deliveries_since,
            {"tenant_id": tenant_id, "endpoint_id": endpoint_id, "since": since, "now": clock.now()},
        ).fetchall()
    return _start_all(starter, rows)
