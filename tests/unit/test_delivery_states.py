"""The webhook delivery state machine: only an attempt of a PENDING delivery ends it, and a replay brings any
delivery back to PENDING."""

import re

import pytest

from tollgate.db import load_queries
from tollgate.delivery.states import (
    TRANSITIONS,
    DeliveryState,
    IllegalTransition,
    can_transition,
    checked_transition,
)

OUTCOMES = frozenset({DeliveryState.DELIVERED, DeliveryState.FAILED, DeliveryState.ENDPOINT_DISABLED})


def test_every_state_has_a_row_in_the_transition_table():
    assert set(TRANSITIONS) == set(DeliveryState)


def test_only_a_pending_delivery_reaches_an_outcome():
    for outcome in OUTCOMES:
        sources = {s for s, targets in TRANSITIONS.items() if outcome in targets}
        assert sources == {DeliveryState.PENDING}


def test_a_replay_brings_every_state_back_to_pending():
    for state in DeliveryState:
        assert can_transition(state, DeliveryState.PENDING)


def test_a_delivered_delivery_cannot_be_marked_failed():
    with pytest.raises(IllegalTransition, match="DELIVERED to FAILED"):
        checked_transition(DeliveryState.DELIVERED, DeliveryState.FAILED)


def test_checked_transition_refuses_when_any_source_cannot_move():
    with pytest.raises(IllegalTransition):
        checked_transition(frozenset(DeliveryState), DeliveryState.DELIVERED)
    assert checked_transition(frozenset(DeliveryState), DeliveryState.PENDING) is DeliveryState.PENDING


def test_the_states_the_delivery_queries_name_are_delivery_states():
    q = load_queries()
    named = {
        literal
        for name in q.names()
        if "webhook_deliveries" in getattr(q, name)
        # "state = 'X'", and "%(state)s = 'X'" where a query compares the state it is given.
        for literal in re.findall(r"\bstate(?:\)s)?\s*=\s*'([A-Z_]+)'", getattr(q, name))
    }
    # Both sides of the check: the queries do name states (PENDING, FAILED, DELIVERED), all of them known.
    assert {DeliveryState.PENDING, DeliveryState.FAILED, DeliveryState.DELIVERED} <= named
    assert named <= set(DeliveryState)
