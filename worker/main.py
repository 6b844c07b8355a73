"""ECS worker entrypoint: reads WorkerSettings, runs the worker loops until SIGTERM or SIGINT."""

import asyncio
import signal

from aws_lambda_powertools import Logger

from tollgate.settings import WorkerSettings
from tollgate.wiring import build_ingress
from tollgate.worker import run_ingress

logger = Logger(service="tollgate-worker")


async def main() -> None:
    deps = build_ingress(WorkerSettings())  # type: ignore[call-arg]  # fields come from the environment
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    logger.info("worker started")
    await run_ingress(deps, stop)
    deps.db.close()
    logger.info("worker stopped")


if __name__ == "__main__":
    asyncio.run(main())
