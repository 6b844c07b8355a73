"""The job state machine: final states are final, a result waiting for review leaves only by a decision,
cancellation only before work or between tries."""

import pytest

from tollgate.core.job_states import (
    CANCELLABLE_STATES,
    FINAL_STATES,
    FINISHED_STATES,
    REVIEW_OUTCOMES,
    TRANSITIONS,
    UNFINISHED_STATES,
    IllegalTransition,
    JobState,
    can_transition,
    checked_transition,
)


def test_final_states_have_no_way_out():
    for state in FINAL_STATES:
        assert TRANSITIONS[state] == frozenset()
        assert state.is_final and state.is_finished


def test_a_result_waiting_for_review_is_finished_but_not_final():
    review = JobState.REVIEW_REQUIRED
    assert review.is_finished and not review.is_final
    assert review not in UNFINISHED_STATES, "a waiting review is nobody's work: not counted as backlog"
    assert FINAL_STATES | {review} == FINISHED_STATES


def test_a_review_ends_approved_or_rejected_and_nothing_else_leaves_it():
    assert frozenset({JobState.SUCCEEDED, JobState.REJECTED}) == REVIEW_OUTCOMES
    for target in JobState:
        assert can_transition(JobState.REVIEW_REQUIRED, target) is (target in REVIEW_OUTCOMES)
    # No deadline, lease or cancellation reaches a job waiting for a reviewer.
    for other in (JobState.FAILED_TERMINAL, JobState.CANCELLED, JobState.RUNNING, JobState.READY):
        with pytest.raises(IllegalTransition):
            checked_transition(JobState.REVIEW_REQUIRED, other)


def test_rejected_is_reached_only_from_review():
    sources = {s for s, targets in TRANSITIONS.items() if JobState.REJECTED in targets}
    assert sources == {JobState.REVIEW_REQUIRED}


def test_every_state_has_a_row_in_the_transition_table():
    assert set(TRANSITIONS) == set(JobState)


def test_unfinished_states_are_the_ones_workers_and_admission_count():
    assert frozenset({JobState.READY, JobState.RUNNING, JobState.RETRY_SCHEDULED}) == UNFINISHED_STATES


def test_waiting_jobs_and_running_ones_can_be_cancelled_but_no_finished_one():
    # RUNNING only while waiting in a provider batch: the cancel's SQL holds that condition.
    assert frozenset({JobState.READY, JobState.RETRY_SCHEDULED, JobState.RUNNING}) == CANCELLABLE_STATES
    assert not any(can_transition(state, JobState.CANCELLED) for state in FINISHED_STATES)


def test_running_is_the_only_way_to_a_model_result_and_review_the_only_other_way_to_success():
    assert {s for s, targets in TRANSITIONS.items() if JobState.REVIEW_REQUIRED in targets} == {
        JobState.RUNNING
    }
    assert {s for s, targets in TRANSITIONS.items() if JobState.SUCCEEDED in targets} == {
        JobState.RUNNING,
        JobState.REVIEW_REQUIRED,
    }


def test_a_job_that_waited_past_its_deadline_can_fail_without_having_run():
    # The scheduler's deadline expiry moves READY and RETRY_SCHEDULED jobs to FAILED_TERMINAL directly.
    assert can_transition(JobState.READY, JobState.FAILED_TERMINAL)
    assert can_transition(JobState.RETRY_SCHEDULED, JobState.FAILED_TERMINAL)


def test_a_checked_transition_is_refused_when_any_of_its_sources_cannot_make_it():
    with pytest.raises(IllegalTransition, match="from SUCCEEDED to CANCELLED"):
        checked_transition(frozenset({JobState.READY, JobState.SUCCEEDED}), JobState.CANCELLED)
    assert checked_transition(CANCELLABLE_STATES, JobState.CANCELLED) is JobState.CANCELLED
