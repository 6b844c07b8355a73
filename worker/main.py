"""ECS worker entrypoint: reads WorkerSettings, runs ingress and execution slots until SIGTERM or SIGINT."""

import asyncio
import signal

from aws_lambda_powertools import Logger, Metrics

from tollgate.core.metrics import PowertoolsMetrics
from tollgate.db import build_database
from tollgate.execution.limiter.base import Limiter
from tollgate.execution.worker import run_worker
from tollgate.settings import WorkerSettings
from tollgate.wiring import build_batch, build_execution, build_ingress, worker_config

logger = Logger(service="tollgate-worker")
metrics = PowertoolsMetrics(Metrics(namespace="Tollgate", service="tollgate-worker"))


async def main(settings: WorkerSettings | None = None, limiter: Limiter | None = None) -> None:
    """The container runs this with no arguments; the development harness passes its own limiter."""
    settings = settings or WorkerSettings()  # type: ignore[call-arg]  # fields come from the environment
    db = build_database(settings, pool_name="worker")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    logger.info("worker started", extra={"worker_id": settings.worker_id, "slots": settings.execution_slots})
    execution = build_execution(settings, db, metrics=metrics, limiter=limiter)
    await run_worker(
        build_ingress(settings, db),
        execution,
        worker_config(settings),
        stop,
        flush_metrics=metrics.flush,
        batch=build_batch(settings, execution),
    )
    db.close()
    logger.info("worker stopped")


if __name__ == "__main__":
    asyncio.run(main())
