"""The job state machine: terminal states are final, cancellation only before work or between tries."""

import pytest

from tollgate.core.job_states import (
    CANCELLABLE_STATES,
    TERMINAL_STATES,
    TRANSITIONS,
    IllegalTransition,
    JobState,
    can_transition,
    checked_transition,
)


def test_terminal_states_have_no_way_out():
    for state in TERMINAL_STATES:
        assert TRANSITIONS[state] == frozenset()
        assert state.is_terminal


def test_every_state_has_a_row_in_the_transition_table():
    assert set(TRANSITIONS) == set(JobState)


def test_only_ready_and_retry_scheduled_jobs_can_be_cancelled():
    assert frozenset({JobState.READY, JobState.RETRY_SCHEDULED}) == CANCELLABLE_STATES
    assert not can_transition(JobState.RUNNING, JobState.CANCELLED)


def test_running_is_the_only_way_to_a_result():
    for state in (JobState.SUCCEEDED, JobState.REVIEW_REQUIRED):
        sources = {s for s, targets in TRANSITIONS.items() if state in targets}
        assert sources == {JobState.RUNNING}


def test_a_job_that_waited_past_its_deadline_can_fail_without_having_run():
    # The scheduler's deadline expiry moves READY and RETRY_SCHEDULED jobs to FAILED_TERMINAL directly.
    assert can_transition(JobState.READY, JobState.FAILED_TERMINAL)
    assert can_transition(JobState.RETRY_SCHEDULED, JobState.FAILED_TERMINAL)


def test_a_checked_transition_is_refused_when_any_of_its_sources_cannot_make_it():
    with pytest.raises(IllegalTransition, match="from RUNNING to CANCELLED"):
        checked_transition(frozenset({JobState.READY, JobState.RUNNING}), JobState.CANCELLED)
    assert checked_transition(CANCELLABLE_STATES, JobState.CANCELLED) is JobState.CANCELLED
