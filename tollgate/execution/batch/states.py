"""A provider batch's states and the one table of allowed transitions; mirrors the CHECK constraint on
provider_batches (migration 0019), and maps the provider's own statuses onto them."""

from __future__ import annotations

from enum import StrEnum

from tollgate.core.state_machine import StateMachine
from tollgate.execution.llm.batch_api import BatchStatus


class BatchState(StrEnum):
    PREPARING = "preparing"  # jobs claimed, the file being written, uploaded and the batch created
    SUBMITTED = "submitted"  # the provider took it and is validating it
    IN_PROGRESS = "in_progress"  # the provider is running it
    COMPLETED = "completed"
    EXPIRED = "expired"  # the completion window passed first: some lines may have answers, the rest none
    FAILED = "failed"  # the provider refused the file, or the batch never reached it
    CANCELLED = "cancelled"

    @property
    def ended(self) -> bool:
        """The provider is done with it: what it answered can be downloaded and committed."""
        return self in ENDED_STATES


ENDED_STATES = frozenset({BatchState.COMPLETED, BatchState.EXPIRED, BatchState.FAILED, BatchState.CANCELLED})

TRANSITIONS: dict[BatchState, frozenset[BatchState]] = {
    # A batch that never reached the provider (its batcher died before create, or it was refused) fails.
    BatchState.PREPARING: frozenset({BatchState.SUBMITTED, BatchState.FAILED}),
    # The provider may end a batch from any of its states; ours follow it, skipping what we did not see.
    BatchState.SUBMITTED: frozenset({BatchState.IN_PROGRESS} | ENDED_STATES),
    BatchState.IN_PROGRESS: ENDED_STATES,
    BatchState.COMPLETED: frozenset(),
    BatchState.EXPIRED: frozenset(),
    BatchState.FAILED: frozenset(),
    BatchState.CANCELLED: frozenset(),
}

BATCH_STATE_MACHINE = StateMachine("batch", TRANSITIONS)

# What each provider status means here. Finalizing and cancelling are still running: lines may yet be
# answered, so nothing is downloaded until the provider ends the batch.
_FROM_PROVIDER = {
    BatchStatus.VALIDATING: BatchState.SUBMITTED,
    BatchStatus.IN_PROGRESS: BatchState.IN_PROGRESS,
    BatchStatus.FINALIZING: BatchState.IN_PROGRESS,
    BatchStatus.CANCELLING: BatchState.IN_PROGRESS,
    BatchStatus.COMPLETED: BatchState.COMPLETED,
    BatchStatus.EXPIRED: BatchState.EXPIRED,
    BatchStatus.FAILED: BatchState.FAILED,
    BatchStatus.CANCELLED: BatchState.CANCELLED,
}


def state_of(status: BatchStatus) -> BatchState:
    return _FROM_PROVIDER[status]


def next_state(current: BatchState, status: BatchStatus) -> BatchState:
    """The state a batch in ``current`` takes when the provider reports ``status``: never backwards (an older
    answer read late leaves the state as it is)."""
    target = state_of(status)
    if target == current or not BATCH_STATE_MACHINE.can_transition(current, target):
        return current
    return target
