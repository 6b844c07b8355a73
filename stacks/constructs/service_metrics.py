"""The worker's and the webhook attempt's own metrics, and those derived from their logs, by name.

ObservabilityStack's alarms and dashboard both read them from here, so a graph and the alarm beside it can
never watch two spellings of one metric. The scheduler's gauges live in ``backlog_metrics``.
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_cloudwatch as cloudwatch

from stacks.constructs.entrypoint_function import METRICS_NAMESPACE, service_name
from tollgate.core import metrics as counted

# Powertools publishes each metric with exactly one dimension, the service; a query must name the same one.
WORKER_SERVICE = "tollgate-worker"
WEBHOOK_ATTEMPT_SERVICE = service_name("webhook_attempt")

# Counted by the code itself, under names tollgate/core/metrics.py gives both sides. tollgate-worker: one per
# request sent to the provider, one per request it answered with 429. tollgate-webhook-attempt: one per
# attempt without a 2xx, per delivery whose schedule ran out (or whose endpoint was disabled), and per
# endpoint disabled (410, or failing for endpoint_disable_after_days).
PROVIDER_CALLS = counted.PROVIDER_CALLS
PROVIDER_THROTTLED = counted.PROVIDER_THROTTLED
DELIVERY_ATTEMPTS_FAILED = counted.DELIVERY_ATTEMPTS_FAILED
DELIVERIES_GAVE_UP = counted.DELIVERIES_GAVE_UP
ENDPOINTS_DISABLED = counted.ENDPOINTS_DISABLED
# tollgate-worker, per result it validated, and per result that went to review (0 or 1 each time): their
# ratio is the review rate.
EXTRACTIONS_VALIDATED = counted.EXTRACTIONS_VALIDATED
REVIEWS_REQUIRED = counted.REVIEWS_REQUIRED
# tollgate-worker's batch path: per batch the provider took, per line committed under its fence, per job given
# back (its line never ran or never came), and per batch ended, one name per end state.
BATCHES_SUBMITTED = counted.BATCHES_SUBMITTED
BATCH_LINES_COMMITTED = counted.BATCH_LINES_COMMITTED
BATCH_JOBS_RETURNED = counted.BATCH_JOBS_RETURNED
BATCHES_ENDED = counted.BATCHES_ENDED

# Counted by metric filters on log groups, which publish without any dimension.
WORKER_ERRORS = "WorkerErrors"
WEBHOOK_ENDPOINT_ALERTS = "WebhookEndpointAlerts"
# Logged by tollgate/delivery/attempts.py as ERROR lines with an "alert" key. "exhausted" and "disabled"
# are left out on purpose: DeliveriesGaveUp and EndpointsDisabled count those, so one event pages once.
ENDPOINT_ALERTS = ("auth",)

# Counts are summed over five minutes: one-minute sums of rare events make spiky graphs and twitchy alarms.
COUNT_PERIOD = cdk.Duration.minutes(5)


def service_metric(service: str, metric_name: str, *, label: str | None = None) -> cloudwatch.Metric:
    """A count that one service publishes, summed per period."""
    return cloudwatch.Metric(
        namespace=METRICS_NAMESPACE,
        metric_name=metric_name,
        dimensions_map={"service": service},
        statistic=cloudwatch.Stats.SUM,
        period=COUNT_PERIOD,
        label=label,
    )
