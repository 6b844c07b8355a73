"""The counts ObservabilityStack watches are the ones the worker and the webhook attempt publish: counted where
the work happens, under the watched namespace and service. A metric published under another service or never
counted would leave its alarm silently without data."""

from __future__ import annotations

import ast

import pytest

from stacks.config import REPO_ROOT
from stacks.constructs.entrypoint_function import METRICS_NAMESPACE
from stacks.constructs.service_metrics import (
    DELIVERIES_GAVE_UP,
    DELIVERY_ATTEMPTS_FAILED,
    ENDPOINTS_DISABLED,
    PROVIDER_CALLS,
    PROVIDER_THROTTLED,
    WEBHOOK_ATTEMPT_SERVICE,
    WORKER_SERVICE,
    service_metric,
)
from tollgate.core import metrics

pytestmark = pytest.mark.infrastructure


def _module(path: str) -> ast.Module:
    return ast.parse((REPO_ROOT / path).read_text())


def _constant(tree: ast.Module, node: ast.expr) -> object:
    """A literal, or a module-level name bound to one (``SERVICE = "..."``) or to a ``tollgate.core.metrics``
    constant imported by name."""
    if isinstance(node, ast.Constant):
        return node.value
    assert isinstance(node, ast.Name), ast.dump(node)
    for statement in tree.body:
        if isinstance(statement, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == node.id for target in statement.targets
        ):
            return _constant(tree, statement.value)
        if isinstance(statement, ast.ImportFrom) and statement.module == "tollgate.core.metrics":
            names = {alias.asname or alias.name: alias.name for alias in statement.names}
            if node.id in names:
                return getattr(metrics, names[node.id])
    raise AssertionError(f"{node.id} is not a module-level constant")


def _counted(path: str) -> set[object]:
    tree = _module(path)
    return {
        _constant(tree, node.args[0])
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "count" and node.args
    }


def _published_under(path: str) -> tuple[object, object]:
    tree = _module(path)
    (call,) = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Metrics"
    ]
    keywords = {keyword.arg: keyword.value for keyword in call.keywords}
    return _constant(tree, keywords["namespace"]), _constant(tree, keywords["service"])


def test_the_worker_counts_provider_calls_and_429s() -> None:
    assert {PROVIDER_CALLS, PROVIDER_THROTTLED} <= _counted("tollgate/execution/attempt.py")


def test_the_attempt_use_case_counts_failures_give_ups_and_disabled_endpoints() -> None:
    assert {DELIVERY_ATTEMPTS_FAILED, DELIVERIES_GAVE_UP, ENDPOINTS_DISABLED} <= _counted(
        "tollgate/delivery/attempts.py"
    )


@pytest.mark.parametrize(
    ("entrypoint", "service"),
    [("worker/main.py", WORKER_SERVICE), ("functions/webhook_attempt/handler.py", WEBHOOK_ATTEMPT_SERVICE)],
)
def test_entrypoints_publish_under_the_watched_namespace_and_service(entrypoint: str, service: str) -> None:
    assert _published_under(entrypoint) == (METRICS_NAMESPACE, service)


def test_watched_counts_carry_exactly_the_service_dimension_and_are_summed() -> None:
    metric = service_metric(WORKER_SERVICE, PROVIDER_CALLS)

    assert metric.namespace == METRICS_NAMESPACE
    assert metric.dimensions == {"service": WORKER_SERVICE}
    assert metric.statistic == "Sum"
    assert metric.period.to_seconds() == 300
