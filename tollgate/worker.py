"""The worker process's loops. This piece has the ingress consumer; execution slots join it later.

Stopping is cooperative: the stop event ends the loop after the receive in progress, whose messages are
recorded and deleted (or left for redelivery) before it returns.
"""

from __future__ import annotations

import asyncio

from aws_lambda_powertools import Logger

from tollgate.ingress import IngressDeps, ingest_once

logger = Logger(service="tollgate-worker", child=True)


async def run_ingress(deps: IngressDeps, stop: asyncio.Event) -> None:
    while not stop.is_set():
        try:
            report = await asyncio.to_thread(ingest_once, deps)
        except Exception:
            # SQS or the database is unreachable: back off briefly and keep the process alive.
            logger.exception("ingress receive failed")
            await asyncio.wait([asyncio.ensure_future(stop.wait())], timeout=5)
            continue
        if report.received:
            logger.info(
                "ingress",
                extra={"received": report.received, "failed": report.failed}
                | {outcome.value: n for outcome, n in report.outcomes.items()},
            )
