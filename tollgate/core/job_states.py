"""Job states and the one table of allowed transitions; mirrors the CHECK constraint on extraction_jobs."""

from __future__ import annotations

from enum import StrEnum


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


def can_transition(source: JobState, target: JobState) -> bool:
    return target in TRANSITIONS[source]


class IllegalTransition(ValueError):
    """A use case asked for a state change the state machine does not have: a bug, never a user's error."""


def checked_transition(sources: JobState | frozenset[JobState], target: JobState) -> JobState:
    """``target``, once every state in ``sources`` may move to it; raises ``IllegalTransition`` otherwise.

    Each use case that changes a job's state calls this with the states its SQL moves the job from (the
    query's ``WHERE state ...``) and the state it writes, before running the query.
    """
    for source in (sources,) if isinstance(sources, JobState) else sorted(sources):
        if not can_transition(source, target):
            raise IllegalTransition(f"a job cannot go from {source} to {target}")
    return target
