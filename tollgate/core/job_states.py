"""Job states and the one table of allowed transitions; mirrors the CHECK constraint on extraction_jobs.

Two sets name what a state means to the rest of the system:
- finished: the pipeline is done with the job. No lease, a finish time, nothing counted as work (admission,
  the run-queues, the backlog): SUCCEEDED, REVIEW_REQUIRED, REJECTED, FAILED_TERMINAL, CANCELLED.
- final: the job never changes again (except by an audited redrive of a failure). Every finished state but
  REVIEW_REQUIRED, which waits for a reviewer's decision.
"""

from __future__ import annotations

from enum import StrEnum

from tollgate.core.state_machine import IllegalTransition, StateMachine

__all__ = [
    "CANCELLABLE_STATES",
    "FINAL_STATES",
    "FINISHED_STATES",
    "REVIEW_OUTCOMES",
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
    REJECTED = "REJECTED"
    RETRY_SCHEDULED = "RETRY_SCHEDULED"
    FAILED_TERMINAL = "FAILED_TERMINAL"
    CANCELLED = "CANCELLED"

    @property
    def is_finished(self) -> bool:
        """The pipeline is done with it: it has a finish time and is no one's work any more."""
        return self in FINISHED_STATES

    @property
    def is_final(self) -> bool:
        """It never changes again (save an audited redrive of a failure)."""
        return self in FINAL_STATES


FINAL_STATES = frozenset(
    {JobState.SUCCEEDED, JobState.REJECTED, JobState.FAILED_TERMINAL, JobState.CANCELLED}
)
# A job waiting for a reviewer: finished for the pipeline, not final.
FINISHED_STATES = FINAL_STATES | {JobState.REVIEW_REQUIRED}
UNFINISHED_STATES = frozenset(JobState) - FINISHED_STATES

# Final states never change again, except by an audited redrive (support CLI), which is not a transition
# of the state machine but a new attempt budget recorded with who and why.
TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    # A job still waiting when its deadline passes ends FAILED_TERMINAL (the scheduler), never having run.
    JobState.READY: frozenset({JobState.RUNNING, JobState.CANCELLED, JobState.FAILED_TERMINAL}),
    # CANCELLED only while the job waits in a provider batch (the batch path): an immediate call is minutes.
    JobState.RUNNING: frozenset(
        {
            JobState.SUCCEEDED,
            JobState.REVIEW_REQUIRED,
            JobState.RETRY_SCHEDULED,
            JobState.FAILED_TERMINAL,
            JobState.CANCELLED,
        }
    ),
    JobState.RETRY_SCHEDULED: frozenset({JobState.RUNNING, JobState.CANCELLED, JobState.FAILED_TERMINAL}),
    # Only a reviewer's decision leaves REVIEW_REQUIRED (tollgate.review): approved or corrected and
    # re-validated, or rejected. No deadline, lease or retry applies to a job waiting here.
    JobState.REVIEW_REQUIRED: frozenset({JobState.SUCCEEDED, JobState.REJECTED}),
    JobState.SUCCEEDED: frozenset(),
    JobState.REJECTED: frozenset(),
    JobState.FAILED_TERMINAL: frozenset(),
    JobState.CANCELLED: frozenset(),
}

CANCELLABLE_STATES = frozenset(s for s, targets in TRANSITIONS.items() if JobState.CANCELLED in targets)
# Where a reviewer's decision takes a job.
REVIEW_OUTCOMES = TRANSITIONS[JobState.REVIEW_REQUIRED]

JOB_STATE_MACHINE = StateMachine("job", TRANSITIONS)
can_transition = JOB_STATE_MACHINE.can_transition
checked_transition = JOB_STATE_MACHINE.checked_transition
