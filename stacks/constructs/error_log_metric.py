"""A count of a service's ERROR log lines, read by a metric filter from Powertools' JSON logs.

Powertools writes one JSON object per line with the logger's extra keys at the top level, so a filter can
match ``$.level`` and keys such as ``$.alert`` without parsing the message.
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_logs as logs
from constructs import Construct

from stacks.constructs.entrypoint_function import METRICS_NAMESPACE
from stacks.constructs.service_metrics import COUNT_PERIOD


class ErrorLogMetric(Construct):
    """``metric`` counts the ERROR lines of ``log_group``; with ``alerts``, only those whose ``alert`` key is
    one of them."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        log_group: logs.ILogGroup,
        metric_name: str,
        alerts: Sequence[str] = (),
    ) -> None:
        super().__init__(scope, construct_id)
        conditions = [logs.FilterPattern.string_value("$.level", "=", "ERROR")]
        if alerts:
            conditions.append(
                logs.FilterPattern.any(
                    *(logs.FilterPattern.string_value("$.alert", "=", alert) for alert in alerts)
                )
            )
        self.filter = logs.MetricFilter(
            self,
            "Filter",
            log_group=log_group,
            filter_pattern=logs.FilterPattern.all(*conditions),
            metric_namespace=METRICS_NAMESPACE,
            metric_name=metric_name,
            metric_value="1",
        )
        self.metric = self.filter.metric(period=COUNT_PERIOD, statistic=cloudwatch.Stats.SUM)
