"""The metrics the alarms and the worker's scaling watch are the ones the scheduler publishes: same names, same
namespace, same ``service`` dimension. A renamed gauge would otherwise leave an alarm silently without data."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from types import SimpleNamespace
from typing import Any
from uuid import UUID

import pytest

from stacks.config import REPO_ROOT
from stacks.constructs.backlog_metrics import (
    OLDEST_ELIGIBLE_JOB_AGE,
    OLDEST_UNPUBLISHED_OUTBOX_AGE,
    RUNNABLE_JOBS,
    RUNNING_JOBS,
    SCHEDULER_SERVICE,
    UNPUBLISHED_OUTBOX_EVENTS,
    WAITING_RETRIES,
    scheduler_metric,
)
from stacks.constructs.entrypoint_function import METRICS_NAMESPACE
from tollgate.core.clock import FakeClock, SystemClock, new_id
from tollgate.core.metrics import RecordedMetrics
from tollgate.core.retry import RetryPolicy
from tollgate.db import load_queries
from tollgate.scheduler.tick import SchedulerDeps, SchedulerReport, publish_backlog_metrics

pytestmark = pytest.mark.infrastructure


class FixedBacklog:
    """Stands in for the database in the scheduler's two backlog reads, with a backlog whose every figure
    differs, so a gauge published under another gauge's name shows."""

    def __init__(self, clock: FakeClock) -> None:
        self.q = load_queries()
        now = clock.now()
        self._answers = {
            self.q.backlog_metrics: {
                "runnable": 3,
                "running": 2,
                "waiting": 1,
                "oldest_eligible": now - timedelta(seconds=90),
            },
            self.q.oldest_unpublished_outbox: {"oldest": now - timedelta(seconds=30), "unpublished": 4},
        }

    @contextmanager
    def transaction(self, tenant_id: UUID | None = None) -> Iterator[FixedBacklog]:
        yield self

    def execute(self, sql: str, params: dict[str, Any] | None = None) -> SimpleNamespace:
        answer = self._answers[sql]
        return SimpleNamespace(fetchone=lambda: answer)


def test_the_scheduler_publishes_every_watched_gauge_under_its_watched_name() -> None:
    clock = FakeClock(SystemClock().now())
    recorded = RecordedMetrics()
    deps = SchedulerDeps(
        db=FixedBacklog(clock),  # type: ignore[arg-type]
        clock=clock,
        new_id=new_id,
        metrics=recorded,
        retry_policy=RetryPolicy(),
        jitter=lambda low, high: high,
    )

    publish_backlog_metrics(deps, SchedulerReport())

    assert recorded.values == {
        RUNNABLE_JOBS: 3,
        RUNNING_JOBS: 2,
        WAITING_RETRIES: 1,
        OLDEST_ELIGIBLE_JOB_AGE: 90.0,
        OLDEST_UNPUBLISHED_OUTBOX_AGE: 30.0,
        UNPUBLISHED_OUTBOX_EVENTS: 4,
    }


def test_the_scheduler_publishes_under_the_watched_namespace_and_service() -> None:
    tree = ast.parse((REPO_ROOT / "functions/scheduler/handler.py").read_text())
    (metrics,) = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Metrics"
    ]
    keywords = {keyword.arg: keyword.value for keyword in metrics.keywords}

    assert isinstance(keywords["namespace"], ast.Constant)
    assert isinstance(keywords["service"], ast.Constant)
    assert keywords["namespace"].value == METRICS_NAMESPACE
    assert keywords["service"].value == SCHEDULER_SERVICE


def test_watched_metrics_carry_exactly_the_service_dimension() -> None:
    metric = scheduler_metric(RUNNABLE_JOBS)

    assert metric.namespace == METRICS_NAMESPACE
    assert metric.dimensions == {"service": SCHEDULER_SERVICE}
    assert metric.statistic == "Maximum"
