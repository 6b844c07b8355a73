"""The chaos run's fault plan, drawn from the seed: which faults, how many or for how long, and when.

Every kind of fault is in every plan. Crashes need fresh traffic to meet their crash point (a worker dies
only once it took in a message, or heard back from the provider), so they come early, before any outage
could keep their process from meeting it; the outages and provider faults follow, and may overlap, as
real ones do.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from enum import StrEnum

from tollgate.faults import AFTER_PROVIDER_RESPONSE, BEFORE_SQS_DELETE, RELAY_AFTER_PUBLISH
from tollgate.llm.simulator import Fault


class FaultKind(StrEnum):
    WORKER_AFTER_PROVIDER = "worker killed right after the provider answered"
    WORKER_BEFORE_DELETE = "worker killed between the inbox commit and the SQS delete"
    RELAY_MID_BATCH = "relay killed between publishing a batch and marking it"
    AWS_DOWN = "AWS endpoint (moto) unreachable"
    POSTGRES_DOWN = "PostgreSQL restarted"
    STORM_429 = "provider 429 storm"
    PROVIDER_TIMEOUT = "provider timeouts"
    MALFORMED_OUTPUT = "malformed JSON from the model"
    WRONG_SCHEMA = "wrong-schema output from the model"
    ERP_DOWN = "ERP webhook receiver down"


CRASHPOINTS = {
    FaultKind.WORKER_AFTER_PROVIDER: AFTER_PROVIDER_RESPONSE,
    FaultKind.WORKER_BEFORE_DELETE: BEFORE_SQS_DELETE,
    FaultKind.RELAY_MID_BATCH: RELAY_AFTER_PUBLISH,
}
PROVIDER_FAULTS = {
    FaultKind.STORM_429: Fault.RATE_LIMIT,
    FaultKind.PROVIDER_TIMEOUT: Fault.TIMEOUT,
    FaultKind.MALFORMED_OUTPUT: Fault.MALFORMED_JSON,
    FaultKind.WRONG_SCHEMA: Fault.WRONG_SCHEMA,
}
OUTAGES = frozenset({FaultKind.AWS_DOWN, FaultKind.POSTGRES_DOWN, FaultKind.ERP_DOWN})


@dataclass(frozen=True, order=True)
class PlannedFault:
    at: float  # seconds after the traffic started
    kind: FaultKind
    amount: float  # requests for a provider fault, 1 for a crash, seconds for an outage

    @property
    def unit(self) -> str:
        if self.kind in OUTAGES:
            return f"{self.amount:.1f} s"
        return f"{self.amount:.0f}"


def plan_faults(seed: int, traffic_seconds: float, jobs: int) -> list[PlannedFault]:
    rng = random.Random(seed)  # noqa: S311 - a reproducible plan, not a secret
    kills = 2 if jobs >= 100 else 1
    crashes = [kind for kind in CRASHPOINTS for _ in range(kills)]
    # Outages long enough to outlast the clients' own retries, short enough to leave time to settle.
    outage = min(max(traffic_seconds / 12, 2.0), 6.0)
    others: list[tuple[FaultKind, float]] = [
        (FaultKind.AWS_DOWN, round(outage * rng.uniform(0.8, 1.2), 1)),
        (FaultKind.POSTGRES_DOWN, round(outage * rng.uniform(0.8, 1.2), 1)),
        (FaultKind.ERP_DOWN, round(1.5 * outage * rng.uniform(0.8, 1.2), 1)),
        (FaultKind.STORM_429, max(5, jobs // 12)),
        (FaultKind.PROVIDER_TIMEOUT, max(2, jobs // 50)),
        (FaultKind.MALFORMED_OUTPUT, max(3, jobs // 30)),
        (FaultKind.WRONG_SCHEMA, max(3, jobs // 30)),
    ]
    rng.shuffle(crashes)
    rng.shuffle(others)
    plan = _spread(rng, [(kind, 1.0) for kind in crashes], 0.05 * traffic_seconds, 0.4 * traffic_seconds)
    plan += _spread(rng, others, 0.45 * traffic_seconds, 0.92 * traffic_seconds)
    return sorted(plan)


def _spread(
    rng: random.Random, faults: list[tuple[FaultKind, float]], start: float, end: float
) -> list[PlannedFault]:
    """One fault per equal slot of [start, end), at a random moment inside its slot."""
    width = (end - start) / len(faults)
    return [
        PlannedFault(round(start + width * (slot + rng.uniform(0.1, 0.9)), 1), kind, float(amount))
        for slot, (kind, amount) in enumerate(faults)
    ]
