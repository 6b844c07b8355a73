"""ECS worker entrypoint: reads WorkerSettings, runs ingress and execution slots until SIGTERM or SIGINT."""

import asyncio
import signal

from aws_lambda_powertools import Logger, Metrics

from tollgate import faults
from tollgate.db import build_database
from tollgate.metrics import PowertoolsMetrics
from tollgate.settings import WorkerSettings
from tollgate.wiring import build_execution, build_ingress, worker_config
from tollgate.worker import run_worker

logger = Logger(service="tollgate-worker")
metrics = PowertoolsMetrics(Metrics(namespace="Tollgate", service="tollgate-worker"))


async def main() -> None:
    settings = WorkerSettings()  # type: ignore[call-arg]  # fields come from the environment
    faults.arm(settings.crashpoints, settings.crash_tokens_dir)
    db = build_database(settings, pool_name="worker")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    logger.info("worker started", extra={"worker_id": settings.worker_id, "slots": settings.execution_slots})
    await run_worker(
        build_ingress(settings, db),
        build_execution(settings, db, metrics=metrics),
        worker_config(settings),
        stop,
        flush_metrics=metrics.flush,
    )
    db.close()
    logger.info("worker stopped")


if __name__ == "__main__":
    asyncio.run(main())
