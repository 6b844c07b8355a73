"""What the batch path runs with: the execution's dependencies (database, documents, router, prices, clock),
the provider's Batch API, the Batch API's own budget, and the path's limits and times."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from tollgate.execution.attempt import ExecutionDeps
from tollgate.execution.leasing import ClaimedJob
from tollgate.execution.limiter.batch_pool import BatchPool
from tollgate.execution.llm.batch_api import BatchApi
from tollgate.execution.llm.output import StructuredOutput

# The Batch API's only completion window.
COMPLETION_WINDOW_SECONDS = 24 * 3600.0


@dataclass(frozen=True)
class BatchConfig:
    # Lines and bytes per request file: the provider allows 50,000 and 200 MB; a file is held in memory while
    # it is written and uploaded, so the byte limit is also the batcher's memory for it.
    max_requests: int = 1_000
    max_bytes: int = 100 * 1024 * 1024
    window_seconds: float = COMPLETION_WINDOW_SECONDS
    # Kept past the window on a batched job's lease: time to notice the end, download and commit.
    settle_seconds: float = 3_600.0
    # Kept before a job's deadline for one immediate attempt after its batch, should the batch not answer.
    fallback_seconds: float = 3_600.0
    # A holder's time on a batch (preparing it, or settling it) before another worker takes it over.
    hold_seconds: float = 600.0
    # How often an open batch's status is read, and how long the batcher waits between rounds, so jobs
    # accepted a few at a time go out in one file rather than many small ones.
    poll_seconds: float = 60.0
    interval_seconds: float = 60.0
    # How long a prepared file waits for room in the Batch API's budget before its jobs go back.
    budget_wait_seconds: float = 900.0
    # Jobs one tenant may have in batches at once (the immediate path's cap is per slot-sized calls).
    tenant_cap: int = 10_000
    price_factor: float = 0.5

    @property
    def lease_seconds(self) -> float:
        return self.window_seconds + self.settle_seconds

    def offers(self, job: ClaimedJob, now: datetime) -> bool:
        """Whether a claimed job goes into a batch: once per model step (its first model, and the large one
        after the small one's result failed validation), and only with time for the whole window, the settle
        and an immediate attempt after them before its deadline. Anything else runs now: a failed line's
        retry, a job back from a batch that expired, failed or never reached the provider."""
        left = (job.deadline_at - now).total_seconds()
        offers_allowed = 2 if job.model_escalated else 1
        return job.batch_offers < offers_allowed and left >= self.lease_seconds + self.fallback_seconds


@dataclass(frozen=True)
class BatchDeps:
    execution: ExecutionDeps
    api: BatchApi
    pool: BatchPool
    config: BatchConfig
    structured_output: StructuredOutput
