"""Webhook delivery states and the one table of allowed transitions; mirrors the CHECK constraint on
webhook_deliveries (migrations/0005_webhooks.sql)."""

from __future__ import annotations

from enum import StrEnum

from tollgate.core.state_machine import IllegalTransition, StateMachine

__all__ = ["TRANSITIONS", "DeliveryState", "IllegalTransition", "can_transition", "checked_transition"]


class DeliveryState(StrEnum):
    PENDING = "PENDING"
    DELIVERED = "DELIVERED"
    FAILED = "FAILED"
    ENDPOINT_DISABLED = "ENDPOINT_DISABLED"


# Only PENDING is ever attempted; every other state is where an execution stops. None of them is final:
# a tenant's (or support's) replay sends any delivery again under its webhook-id, so each returns to
# PENDING. A failed attempt with time left on the schedule stays PENDING, with its next attempt due.
TRANSITIONS: dict[DeliveryState, frozenset[DeliveryState]] = {
    DeliveryState.PENDING: frozenset(DeliveryState),
    DeliveryState.DELIVERED: frozenset({DeliveryState.PENDING}),
    DeliveryState.FAILED: frozenset({DeliveryState.PENDING}),
    DeliveryState.ENDPOINT_DISABLED: frozenset({DeliveryState.PENDING}),
}


DELIVERY_STATE_MACHINE = StateMachine("delivery", TRANSITIONS)
can_transition = DELIVERY_STATE_MACHINE.can_transition
checked_transition = DELIVERY_STATE_MACHINE.checked_transition
