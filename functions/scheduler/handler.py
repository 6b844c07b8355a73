"""Scheduler Lambda (every minute): reaps expired leases, expires deadlines, publishes backlog metrics,
applies retention."""

from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.utilities.typing import LambdaContext

from tollgate.core.metrics import PowertoolsMetrics
from tollgate.scheduler.tick import run_scheduler
from tollgate.settings import SchedulerSettings
from tollgate.wiring import build_scheduler

logger = Logger(service="tollgate-scheduler")
tracer = Tracer(service="tollgate-scheduler")
metrics = Metrics(namespace="Tollgate", service="tollgate-scheduler")

deps = build_scheduler(SchedulerSettings(), PowertoolsMetrics(metrics))


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    report = run_scheduler(deps)
    logger.info("scheduler tick", extra=report.__dict__)
    return dict(report.__dict__)
