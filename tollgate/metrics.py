"""Where numbers go: CloudWatch through Powertools' embedded metric format, or a list in tests.

Job ids, tenants, attempts and fences are log keys, never metric dimensions (each distinct dimension value
is a separate, billed metric).
"""

from __future__ import annotations

from typing import Protocol

from aws_lambda_powertools import Metrics
from aws_lambda_powertools.metrics import MetricUnit


class MetricsSink(Protocol):
    def gauge(self, name: str, value: float, unit: str = "Count") -> None: ...


class PowertoolsMetrics:
    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics

    def gauge(self, name: str, value: float, unit: str = "Count") -> None:
        self._metrics.add_metric(name=name, unit=MetricUnit(unit), value=value)


class RecordedMetrics:
    """Keeps the last value of each metric; for tests and the local stack's console."""

    def __init__(self) -> None:
        self.values: dict[str, float] = {}

    def gauge(self, name: str, value: float, unit: str = "Count") -> None:
        self.values[name] = value
