"""The metrics the alarms and the worker's scaling watch are the ones the scheduler publishes: same names, same
namespace, same ``service`` dimension. A renamed gauge would otherwise leave an alarm silently without data."""

from __future__ import annotations

import ast

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

pytestmark = pytest.mark.infrastructure


def _calls(path: str, name: str) -> list[ast.Call]:
    tree = ast.parse((REPO_ROOT / path).read_text())
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and (getattr(node.func, "attr", None) == name or getattr(node.func, "id", None) == name)
    ]


def test_the_watched_gauges_are_published_by_the_scheduler() -> None:
    published = {
        call.args[0].value
        for call in _calls("tollgate/scheduler/tick.py", "gauge")
        if call.args and isinstance(call.args[0], ast.Constant)
    }

    assert {
        RUNNABLE_JOBS,
        RUNNING_JOBS,
        WAITING_RETRIES,
        OLDEST_ELIGIBLE_JOB_AGE,
        OLDEST_UNPUBLISHED_OUTBOX_AGE,
        UNPUBLISHED_OUTBOX_EVENTS,
    } <= published


def test_the_scheduler_publishes_under_the_watched_namespace_and_service() -> None:
    (metrics,) = _calls("functions/scheduler/handler.py", "Metrics")
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
