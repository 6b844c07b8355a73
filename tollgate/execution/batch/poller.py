"""The poller: follows every open provider batch from PostgreSQL, and settles each one the provider ended.

A poller takes the batches whose time to be looked at has come and that no live holder has (``take_due``),
so any number of workers can poll and a batch is worked on by one at a time; a holder that dies leaves its
batches to the next poller once its hold runs out. What it does with a batch depends on its state:
- preparing (its batcher died): the provider is asked for a batch carrying this batch's id in its metadata.
  One created before the crash is adopted and followed; otherwise the batch never reached the provider, so
  it ends failed and its jobs go back at once.
- submitted or in progress: the provider's status is read; a batch still running is looked at again later.
- ended (completed, expired, failed, cancelled): settled. Each line of the output and error files is
  committed under the fence it was written with, exactly as an immediate attempt's answer; a line whose job
  moved on (cancelled, reaped) is discarded and its cost kept; a line the provider never ran (the batch
  expired or was cancelled first) gives its job back; and every job left without a line goes back too, so
  none waits for a lease to run out. Each member's settle commits with its outcome, so a poller killed
  mid-download leaves exactly the members not yet settled to the next one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any
from uuid import UUID

from aws_lambda_powertools import Logger
from psycopg.types.json import Jsonb

from tollgate.core import checkpoints
from tollgate.core.checkpoints import BATCH_LINE_COMMITTED
from tollgate.core.documents import DocumentStoreUnreachable
from tollgate.core.errors import DocumentUnavailable
from tollgate.core.job_states import JobState, checked_transition
from tollgate.core.metrics import BATCH_JOBS_RETURNED, BATCH_LINES_COMMITTED, BATCHES_ENDED, BATCHES_SUBMITTED
from tollgate.execution.attempt import (
    AttemptEnd,
    AttemptReport,
    BatchLine,
    finish_batch_line,
    load_pages,
    task_of,
)
from tollgate.execution.batch.deps import BatchDeps
from tollgate.execution.batch.states import BATCH_STATE_MACHINE, BatchState, next_state
from tollgate.execution.leasing import ClaimedJob
from tollgate.execution.limiter.base import LimiterUnavailable
from tollgate.execution.llm.batch_api import (
    BatchApiError,
    CustomId,
    ProviderBatch,
    line_result,
    parse_output_line,
)
from tollgate.execution.llm.client import LlmResult, OutcomeClass

logger = Logger(service="tollgate-worker", child=True)

# The provider's metadata key that names our batch id: how a batch created but never recorded is found again.
METADATA_KEY = "tollgate_batch_id"
# Batches one poll takes at once, and members returned per transaction.
BATCHES_PER_POLL = 8
MEMBERS_PER_PAGE = 200
# Lines settled between renewals of the hold on a batch being settled.
LINES_PER_HOLD = 200
# How far before our record of a batch its provider twin may have been created (clock skew between them).
CREATED_SKEW = timedelta(minutes=10)
_FIRST_JOB = UUID(int=0)


@dataclass
class PollReport:
    """What one poll did: batches looked at, adopted after a crash, ended and settled; lines committed."""

    looked_at: int = 0
    adopted: int = 0
    ended: int = 0
    settled: int = 0
    lines: int = 0
    returned: int = 0
    states: dict[str, int] = field(default_factory=dict)


def poll_batches(
    deps: BatchDeps, *, limit: int = BATCHES_PER_POLL, stopping: Callable[[], bool] = lambda: False
) -> PollReport:
    """One pass over the batches due now. Blocking (provider calls, downloads, commits): the worker runs it on
    a thread. ``stopping`` ends a long settle between lines; the rest of it is the next holder's."""
    report = PollReport()
    execution = deps.execution
    now = execution.clock.now()
    with execution.db.transaction() as conn:
        rows = conn.execute(
            execution.db.q.take_due_batches,
            {
                "now": now,
                "limit": limit,
                "holder": execution.worker_id,
                "held_until": now + timedelta(seconds=deps.config.hold_seconds),
            },
        ).fetchall()
    for row in rows:
        report.looked_at += 1
        state = BatchState(row["state"])
        try:
            if state is BatchState.PREPARING:
                state = _recover(deps, row, report)
            elif not state.ended:
                state = _follow(deps, row, report)
            if state.ended:
                _settle(deps, row, state, report, stopping)
        except (BatchApiError, DocumentStoreUnreachable) as error:
            # The provider or the documents did not answer: look again after a poll interval.
            logger.warning(
                "batch poll deferred", extra={"batch_id": str(row["batch_id"]), "error": str(error)}
            )
            _note_progress(deps, row["batch_id"], state)
        report.states[state.value] = report.states.get(state.value, 0) + 1
    return report


def _recover(deps: BatchDeps, row: dict[str, Any], report: PollReport) -> BatchState:
    """A batch left 'preparing' by a batcher that died: adopt its provider twin, or fail it and return its
    jobs."""
    twin = deps.api.find(METADATA_KEY, str(row["batch_id"]), created_after=row["created_at"] - CREATED_SKEW)
    if twin is not None:
        if record_submitted(deps, row["batch_id"], twin, holder=deps.execution.worker_id):
            report.adopted += 1
            logger.info("adopted a batch created before a crash", extra={"batch_id": str(row["batch_id"])})
            # Its batcher died before counting it: the provider took it all the same.
            deps.execution.metrics.count(BATCHES_SUBMITTED)
            return BatchState.SUBMITTED
        return BatchState.PREPARING  # someone else moved it on; nothing of ours to do
    logger.warning(
        "a batch never reached the provider; its jobs go back", extra={"batch_id": str(row["batch_id"])}
    )
    return fail_unsubmitted(deps, row["batch_id"], "never_submitted", holder=deps.execution.worker_id)


def record_submitted(deps: BatchDeps, batch_id: UUID, provider: ProviderBatch, *, holder: str) -> bool:
    """The provider took the batch: its id is kept and pollers follow it. False when ``holder`` no longer
    holds the batch (a recovering poller moved it on)."""
    execution = deps.execution
    now = execution.clock.now()
    BATCH_STATE_MACHINE.checked_transition(BatchState.PREPARING, BatchState.SUBMITTED)
    with execution.db.transaction() as conn:
        recorded = conn.execute(
            execution.db.q.record_batch_submitted,
            {
                "batch_id": batch_id,
                "holder": holder,
                "provider_batch_id": provider.id,
                "input_file_id": provider.input_file_id,
                "now": now,
                "window_ends_at": provider.created_at + timedelta(seconds=deps.config.window_seconds),
                "next_poll_at": now + timedelta(seconds=deps.config.poll_seconds),
            },
        ).fetchone()
    return recorded is not None


def fail_unsubmitted(deps: BatchDeps, batch_id: UUID, reason: str, *, holder: str) -> BatchState:
    """Ends a batch that never reached the provider as failed, gives its jobs back at once and settles it.
    Only while ``holder`` holds it still."""
    execution = deps.execution
    BATCH_STATE_MACHINE.checked_transition(BatchState.PREPARING, BatchState.FAILED)
    with execution.db.transaction() as conn:
        failed = conn.execute(
            execution.db.q.fail_unsubmitted_batch,
            {
                "batch_id": batch_id,
                "holder": holder,
                "now": execution.clock.now(),
                "error": Jsonb({"reason": reason}),
            },
        ).fetchone()
    if failed is None:
        return BatchState.PREPARING
    execution.metrics.count(BATCHES_ENDED[BatchState.FAILED.value])
    return_unsettled(deps, batch_id, reason)
    _finish_settle(deps, batch_id, holder)
    return BatchState.FAILED


def _follow(deps: BatchDeps, row: dict[str, Any], report: PollReport) -> BatchState:
    provider = deps.api.retrieve(row["provider_batch_id"])
    current = BatchState(row["state"])
    state = next_state(current, provider.status)
    if not state.ended:
        _note_progress(deps, row["batch_id"], state)
        return state
    execution = deps.execution
    with execution.db.transaction() as conn:
        ended = conn.execute(
            execution.db.q.end_provider_batch,
            {
                "batch_id": row["batch_id"],
                "holder": execution.worker_id,
                "state": state.value,
                "output_file_id": provider.output_file_id,
                "error_file_id": provider.error_file_id,
                "now": execution.clock.now(),
                "error": Jsonb({"errors": list(provider.errors)}) if provider.errors else None,
            },
        ).fetchone()
    if ended is None:
        return current  # another poller took the batch over meanwhile: it is theirs to settle
    row.update(output_file_id=provider.output_file_id, error_file_id=provider.error_file_id)
    report.ended += 1
    execution.metrics.count(BATCHES_ENDED[state.value])
    logger.info(
        "batch ended",
        extra={
            "batch_id": str(row["batch_id"]),
            "state": state.value,
            "completed": provider.completed,
            "failed": provider.failed,
        },
    )
    return state


def _note_progress(deps: BatchDeps, batch_id: UUID, state: BatchState) -> None:
    execution = deps.execution
    now = execution.clock.now()
    with execution.db.transaction() as conn:
        conn.execute(
            execution.db.q.note_batch_progress,
            {
                "batch_id": batch_id,
                "holder": execution.worker_id,
                "state": state.value,
                "next_poll_at": now + timedelta(seconds=deps.config.poll_seconds),
            },
        )


def _settle(
    deps: BatchDeps,
    row: dict[str, Any],
    state: BatchState,
    report: PollReport,
    stopping: Callable[[], bool],
) -> None:
    line = BatchLine(row["batch_id"], deps.config.price_factor)
    seen = 0
    for file_id in (row["output_file_id"], row["error_file_id"]):
        if file_id is None:
            continue
        for raw in deps.api.lines(file_id):
            if stopping():
                return  # the hold runs out and the next poller resumes from the members not yet settled
            if _settle_line(deps, row, raw, line):
                report.lines += 1
                checkpoints.reached(BATCH_LINE_COMMITTED)
            seen += 1
            if seen % LINES_PER_HOLD == 0:
                renew_hold(deps, row["batch_id"], holder=deps.execution.worker_id)
    report.returned += return_unsettled(deps, row["batch_id"], f"batch_{state.value}")
    if _finish_settle(deps, row["batch_id"], deps.execution.worker_id):
        report.settled += 1


def _settle_line(deps: BatchDeps, row: dict[str, Any], raw: bytes, line: BatchLine) -> bool:
    """Commits one line's outcome; False for a line already settled (a re-download) or not of this batch."""
    execution = deps.execution
    try:
        output = parse_output_line(raw)
        custom_id = CustomId.parse(output.custom_id)
    except ValueError as error:
        logger.error(
            "a batch line could not be read", extra={"batch_id": str(row["batch_id"]), "error": str(error)}
        )
        return False
    with execution.db.transaction() as conn:
        member = conn.execute(
            execution.db.q.batch_member, {"batch_id": row["batch_id"], "job_id": custom_id.job_id}
        ).fetchone()
    if member is None or member["settled_at"] is not None:
        return False
    if (member["attempt"], member["fence"]) != (custom_id.attempt, custom_id.fence):
        logger.error("a batch line names another attempt of its job", extra={"custom_id": str(custom_id)})
        return False
    job = _member_job(member)
    if output.never_ran:
        return_member(deps, row["batch_id"], job.job_id, job.fence, f"batch_{output.error_code}")
        return True
    try:
        pages = load_pages(execution, job)
    except DocumentUnavailable as error:
        # The answer cannot be checked against a document that is gone: the job ends as it would have.
        result = LlmResult(OutcomeClass.DOCUMENT_UNAVAILABLE, row["model"], error=str(error))
        _count_line(
            deps, finish_batch_line(execution, job, task_of(job, ()), result, routed=row["model"], line=line)
        )
        return True
    task = task_of(job, pages)
    result = line_result(output, task.job_type, row["model"])
    _count_line(deps, finish_batch_line(execution, job, task, result, routed=row["model"], line=line))
    return True


def _count_line(deps: BatchDeps, finished: AttemptReport) -> None:
    """A line whose job moved on (cancelled, reaped) was discarded, not committed."""
    if finished.end is not AttemptEnd.LOST:
        deps.execution.metrics.count(BATCH_LINES_COMMITTED)


def _member_job(member: dict[str, Any]) -> ClaimedJob:
    """The job as its batch claim held it: the attempt and fence its line was written with."""
    return ClaimedJob(
        job_id=member["job_id"],
        tenant_id=member["tenant_id"],
        attempt=member["attempt"],
        max_attempts=member["max_attempts"],
        fence=member["fence"],
        deadline_at=member["deadline_at"],
        document_id=member["document_id"],
        model_policy=member["model_policy"],
        estimated_tokens=member["estimated_tokens"],
        trace_context=member["trace_context"],
        state_version=member["state_version"],
        job_type=member["job_type"],
        options=member["options"],
        model_escalated=member["model_escalated"],
        service_tier=member["service_tier"],
        batch_offers=member["batch_offers"],
    )


def return_member(deps: BatchDeps, batch_id: UUID, job_id: UUID, fence: int, reason: str) -> bool:
    """A member whose line never ran goes back at once under a new fence (or is noted as moved on, when its
    job left the batch already), its open attempt closed, in one transaction. True when it was returned."""
    execution = deps.execution
    now = execution.clock.now()
    checked_transition(JobState.RUNNING, JobState.RETRY_SCHEDULED)
    with execution.db.transaction() as conn:
        returned = conn.execute(
            execution.db.q.return_batch_job,
            {"job_id": job_id, "fence": fence, "now": now, "error": Jsonb({"reason": reason})},
        ).fetchone()
        conn.execute(
            execution.db.q.close_open_attempt,
            {"job_id": job_id, "fence": fence, "now": now, "outcome": reason},
        )
        conn.execute(
            execution.db.q.settle_batch_member,
            {
                "batch_id": batch_id,
                "job_id": job_id,
                "now": now,
                "outcome": "returned" if returned is not None else "moved_on",
            },
        )
    if returned is not None:
        execution.metrics.count(BATCH_JOBS_RETURNED)
    return returned is not None


def return_unsettled(deps: BatchDeps, batch_id: UUID, reason: str) -> int:
    """Every member still without an outcome goes back (or is noted as moved on): the jobs a failed, expired
    or cancelled batch never answered, and any line missing from a completed one."""
    execution = deps.execution
    returned = 0
    after = _FIRST_JOB
    while True:
        with execution.db.transaction() as conn:
            members = conn.execute(
                execution.db.q.unsettled_batch_members,
                {"batch_id": batch_id, "after_job_id": after, "limit": MEMBERS_PER_PAGE},
            ).fetchall()
        for member in members:
            returned += return_member(deps, batch_id, member["job_id"], member["fence"], reason)
        if len(members) < MEMBERS_PER_PAGE:
            return returned
        after = members[-1]["job_id"]


def _finish_settle(deps: BatchDeps, batch_id: UUID, holder: str) -> bool:
    """The batch is done with once every member has its outcome and its enqueued tokens are back in the Batch
    API's budget. The budget goes first: a settled batch leaves the pollers' index, so a release that failed
    after the settle would never be tried again and the tokens would stay held until their expiry, a day
    later. The provider has ended the batch by now, so nothing of it is enqueued any more."""
    if not release_budget(deps, batch_id):
        return False  # the hold runs out and the next poll settles it, releasing again
    execution = deps.execution
    with execution.db.transaction() as conn:
        settled = conn.execute(
            execution.db.q.settle_provider_batch,
            {"batch_id": batch_id, "holder": holder, "now": execution.clock.now()},
        ).fetchone()
    return settled is not None


def provider_batch_id(deps: BatchDeps, batch_id: UUID) -> str | None:
    """The provider's id recorded for ``batch_id``, if any."""
    execution = deps.execution
    with execution.db.transaction() as conn:
        row = conn.execute(execution.db.q.get_provider_batch, {"batch_id": batch_id}).fetchone()
    return None if row is None else row["provider_batch_id"]


def release_budget(deps: BatchDeps, batch_id: UUID) -> bool:
    """Gives the batch's enqueued tokens back to the Batch API's pool. Idempotent. False when the budget's
    table did not answer: the caller releases again later (a settle waits for it), or the holding runs out
    on its own at its expiry."""
    with_model = _batch_model(deps, batch_id)
    if with_model is None:
        return True
    try:
        deps.pool.release(deps.execution.provider_pool, with_model, str(batch_id))
    except LimiterUnavailable:
        logger.warning("batch budget not returned yet", extra={"batch_id": str(batch_id)})
        return False
    return True


def _batch_model(deps: BatchDeps, batch_id: UUID) -> str | None:
    execution = deps.execution
    with execution.db.transaction() as conn:
        row = conn.execute(execution.db.q.get_provider_batch, {"batch_id": batch_id}).fetchone()
    return None if row is None else str(row["model"])


def renew_hold(deps: BatchDeps, batch_id: UUID, seconds: float | None = None, *, holder: str) -> bool:
    """The holder is still at work on ``batch_id`` for ``seconds`` more (the configured hold by default; 0
    hands it to the next poller at once); False once another worker has taken it over."""
    execution = deps.execution
    hold = deps.config.hold_seconds if seconds is None else seconds
    with execution.db.transaction() as conn:
        held = conn.execute(
            execution.db.q.hold_provider_batch,
            {
                "batch_id": batch_id,
                "holder": holder,
                "held_until": execution.clock.now() + timedelta(seconds=hold),
            },
        ).fetchone()
    return held is not None
