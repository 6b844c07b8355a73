"""Webhook delivery states and the one table of allowed transitions; mirrors the CHECK constraint on
webhook_deliveries (migrations/0005_webhooks.sql)."""

from __future__ import annotations

from enum import StrEnum


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


def can_transition(source: DeliveryState, target: DeliveryState) -> bool:
    return target in TRANSITIONS[source]


class IllegalDeliveryTransition(ValueError):
    """A use case asked for a delivery state change the table does not have: a bug, never a user's error."""


def checked_transition(
    sources: DeliveryState | frozenset[DeliveryState], target: DeliveryState
) -> DeliveryState:
    """``target``, once every state in ``sources`` may move to it; raises otherwise. The delivery code calls
    it with the states its SQL moves a delivery from and the state it writes, before writing."""
    for source in (sources,) if isinstance(sources, DeliveryState) else sorted(sources):
        if not can_transition(source, target):
            raise IllegalDeliveryTransition(f"a delivery cannot go from {source} to {target}")
    return target
