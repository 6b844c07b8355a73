"""Where numbers go: CloudWatch through Powertools' embedded metric format, or a dictionary in tests.

Job ids, tenants, attempts and fences are log keys, never metric dimensions (each distinct dimension value
is a separate, billed metric). Names are constants here and the CDK alarms import them
(stacks/constructs/service_metrics.py), so the code that counts and the alarms that watch share one spelling.
"""

from __future__ import annotations

from collections import Counter
from typing import Protocol

from aws_lambda_powertools import Metrics
from aws_lambda_powertools.metrics import MetricUnit

# The worker (service tollgate-worker): one per request sent to the provider, and per 429 answer.
PROVIDER_CALLS = "ProviderCalls"
PROVIDER_THROTTLED = "ProviderThrottled"
# The webhook attempt Lambda (service tollgate-webhook-attempt).
DELIVERY_ATTEMPTS_FAILED = "DeliveryAttemptsFailed"
DELIVERIES_GAVE_UP = "DeliveriesGaveUp"
ENDPOINTS_DISABLED = "EndpointsDisabled"
# The scheduler (service tollgate-scheduler): deliveries it found stalled and started again.
DELIVERIES_RESTARTED = "DeliveriesRestarted"
# The scheduler's backlog gauges, once a tick: the worker's scaling watches RunnableJobs and
# OldestEligibleJobAge, the observability stack graphs all of them and alarms on some
# (stacks/constructs/backlog_metrics.py).
RUNNABLE_JOBS = "RunnableJobs"
RUNNING_JOBS = "RunningJobs"
WAITING_RETRIES = "WaitingRetries"
OLDEST_ELIGIBLE_JOB_AGE = "OldestEligibleJobAge"
OLDEST_UNPUBLISHED_OUTBOX_AGE = "OldestUnpublishedOutboxAge"
UNPUBLISHED_OUTBOX_EVENTS = "UnpublishedOutboxEvents"
# Run-queue rows whose counters differed from a recount (the reconciliation corrected them): a trigger bug.
COUNTER_DRIFT = "CounterDrift"
# Review (DESIGN §5). The worker counts each extraction it validated and each that went to review: the
# review rate is their ratio (a metric math expression in the observability stack). The scheduler publishes
# the waiting queue's size and age once a tick, and each decision once: its kind, and the seconds it waited
# (one value per decision, so CloudWatch has p50 and p95).
EXTRACTIONS_VALIDATED = "ExtractionsValidated"
REVIEWS_REQUIRED = "ReviewsRequired"
REVIEWS_WAITING = "ReviewsWaiting"
OLDEST_WAITING_REVIEW_AGE = "OldestWaitingReviewAge"
REVIEW_TIME_TO_DECISION = "ReviewTimeToDecision"
REVIEW_DECISIONS = {"approve": "ReviewsApproved", "correct": "ReviewsCorrected", "reject": "ReviewsRejected"}

# Spend budgets (the worker): each spend threshold announced (80 or 100 percent of a tenant's monthly
# budget), and each attempt that made no call because a budget would be passed.
SPEND_THRESHOLDS_CROSSED = "SpendThresholdsCrossed"
SPEND_BUDGET_STOPS = "SpendBudgetStops"

# The batch path (DESIGN §7). The worker counts each batch the provider took (created by its batcher, or
# adopted by a poller after a crash), each line whose answer was committed under its fence, each job given
# back because its line never ran or never came, and each batch that ended, by its end state. The scheduler
# publishes the open batches (not yet settled) and the oldest one's age once a tick: an alarm watches the age.
BATCHES_SUBMITTED = "BatchesSubmitted"
BATCH_LINES_COMMITTED = "BatchLinesCommitted"
BATCH_JOBS_RETURNED = "BatchJobsReturned"
BATCHES_ENDED = {
    "completed": "BatchesCompleted",
    "expired": "BatchesExpired",
    "failed": "BatchesFailed",
    "cancelled": "BatchesCancelled",
}
OPEN_PROVIDER_BATCHES = "OpenProviderBatches"
OLDEST_OPEN_BATCH_AGE = "OldestOpenBatchAge"


class MetricsSink(Protocol):
    def gauge(self, name: str, value: float, unit: str = "Count") -> None: ...

    def count(self, name: str, value: int = 1) -> None: ...

    def observe(self, name: str, value: float, unit: str = "Count") -> None:
        """One value of a distribution (each is kept, so percentiles can be taken)."""


class PowertoolsMetrics:
    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics
        self._pending = False

    def gauge(self, name: str, value: float, unit: str = "Count") -> None:
        self._metrics.add_metric(name=name, unit=MetricUnit(unit), value=value)
        self._pending = True

    def count(self, name: str, value: int = 1) -> None:
        self._metrics.add_metric(name=name, unit=MetricUnit.Count, value=value)
        self._pending = True

    def observe(self, name: str, value: float, unit: str = "Count") -> None:
        # Values added under one name before a flush go out together, as one EMF array.
        self._metrics.add_metric(name=name, unit=MetricUnit(unit), value=value)
        self._pending = True

    def flush(self) -> None:
        """Writes what was added since the last flush as one EMF line (nothing when nothing was added). A
        long-running process calls this periodically; a Lambda handler has ``log_metrics`` do it."""
        if self._pending:
            self._pending = False
            self._metrics.flush_metrics()


class RecordedMetrics:
    """Keeps the last value of each gauge and the sum of each count; for tests and the local stack."""

    def __init__(self) -> None:
        self.values: dict[str, float] = {}
        self.counts: Counter[str] = Counter()
        self.observed: dict[str, list[float]] = {}

    def gauge(self, name: str, value: float, unit: str = "Count") -> None:
        self.values[name] = value

    def count(self, name: str, value: int = 1) -> None:
        self.counts[name] += value

    def observe(self, name: str, value: float, unit: str = "Count") -> None:
        self.observed.setdefault(name, []).append(value)
