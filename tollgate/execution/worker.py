"""The worker process: an ingress consumer per job type's queue and N execution slots in one asyncio loop.

Each queue's receive loop long-polls on a thread of its own, so a quiet queue never delays a busy one and
no poll holds a thread the slots need.

Ingress wakes idle slots when it records events; slots also look for work on their own every few seconds,
so a lost signal only delays work. A slot takes the provider budget before it claims a job: while the budget
is the bottleneck, waiting slots hold permits-to-be, not jobs, so each call that can go out goes to the job
the fair claim picks at that moment. On stop, slots claim nothing more, an attempt still waiting for budget
hands its job back at once, and calls in flight get ``drain_seconds`` to finish; what is still running then
is handed back (RETRY_SCHEDULED, fence moved).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass

from aws_lambda_powertools import Logger

from tollgate.core.observability import log_context
from tollgate.core.tiers import SERVICE_TIERS, ServiceTier
from tollgate.execution.attempt import Claimed, ExecutionDeps, claim_within_budget, job_log_keys, run_attempt
from tollgate.execution.batch.batcher import prepare_round, submit_batch
from tollgate.execution.batch.deps import BatchDeps
from tollgate.execution.batch.poller import BATCHES_PER_POLL, poll_batches
from tollgate.execution.leasing import release_job
from tollgate.execution.limiter.base import LimiterUnavailable
from tollgate.ingress.consumer import IngressDeps, IngressOutcome, ingest_once

logger = Logger(service="tollgate-worker", child=True)


@dataclass(frozen=True)
class WorkerConfig:
    slots: int
    tenant_cap: int
    idle_seconds: float
    drain_seconds: float
    # How often counted metrics are written out (CloudWatch aggregates them per minute anyway).
    metrics_flush_seconds: float = 60.0
    # The tiers whose jobs this worker's slots claim, highest first.
    service_tiers: tuple[ServiceTier, ...] = SERVICE_TIERS


async def _wait(event: asyncio.Event, timeout: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(event.wait(), timeout)


async def run_ingress(
    deps: IngressDeps,
    stop: asyncio.Event,
    wake: asyncio.Event,
    on_activity: Callable[[], None] = lambda: None,
    *,
    executor: Executor | None = None,
) -> None:
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        try:
            # The context goes along, as with asyncio.to_thread: log keys set around the worker stay on.
            context = contextvars.copy_context()
            report = await loop.run_in_executor(executor, context.run, ingest_once, deps)
        except Exception:
            # SQS or the database is unreachable: back off briefly and keep the process alive.
            logger.exception("ingress receive failed")
            await _wait(stop, 5)
            continue
        if report.outcomes[IngressOutcome.RECORDED]:
            wake.set()
        if report.received:
            on_activity()


async def _run_slot(
    deps: ExecutionDeps,
    config: WorkerConfig,
    stop: asyncio.Event,
    wake: asyncio.Event,
    on_activity: Callable[[], None],
) -> None:
    while not stop.is_set():
        try:
            claimed = await claim_within_budget(
                deps, tenant_cap=config.tenant_cap, stop=stop, service_tiers=config.service_tiers
            )
        except LimiterUnavailable as error:
            # Fail closed before the claim: the jobs stay runnable and no attempt is spent on them.
            logger.warning("provider budget unavailable; claiming nothing", extra={"error": str(error)})
            await _wait(stop, config.idle_seconds)
            continue
        except Exception:
            logger.exception("claim failed")
            await _wait(stop, config.idle_seconds)
            continue
        if claimed is None:
            if stop.is_set():
                break
            wake.clear()
            await _wait(wake, config.idle_seconds)
            continue
        await _run_guarded(deps, claimed, stop)
        on_activity()


async def _run_guarded(deps: ExecutionDeps, claimed: Claimed, stop: asyncio.Event) -> None:
    job = claimed.job
    # Each slot is its own task, so these keys stay on this attempt's lines, threads it starts included.
    with log_context(**job_log_keys(job)):
        try:
            await run_attempt(deps, job, claimed.permit, stop=stop)
        except asyncio.CancelledError:
            # Shutdown ran out of time: hand the job back rather than leave it to the lease reaper.
            await asyncio.to_thread(release_job, deps.db, deps.clock, job)
            raise
        except Exception:
            # The lease reaper retries the job; this slot goes on.
            logger.exception("attempt failed unexpectedly")


async def run_batch_path(
    deps: BatchDeps,
    stop: asyncio.Event,
    *,
    slots: int,
    drain_seconds: float,
    on_activity: Callable[[], None] = lambda: None,
) -> None:
    """The batch tier's consumer when the Batch API is on: rounds of claims into request files, a poller that
    follows and settles batches, and up to ``slots`` immediate attempts for the claimed jobs the batch path
    does not take (a retry of a failed line, a job back from an expired batch, a near deadline)."""
    config = deps.config
    running: set[asyncio.Task[None]] = set()
    poller = asyncio.create_task(_run_poller(deps, stop, on_activity))
    while not stop.is_set():
        room = slots - len(running)
        if room <= 0:
            await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
            continue
        try:
            claimed = await asyncio.to_thread(prepare_round, deps, immediate_room=room)
        except Exception:
            logger.exception("batch claim failed")
            await _wait(stop, config.interval_seconds)
            continue
        for job in claimed.immediate:
            attempt = asyncio.create_task(_run_guarded(deps.execution, Claimed(job, None), stop))
            running.add(attempt)
            attempt.add_done_callback(running.discard)
        for prepared in claimed.batches:
            try:
                await submit_batch(deps, prepared, stop)
            except Exception:
                # Its record says where it stopped: a poller recovers it once the batcher's hold runs out.
                logger.exception("batch submit failed")
        if claimed.claimed:
            on_activity()
        if claimed.batches or not claimed.immediate:
            # Jobs accepted a few at a time go out together in the next round, not as many small files.
            await _wait(stop, config.interval_seconds)
    if running:
        _, unfinished = await asyncio.wait(running, timeout=drain_seconds)
        for task in unfinished:
            task.cancel()
        await asyncio.gather(*unfinished, return_exceptions=True)
    await asyncio.gather(poller, return_exceptions=True)


async def _run_poller(deps: BatchDeps, stop: asyncio.Event, on_activity: Callable[[], None]) -> None:
    stopping = threading.Event()
    while not stop.is_set():
        try:
            context = contextvars.copy_context()
            report = await asyncio.to_thread(context.run, poll_batches, deps, stopping=stopping.is_set)
        except Exception:
            logger.exception("batch poll failed")
            report = None
        if report is not None and report.looked_at:
            on_activity()
            if report.looked_at == BATCHES_PER_POLL:
                continue  # more may be due
        await _wait(stop, deps.config.poll_seconds)
    stopping.set()


async def _flush_metrics(flush: Callable[[], None], interval: float, stop: asyncio.Event) -> None:
    while not stop.is_set():
        await _wait(stop, interval)
        flush()


async def run_worker(
    ingress: Sequence[IngressDeps],
    execution: ExecutionDeps,
    config: WorkerConfig,
    stop: asyncio.Event,
    on_activity: Callable[[], None] = lambda: None,
    *,
    flush_metrics: Callable[[], None] = lambda: None,
    batch: BatchDeps | None = None,
) -> None:
    """``batch``, when given, takes the batch tier's jobs through the provider's Batch API
    (``run_batch_path``); the slots then serve the worker's other tiers only."""
    wake = asyncio.Event()
    # One thread per queue: a 20-second long poll on the default executor would hold a thread the slots'
    # database calls wait for.
    pollers = ThreadPoolExecutor(max_workers=max(1, len(ingress)), thread_name_prefix="ingress")
    ingress_tasks = [
        asyncio.create_task(run_ingress(deps, stop, wake, on_activity, executor=pollers)) for deps in ingress
    ]
    flusher = asyncio.create_task(_flush_metrics(flush_metrics, config.metrics_flush_seconds, stop))
    slot_tiers = config.service_tiers
    batch_path = None
    if batch is not None and "batch" in slot_tiers:
        slot_tiers = tuple(tier for tier in slot_tiers if tier != "batch")
        batch_path = asyncio.create_task(
            run_batch_path(
                batch, stop, slots=config.slots, drain_seconds=config.drain_seconds, on_activity=on_activity
            )
        )
    slot_config = dataclasses.replace(config, service_tiers=slot_tiers)
    slots = [
        asyncio.create_task(_run_slot(execution, slot_config, stop, wake, on_activity))
        for _ in range(config.slots if slot_tiers else 0)
    ]
    await stop.wait()
    wake.set()
    if slots:
        _, unfinished = await asyncio.wait(slots, timeout=config.drain_seconds)
        for task in unfinished:
            task.cancel()
        await asyncio.gather(*unfinished, return_exceptions=True)
    if batch_path is not None:
        await asyncio.gather(batch_path, return_exceptions=True)
    await asyncio.gather(*ingress_tasks, return_exceptions=True)
    pollers.shutdown(wait=False)
    await asyncio.gather(flusher, return_exceptions=True)
    flush_metrics()  # once more after the drain: a worker scaled in still reports what it counted
