"""Job states and the one table of allowed transitions; mirrors the CHECK constraint on extraction_jobs."""

from __future__ import annotations

from enum import StrEnum

from tollgate.core.state_machine import IllegalTransition, StateMachine

__all__ = [
    "CANCELLABLE_STATES",
    "TERMINAL_STATES",
    "TRANSITIONS",
    "UNFINISHED_STATES",
    "IllegalTransition",
    "JobState",
    "can_transition",
    "checked_transition",
]


class JobState(StrEnum):
    READY = "READY"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    REVIEW_REQUIRED = "REVIEW_REQUIRED"
    RETRY_SCHEDULED = "RETRY_SCHEDULED"
    FAILED_TERMINAL = "FAILED_TERMINAL"
    CANCELLED = "CANCELLED"

    @property
    def is_terminal(self) -> bool:
        return self in TERMINAL_STATES


TERMINAL_STATES = frozenset(
    {JobState.SUCCEEDED, JobState.REVIEW_REQUIRED, JobState.FAILED_TERMINAL, JobState.CANCELLED}
)
UNFINISHED_STATES = frozenset(JobState) - TERMINAL_STATES

# Terminal states never change again, except by an audited redrive (support CLI), which is not a transition
# of the state machine but a new attempt budget recorded with who and why.
TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    # A job still waiting when its deadline passes ends FAILED_TERMINAL (the scheduler), never having run.
    JobState.READY: frozenset({JobState.RUNNING, JobState.CANCELLED, JobState.FAILED_TERMINAL}),
    JobState.RUNNING: frozenset(
        {JobState.SUCCEEDED, JobState.REVIEW_REQUIRED, JobState.RETRY_SCHEDULED, JobState.FAILED_TERMINAL}
    ),
    JobState.RETRY_SCHEDULED: frozenset({JobState.RUNNING, JobState.CANCELLED, JobState.FAILED_TERMINAL}),
    JobState.SUCCEEDED: frozenset(),
    JobState.REVIEW_REQUIRED: frozenset(),
    JobState.FAILED_TERMINAL: frozenset(),
    JobState.CANCELLED: frozenset(),
}

CANCELLABLE_STATES = frozenset(s for s, targets in TRANSITIONS.items() if JobState.CANCELLED in targets)

JOB_STATE_MACHINE = StateMachine("job", TRANSITIONS)
can_transition = JOB_STATE_MACHINE.can_transition
checked_transition = JOB_STATE_MACHINE.checked_transition
