"""The scheduler's backlog gauges as CloudWatch metrics, for alarms and the dashboard (ObservabilityStack) and
scaling (WorkerStack).

``tollgate/scheduler/tick.py`` publishes them once a minute through Powertools, which adds the ``service``
dimension; a metric is only found with exactly the dimensions it was published with.
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_cloudwatch as cloudwatch

from stacks.constructs.entrypoint_function import METRICS_NAMESPACE, service_name

SCHEDULER_SERVICE = service_name("scheduler")
RUNNABLE_JOBS = "RunnableJobs"
RUNNING_JOBS = "RunningJobs"
WAITING_RETRIES = "WaitingRetries"
OLDEST_ELIGIBLE_JOB_AGE = "OldestEligibleJobAge"
OLDEST_UNPUBLISHED_OUTBOX_AGE = "OldestUnpublishedOutboxAge"
UNPUBLISHED_OUTBOX_EVENTS = "UnpublishedOutboxEvents"


def scheduler_metric(metric_name: str, *, label: str | None = None) -> cloudwatch.Metric:
    """One of the scheduler's gauges, as its maximum over each one-minute tick."""
    return cloudwatch.Metric(
        namespace=METRICS_NAMESPACE,
        metric_name=metric_name,
        dimensions_map={"service": SCHEDULER_SERVICE},
        statistic=cloudwatch.Stats.MAXIMUM,
        period=cdk.Duration.minutes(1),
        label=label,
    )
