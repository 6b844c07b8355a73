"""The outbox relay as a process of its own (``python -m tollgate_dev.chaos.relay``), so the chaos run can
kill it for real: it sweeps the outbox on an interval until SIGTERM and, when armed, dies between publishing a
batch and marking it published (armed at start, or by a token while it runs)."""

from __future__ import annotations

import signal
import threading

from aws_lambda_powertools import Logger
from pydantic import Field

from tollgate.outbox.relay import relay_outbox
from tollgate.settings import RelaySettings
from tollgate.wiring import build_relay
from tollgate_dev import faults

logger = Logger(service="tollgate-relay")


class ChaosRelaySettings(RelaySettings, faults.FaultSettings):
    """The relay Lambda's settings, plus what a long-running relay process needs."""

    relay_sweep_seconds: float = Field(
        default=0.2, gt=0, description="Pause between sweeps (nothing nudges this process)."
    )


def main() -> None:
    settings = ChaosRelaySettings()  # fields come from the environment
    faults.arm_from(settings)
    relay = build_relay(settings)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    logger.info("relay started", extra={"crashpoints": sorted(settings.crashpoints)})
    while not stop.is_set():
        try:
            relay_outbox(relay, settings.relay_max_batches)
        except Exception:
            # PostgreSQL or the AWS endpoint is away: the rows stay in the outbox for the next sweep.
            logger.exception("relay sweep failed")
        stop.wait(settings.relay_sweep_seconds)
    relay.db.close()
    logger.info("relay stopped")


if __name__ == "__main__":
    main()
