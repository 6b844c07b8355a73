"""The worker as the harness runs it (``python -m tollgate_dev.worker``): the container's entrypoint, with
crash points armed from ``CRASHPOINTS``/``CRASH_TOKENS_DIR`` and, for the drain benchmark, a baseline limiter
chosen by ``LIMITER_MODE``. None of these exist for a deployed worker."""

from __future__ import annotations

import asyncio
from typing import Literal

from pydantic import Field

from tollgate.core.clock import Clock, SystemClock
from tollgate.execution.limiter.base import Limiter
from tollgate.settings import LimiterSettings, WorkerSettings
from tollgate_dev import faults
from tollgate_dev.baselines import NoLimiter, PerWorkerAimdLimiter

LimiterMode = Literal["budget", "per_worker_aimd", "no_limit"]


class HarnessWorkerSettings(faults.FaultSettings):
    limiter_mode: LimiterMode = Field(
        default="budget",
        description="`budget` is the production limiter; `per_worker_aimd` and `no_limit` are the drain "
        "benchmark's baselines.",
    )


def baseline_limiter(mode: LimiterMode, settings: LimiterSettings, clock: Clock) -> Limiter | None:
    """The baseline named by ``mode``, or None for the production limiter the wiring builds."""
    if mode == "no_limit":
        return NoLimiter(clock, settings.limiter_permit_ttl_seconds)
    if mode == "per_worker_aimd":
        return PerWorkerAimdLimiter(
            clock,
            ceiling_per_minute=settings.provider_requests_per_minute,
            permit_ttl_seconds=settings.limiter_permit_ttl_seconds,
        )
    return None


def main() -> None:
    from worker import main as container  # beside the package, as in the image

    harness = HarnessWorkerSettings()
    faults.arm_from(harness)
    settings = WorkerSettings()  # fields come from the environment
    asyncio.run(container.main(settings, baseline_limiter(harness.limiter_mode, settings, SystemClock())))


if __name__ == "__main__":
    main()
