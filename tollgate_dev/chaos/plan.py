"""The chaos run's fault plan, drawn from the seed: which faults, how many or how long, and on which event.

A planned fault is armed by what the system did, never by the clock: "once the 12th job was accepted", "once
the 20th job reached RUNNING", "once the 30th job finished". A slow machine reaches the same events later, a
fast one sooner, and either way every fault is injected with traffic still to come. Every kind of fault is in
every plan. Crashes come first, while most of the traffic is still ahead to carry a process to its crash
point; the outages and provider faults follow, and may overlap, as real ones do.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from enum import StrEnum

from tollgate_dev.faults import (
    AFTER_PROVIDER_RESPONSE,
    BATCH_AFTER_CREATE,
    BATCH_LINE_COMMITTED,
    BEFORE_SQS_DELETE,
    RELAY_AFTER_PUBLISH,
)
from tollgate_dev.simulator.server import Fault


class FaultKind(StrEnum):
    WORKER_AFTER_PROVIDER = "worker killed right after the provider answered"
    WORKER_BEFORE_DELETE = "worker killed between the inbox commit and the SQS delete"
    RELAY_MID_BATCH = "relay killed between publishing a batch and marking it"
    POLLER_MID_DOWNLOAD = "worker killed mid-download of a provider batch"
    BATCHER_AFTER_CREATE = "worker killed between creating a batch and recording it"
    AWS_DOWN = "AWS endpoint (moto) unreachable"
    POSTGRES_DOWN = "PostgreSQL restarted"
    STORM_429 = "provider 429 storm"
    PROVIDER_TIMEOUT = "provider timeouts"
    MALFORMED_OUTPUT = "malformed JSON from the model"
    WRONG_SCHEMA = "wrong-schema output from the model"
    BATCH_LINES_FAILED = "provider batch lines failed with a 500"
    ERP_DOWN = "ERP webhook receiver down"


class Milestone(StrEnum):
    """What the run counts to arm a fault: jobs that got this far."""

    ACCEPTED = "accepted"  # the API answered 202 (the run's own tally of its tenants' answers)
    RUNNING = "reached RUNNING"  # claimed at least once (the database's attempt counter)
    FINISHED = "finished"  # in a terminal state (the database)


_AWAITED = {
    Milestone.ACCEPTED: "to be accepted",
    Milestone.RUNNING: "to reach RUNNING",
    Milestone.FINISHED: "to finish",
}

CRASHPOINTS = {
    FaultKind.WORKER_AFTER_PROVIDER: AFTER_PROVIDER_RESPONSE,
    FaultKind.WORKER_BEFORE_DELETE: BEFORE_SQS_DELETE,
    FaultKind.RELAY_MID_BATCH: RELAY_AFTER_PUBLISH,
    FaultKind.POLLER_MID_DOWNLOAD: BATCH_LINE_COMMITTED,
    FaultKind.BATCHER_AFTER_CREATE: BATCH_AFTER_CREATE,
}
PROVIDER_FAULTS = {
    FaultKind.STORM_429: Fault.RATE_LIMIT,
    FaultKind.PROVIDER_TIMEOUT: Fault.TIMEOUT,
    FaultKind.MALFORMED_OUTPUT: Fault.MALFORMED_JSON,
    FaultKind.WRONG_SCHEMA: Fault.WRONG_SCHEMA,
}
# Faults of a provider batch's lines, drawn when a batch is created: the next lines get them.
BATCH_LINE_FAULTS = {FaultKind.BATCH_LINES_FAILED: Fault.INTERNAL_ERROR}
OUTAGES = frozenset({FaultKind.AWS_DOWN, FaultKind.POSTGRES_DOWN, FaultKind.ERP_DOWN})

# The milestone that arms each kind, chosen so that what the fault needs is still ahead when it is armed:
# a worker's ingress and the relay meet their crash points on the traffic's next submissions, a worker's
# provider call on the next job to run, the batch path on the next batch-tier submissions (a batch created
# seconds later, its lines committed seconds after that); provider faults need jobs yet to run, ERP outages
# deliveries.
MILESTONES = {
    FaultKind.WORKER_AFTER_PROVIDER: Milestone.RUNNING,
    FaultKind.WORKER_BEFORE_DELETE: Milestone.ACCEPTED,
    FaultKind.RELAY_MID_BATCH: Milestone.ACCEPTED,
    FaultKind.POLLER_MID_DOWNLOAD: Milestone.ACCEPTED,
    FaultKind.BATCHER_AFTER_CREATE: Milestone.ACCEPTED,
    FaultKind.AWS_DOWN: Milestone.ACCEPTED,
    FaultKind.POSTGRES_DOWN: Milestone.ACCEPTED,
    FaultKind.STORM_429: Milestone.RUNNING,
    FaultKind.PROVIDER_TIMEOUT: Milestone.RUNNING,
    FaultKind.MALFORMED_OUTPUT: Milestone.RUNNING,
    FaultKind.WRONG_SCHEMA: Milestone.RUNNING,
    FaultKind.BATCH_LINES_FAILED: Milestone.ACCEPTED,
    FaultKind.ERP_DOWN: Milestone.FINISHED,
}
# Faults spread with the crashes, early: failed batch lines need batches yet to be created, and a quarter of
# the traffic is batch-tier, a batch going out every few seconds.
EARLY_FAULTS = frozenset({*CRASHPOINTS, FaultKind.BATCH_LINES_FAILED})
# Shares of the jobs over which the faults' milestones are spread. The crashes (and the other early faults)
# end by 40 %, so most of the traffic is still to come; the last fault comes by 90 %, below the jobs that
# reach RUNNING even when a few are cancelled before they run.
CRASH_SHARES = (0.05, 0.4)
OTHER_SHARES = (0.45, 0.9)


@dataclass(frozen=True)
class Trigger:
    """Armed once ``count`` jobs got as far as ``milestone``."""

    milestone: Milestone
    count: int

    def __str__(self) -> str:
        return f"{self.count} {self.milestone}"

    def describe(self) -> str:
        """What a wait for it awaits, in words: "the 12th job to reach RUNNING"."""
        return f"the {_ordinal(self.count)} job {_AWAITED[self.milestone]}"


@dataclass(frozen=True)
class PlannedFault:
    order: int  # the plan injects its faults one after another, in this order
    trigger: Trigger
    kind: FaultKind
    amount: float  # requests (or batch lines) for a provider fault, 1 for a crash, seconds for an outage

    @property
    def unit(self) -> str:
        if self.kind in OUTAGES:
            return f"{self.amount:.1f} s"
        return f"{self.amount:.0f}"


def plan_faults(seed: int, traffic_seconds: float, jobs: int) -> list[PlannedFault]:
    rng = random.Random(seed)  # noqa: S311 - a reproducible plan, not a secret
    kills = 2 if jobs >= 100 else 1
    early: list[tuple[FaultKind, float]] = [(kind, 1.0) for kind in CRASHPOINTS for _ in range(kills)]
    early.append((FaultKind.BATCH_LINES_FAILED, max(2, jobs // 60)))
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
    rng.shuffle(early)
    rng.shuffle(others)
    spread = _spread(rng, early, jobs, *CRASH_SHARES)
    spread += _spread(rng, others, jobs, *OTHER_SHARES)
    return [
        PlannedFault(order, Trigger(MILESTONES[kind], count), kind, float(amount))
        for order, (count, kind, amount) in enumerate(spread)
    ]


def _spread(
    rng: random.Random, faults: list[tuple[FaultKind, float]], jobs: int, start: float, end: float
) -> list[tuple[int, FaultKind, float]]:
    """One fault per equal slot of the jobs between the shares ``start`` and ``end``, at a random job inside
    its slot, so the counts never decrease along the plan."""
    width = (end - start) * jobs / len(faults)
    return [
        (max(1, int(start * jobs + width * (slot + rng.uniform(0.1, 0.9)))), kind, amount)
        for slot, (kind, amount) in enumerate(faults)
    ]


def _ordinal(number: int) -> str:
    suffix = "th" if 10 <= number % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(number % 10, "th")
    return f"{number}{suffix}"
