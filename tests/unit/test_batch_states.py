"""A provider batch's state machine: the provider's statuses map onto it, and an answer read late never moves a
batch backwards or out of an end it reached."""

import pytest

from tollgate.execution.batch.states import (
    BATCH_STATE_MACHINE,
    ENDED_STATES,
    TRANSITIONS,
    BatchState,
    next_state,
    state_of,
)
from tollgate.execution.llm.batch_api import BatchStatus


def test_every_provider_status_has_a_state_and_only_ends_are_ended():
    ended = {status for status in BatchStatus if state_of(status).ended}
    assert ended == {BatchStatus.COMPLETED, BatchStatus.EXPIRED, BatchStatus.FAILED, BatchStatus.CANCELLED}


def test_a_batch_is_followed_forward_to_its_end():
    state = BatchState.SUBMITTED
    for status in (BatchStatus.IN_PROGRESS, BatchStatus.FINALIZING, BatchStatus.COMPLETED):
        state = next_state(state, status)
    assert state is BatchState.COMPLETED


@pytest.mark.parametrize("late", list(BatchStatus))
def test_an_ended_batch_stays_as_it_ended_whatever_is_read_later(late):
    for ended in ENDED_STATES:
        assert next_state(ended, late) is ended


def test_a_running_batch_does_not_go_back_to_validating():
    assert next_state(BatchState.IN_PROGRESS, BatchStatus.VALIDATING) is BatchState.IN_PROGRESS


def test_only_a_preparing_batch_can_fail_without_the_provider_and_ends_are_final():
    assert BATCH_STATE_MACHINE.can_transition(BatchState.PREPARING, BatchState.FAILED)
    assert not BATCH_STATE_MACHINE.can_transition(BatchState.PREPARING, BatchState.COMPLETED)
    assert all(TRANSITIONS[state] == frozenset() for state in ENDED_STATES)
