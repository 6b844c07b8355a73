"""The scheduler's backlog gauges as CloudWatch metrics, for alarms and the dashboard (ObservabilityStack) and
scaling (WorkerStack).

``tollgate/scheduler/tick.py`` publishes them once a minute through Powertools, which adds the ``service``
dimension; a metric is only found with exactly the dimensions it was published with. Their names come from
``tollgate/core/metrics.py``, the same constants the scheduler publishes under.
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_cloudwatch as cloudwatch

from stacks.constructs.entrypoint_function import METRICS_NAMESPACE, service_name
from tollgate.core import metrics as published

SCHEDULER_SERVICE = service_name("scheduler")
ONE_MINUTE = cdk.Duration.minutes(1)
RUNNABLE_JOBS = published.RUNNABLE_JOBS
RUNNING_JOBS = published.RUNNING_JOBS
WAITING_RETRIES = published.WAITING_RETRIES
OLDEST_ELIGIBLE_JOB_AGE = published.OLDEST_ELIGIBLE_JOB_AGE
OLDEST_UNPUBLISHED_OUTBOX_AGE = published.OLDEST_UNPUBLISHED_OUTBOX_AGE
UNPUBLISHED_OUTBOX_EVENTS = published.UNPUBLISHED_OUTBOX_EVENTS
COUNTER_DRIFT = published.COUNTER_DRIFT
# The review queue, once a tick: how many results wait for a reviewer and the oldest one's age (seconds);
# and each decision, once: a count per kind and the seconds it waited (one value per decision).
REVIEWS_WAITING = published.REVIEWS_WAITING
OLDEST_WAITING_REVIEW_AGE = published.OLDEST_WAITING_REVIEW_AGE
REVIEW_TIME_TO_DECISION = published.REVIEW_TIME_TO_DECISION
REVIEW_DECISIONS = published.REVIEW_DECISIONS
# The batch path, once a tick: provider batches not yet settled and the oldest one's age (seconds).
OPEN_PROVIDER_BATCHES = published.OPEN_PROVIDER_BATCHES
OLDEST_OPEN_BATCH_AGE = published.OLDEST_OPEN_BATCH_AGE


def scheduler_metric(
    metric_name: str, *, period: cdk.Duration = ONE_MINUTE, label: str | None = None
) -> cloudwatch.Metric:
    """One of the scheduler's gauges, as its maximum over each tick: ``period`` is the stage's tick
    (``StageConfig.tick_period``), so every period holds one value and a silent scheduler shows as missing."""
    return cloudwatch.Metric(
        namespace=METRICS_NAMESPACE,
        metric_name=metric_name,
        dimensions_map={"service": SCHEDULER_SERVICE},
        statistic=cloudwatch.Stats.MAXIMUM,
        period=period,
        label=label,
    )


def scheduler_count(metric_name: str, *, label: str | None = None) -> cloudwatch.Metric:
    """A count the scheduler publishes once a tick (decisions it has seen since the last), summed per hour."""
    return cloudwatch.Metric(
        namespace=METRICS_NAMESPACE,
        metric_name=metric_name,
        dimensions_map={"service": SCHEDULER_SERVICE},
        statistic=cloudwatch.Stats.SUM,
        period=cdk.Duration.hours(1),
        label=label,
    )


def time_to_decision(percentile: str) -> cloudwatch.Metric:
    """The seconds a review waited for its decision, as a percentile (p50, p95) per hour of decisions."""
    return cloudwatch.Metric(
        namespace=METRICS_NAMESPACE,
        metric_name=REVIEW_TIME_TO_DECISION,
        dimensions_map={"service": SCHEDULER_SERVICE},
        statistic=percentile,
        period=cdk.Duration.hours(1),
        label=f"Time to decision {percentile} (s)",
    )
