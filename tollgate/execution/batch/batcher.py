"""The batcher: claims batch-tier jobs with the fair claim, writes their request lines into one file per
model, takes room for them in the Batch API's budget, uploads the file and creates the batch.

Each step is recorded in PostgreSQL before the next is taken (migration 0019), so a crash anywhere is
recovered by a poller: a job claimed but not yet in a batch is reaped when its short lease runs out; a batch
whose batcher died while preparing it is looked up at the provider by its id and adopted, or failed and its
jobs returned (poller.py); a batch created after it was given up is cancelled, and its lines could not be
committed anyway, their fences having moved.

A job is offered to the Batch API once, and only with time for the provider's whole completion window, the
settle and an immediate attempt after them before its deadline (``BatchConfig.offers``). Any other claimed
job (a retry of a failed line, one returned from an expired batch, a near deadline, a document that cannot be
read) is handed back to the caller to run now on the immediate path, like a slot's claim.
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass, field
from datetime import timedelta
from enum import StrEnum
from uuid import UUID

from aws_lambda_powertools import Logger

from tollgate.core import checkpoints
from tollgate.core.checkpoints import BATCH_AFTER_CREATE, BATCH_AFTER_UPLOAD
from tollgate.core.documents import DocumentStoreUnreachable
from tollgate.core.errors import DocumentUnavailable
from tollgate.core.metrics import BATCHES_SUBMITTED
from tollgate.core.tiers import ServiceTier
from tollgate.execution.attempt import load_pages, spend_refusal, task_of
from tollgate.execution.batch.deps import BatchDeps
from tollgate.execution.batch.poller import (
    METADATA_KEY,
    fail_unsubmitted,
    provider_batch_id,
    record_submitted,
    release_budget,
    renew_hold,
)
from tollgate.execution.leasing import ClaimedJob, claim_next_job
from tollgate.execution.limiter.base import LimiterUnavailable
from tollgate.execution.limiter.batch_pool import Enqueue, Enqueued
from tollgate.execution.llm.batch_api import BatchApiError, CustomId, request_line
from tollgate.jobtypes.base import Complexity

logger = Logger(service="tollgate-worker", child=True)

BATCH_TIER: ServiceTier = "batch"
# The longest wait between two asks for room in the Batch API's budget.
BUDGET_POLL_SECONDS = 30.0


@dataclass
class PreparedBatch:
    """One request file being written: its recorded batch, model, lines and the jobs they carry."""

    batch_id: UUID
    model: str
    lines: list[bytes] = field(default_factory=list)
    size: int = 0
    tokens: int = 0
    jobs: list[ClaimedJob] = field(default_factory=list)

    def fits(self, line: bytes, tokens: int, max_bytes: int, max_tokens: int) -> bool:
        """Whether one more line keeps the file within its bytes and the model's whole Batch API budget (a
        file larger than that could never be enqueued)."""
        return self.size + len(line) <= max_bytes and self.tokens + tokens <= max_tokens


@dataclass
class Round:
    """What one round of claims made: files to submit, and claimed jobs for the immediate path."""

    batches: list[PreparedBatch] = field(default_factory=list)
    immediate: list[ClaimedJob] = field(default_factory=list)

    @property
    def claimed(self) -> int:
        return len(self.immediate) + sum(len(b.jobs) for b in self.batches)


def batcher_holder(deps: BatchDeps) -> str:
    """The batcher's name as a batch's holder: not its worker's own, which that worker's poller uses, so a
    poller that takes over a batch its own process's batcher was too slow with is told apart from it."""
    return f"{deps.execution.worker_id}:batcher"


class _Lost(Exception):
    """The claimed job moved on before it joined its batch: the transaction that would join it is undone."""


def prepare_round(deps: BatchDeps, *, immediate_room: int) -> Round:
    """Claims batch-tier jobs one short transaction at a time, up to one file's worth, and stops early rather
    than claim more jobs for the immediate path than ``immediate_room`` (the caller has slots for them).
    Blocking: the worker runs it on a thread."""
    execution, config = deps.execution, deps.config
    open_by_model: dict[str, PreparedBatch] = {}
    done = Round()
    token_limit = deps.pool.limit
    claimed = 0
    while claimed < config.max_requests and len(done.immediate) < immediate_room:
        job = claim_next_job(
            execution.db,
            execution.clock,
            worker_id=execution.worker_id,
            lease_seconds=execution.lease_seconds,
            tenant_cap=config.tenant_cap,
            service_tier=BATCH_TIER,
            new_id=execution.new_id,
        )
        if job is None:
            break
        claimed += 1
        request = _line_for(deps, job)
        if request is None:
            done.immediate.append(job)
            continue
        line, model, prompt_tokens = request
        batch = open_by_model.get(model)
        if batch is not None and not batch.fits(line, prompt_tokens, config.max_bytes, token_limit(model)):
            done.batches.append(open_by_model.pop(model))  # full: sealed, and a new file takes the line
            batch = None
        new = batch is None
        if batch is None:
            batch = PreparedBatch(execution.new_id(), model)
        if not _join(deps, batch, job, new=new):
            continue
        open_by_model[model] = batch
        batch.lines.append(line)
        batch.size += len(line)
        batch.tokens += prompt_tokens
        batch.jobs.append(job)
    done.batches.extend(open_by_model.values())
    return done


def _line_for(deps: BatchDeps, job: ClaimedJob) -> tuple[bytes, str, int] | None:
    """The job's request line, model and prompt tokens, or None when it runs on the immediate path instead.

    The Batch API's budget counts the prompt tokens enqueued, not the completion a request may produce, so a
    line holds its job's estimate less the completion tokens acceptance reserved in it (the same cap as
    ``max_tokens`` here)."""
    execution, config = deps.execution, deps.config
    if not config.offers(job, execution.clock.now()):
        return None
    try:
        pages = load_pages(execution, job)
    except (DocumentUnavailable, DocumentStoreUnreachable):
        return None  # the immediate attempt ends or retries it with the reason, as a slot would
    task = task_of(job, pages)
    complexity = Complexity.of(pages, task.job_type.language(task.options))
    model = execution.router.choose(job.model_policy, task.job_type, complexity, job.model_escalated)
    if spend_refusal(execution, job, model) is not None:
        return None  # the immediate attempt stops it for the budget, with its event
    max_tokens = min(execution.max_output_tokens, task.job_type.max_output_tokens)
    custom_id = CustomId(job.job_id, job.attempt, job.fence)
    line = request_line(custom_id, task, model, max_tokens, deps.structured_output)
    prompt_tokens = max(1, job.estimated_tokens - max_tokens)
    if len(line) > config.max_bytes or prompt_tokens > deps.pool.limit(model):
        return None  # no file could carry it, or the model's Batch API budget could never hold it
    return line, model, prompt_tokens


def _join(deps: BatchDeps, batch: PreparedBatch, job: ClaimedJob, *, new: bool) -> bool:
    """In one transaction: the batch's record (for its first job) and the job's membership under its fence."""
    execution, config = deps.execution, deps.config
    now = execution.clock.now()
    try:
        with execution.db.transaction() as conn:
            if new:
                conn.execute(
                    execution.db.q.insert_provider_batch,
                    {
                        "batch_id": batch.batch_id,
                        "provider_pool": execution.provider_pool,
                        "model": batch.model,
                        "holder": batcher_holder(deps),
                        "held_until": now + timedelta(seconds=config.hold_seconds),
                        "now": now,
                    },
                )
            joined = conn.execute(
                execution.db.q.join_provider_batch,
                {
                    "batch_id": batch.batch_id,
                    "job_id": job.job_id,
                    "fence": job.fence,
                    "lease_until": now + timedelta(seconds=config.lease_seconds),
                },
            ).fetchone()
            if joined is None:
                raise _Lost
    except _Lost:
        logger.warning("a claimed job moved on before it joined its batch", extra={"job_id": str(job.job_id)})
        return False
    return True


class SubmitEnd(StrEnum):
    SUBMITTED = "submitted"
    GIVEN_UP = "given_up"  # the batch failed before reaching the provider; its jobs went back
    LEFT_TO_RECOVERY = "left_to_recovery"  # unsure whether the provider took it: a poller finds out


async def submit_batch(deps: BatchDeps, batch: PreparedBatch, stop: asyncio.Event) -> SubmitEnd:
    """Takes room in the Batch API's budget, uploads the file, creates the batch and records it."""
    if not await asyncio.to_thread(renew_hold, deps, batch.batch_id, holder=batcher_holder(deps)):
        # A poller took it over while the round's earlier files went out: it is theirs to recover now.
        return SubmitEnd.LEFT_TO_RECOVERY
    held = await _enqueue(deps, batch, stop)
    if held is None:
        await asyncio.to_thread(_give_up, deps, batch, "no_batch_budget")
        return SubmitEnd.GIVEN_UP
    api = deps.api
    content = b"".join(batch.lines)
    try:
        file_id = await asyncio.to_thread(api.upload, f"tollgate-{batch.batch_id}.jsonl", content)
    except BatchApiError as error:
        logger.warning("batch upload failed; its jobs go back", extra={"error": str(error)})
        await asyncio.to_thread(_give_up, deps, batch, "upload_failed")
        return SubmitEnd.GIVEN_UP
    if not await asyncio.to_thread(_record_upload, deps, batch, file_id):
        return SubmitEnd.LEFT_TO_RECOVERY  # another worker took the batch over: it is theirs now
    checkpoints.reached(BATCH_AFTER_UPLOAD)
    try:
        created = await asyncio.to_thread(api.create, file_id, metadata={METADATA_KEY: str(batch.batch_id)})
    except BatchApiError as error:
        if error.status is not None and 400 <= error.status < 500 and error.status not in {408, 409, 429}:
            logger.error("the provider refused the batch; its jobs go back", extra={"error": str(error)})
            await asyncio.to_thread(_give_up, deps, batch, "create_refused")
            return SubmitEnd.GIVEN_UP
        # The batch may exist: a poller looks it up by its metadata, at once, and adopts or fails it.
        logger.warning("batch create unanswered; left to recovery", extra={"error": str(error)})
        await asyncio.to_thread(renew_hold, deps, batch.batch_id, 0.0, holder=batcher_holder(deps))
        return SubmitEnd.LEFT_TO_RECOVERY
    checkpoints.reached(BATCH_AFTER_CREATE)
    if await asyncio.to_thread(record_submitted, deps, batch.batch_id, created, holder=batcher_holder(deps)):
        logger.info(
            "batch submitted",
            extra={"batch_id": str(batch.batch_id), "model": batch.model, "requests": len(batch.jobs)},
        )
        deps.execution.metrics.count(BATCHES_SUBMITTED)
        return SubmitEnd.SUBMITTED
    if await asyncio.to_thread(provider_batch_id, deps, batch.batch_id) == created.id:
        return SubmitEnd.SUBMITTED  # a poller that took the batch over found this very batch and adopted it
    # Given up by a recovering poller meanwhile: its jobs went back under new fences, so the provider's
    # answers could not be committed; cancel it so they are not paid for either.
    try:
        await asyncio.to_thread(api.cancel, created.id)
    except BatchApiError:
        logger.warning("a batch given up could not be cancelled", extra={"provider_batch_id": created.id})
    return SubmitEnd.LEFT_TO_RECOVERY


async def _enqueue(deps: BatchDeps, batch: PreparedBatch, stop: asyncio.Event) -> Enqueued | None:
    """Room for the file's tokens in the model's Batch API budget, waited for (the hold on the batch renewed)
    up to ``budget_wait_seconds``; None when it did not come, the budget is unreachable, or on stop."""
    execution, config = deps.execution, deps.config
    give_up_at = execution.clock.now() + timedelta(seconds=config.budget_wait_seconds)
    request = Enqueue(
        pool=execution.provider_pool,
        model=batch.model,
        holder=str(batch.batch_id),
        tokens=batch.tokens,
        expires_at=execution.clock.now() + timedelta(seconds=config.lease_seconds),
    )
    while not stop.is_set():
        try:
            granted = await asyncio.to_thread(deps.pool.try_enqueue, request)
        except LimiterUnavailable as error:
            logger.warning("batch budget unavailable; the batch is given up", extra={"error": str(error)})
            return None
        if isinstance(granted, Enqueued):
            return granted
        if math.isinf(granted.wait_seconds):
            return None  # larger than the model's whole budget: it could never be enqueued
        now = execution.clock.now()
        renewed = await asyncio.to_thread(renew_hold, deps, batch.batch_id, holder=batcher_holder(deps))
        if now >= give_up_at or not renewed:
            return None
        wait = min(granted.wait_seconds, BUDGET_POLL_SECONDS, (give_up_at - now).total_seconds())
        sleeping = asyncio.ensure_future(execution.sleep(max(wait, 0.0)))
        stopping = asyncio.ensure_future(stop.wait())
        try:
            await asyncio.wait({sleeping, stopping}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            sleeping.cancel()
            stopping.cancel()
    return None


def _record_upload(deps: BatchDeps, batch: PreparedBatch, file_id: str) -> bool:
    execution = deps.execution
    with execution.db.transaction() as conn:
        recorded = conn.execute(
            execution.db.q.record_batch_upload,
            {
                "batch_id": batch.batch_id,
                "holder": batcher_holder(deps),
                "input_file_id": file_id,
                "request_count": len(batch.jobs),
                "request_bytes": batch.size,
                "enqueued_tokens": batch.tokens,
            },
        ).fetchone()
    if recorded is None:
        release_budget(deps, batch.batch_id)
    return recorded is not None


def _give_up(deps: BatchDeps, batch: PreparedBatch, reason: str) -> None:
    """The batch cannot reach the provider: it ends failed, its jobs go back at once, its budget returns."""
    fail_unsubmitted(deps, batch.batch_id, reason, holder=batcher_holder(deps))
    release_budget(deps, batch.batch_id)
