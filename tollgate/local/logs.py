"""Readable, interleaved logs for the local system: one line per record, prefixed by the part that wrote it.

In AWS every process writes Powertools' JSON lines, which CloudWatch indexes. On one machine the API, the
relay, the scheduler, two workers, the webhook dispatcher and the demo ERP share a terminal, so each line
starts with its component (``api``, ``relay``, ``worker-1`` ...) and keeps its keys as ``key=value``.
The component is a log key set in each part's context, so it follows work into the threads it starts.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

from aws_lambda_powertools.logging.formatter import LambdaPowertoolsFormatter

from tollgate.observability import log_context

P = ParamSpec("P")
R = TypeVar("R")

# Keys a person at a terminal does not need on every line.
_HIDDEN = {
    "component",
    "location",
    "timestamp",
    "service",
    "sampling_rate",
    "xray_trace_id",
    "exception_name",
}
_WIDTH = 10


class ReadableFormatter(LambdaPowertoolsFormatter):
    def format(self, record: logging.LogRecord) -> str:
        self._time = time.strftime("%H:%M:%S", time.localtime(record.created))
        # The logger's name starts with its service: "tollgate-worker.execution" -> "worker".
        self._service = record.name.split(".")[0].removeprefix("tollgate-")
        return super().format(record)

    def serialize(self, log: dict[str, Any]) -> str:  # type: ignore[override]
        component = log.get("component") or self._service
        exception = log.pop("exception", None)
        keys = " ".join(
            f"{key}={value}" for key, value in log.items() if key not in _HIDDEN | {"level", "message"}
        )
        line = f"{self._time} {component:<{_WIDTH}} {log.get('level', ''):<7} {log.get('message', '')}"
        line = f"{line}  {keys}" if keys else line
        return f"{line}\n{exception}" if exception else line


def use_readable_logs() -> None:
    """Gives every tollgate logger created so far the readable format (call after the imports).

    Powertools' child loggers (``child=True``) write through their service's logger, which only a deployed
    entrypoint creates; here the service loggers get a handler of their own.
    """
    formatter = ReadableFormatter()
    services = {
        name.split(".")[0] for name in logging.Logger.manager.loggerDict if name.startswith("tollgate")
    }
    for service in sorted(services):
        logger = logging.getLogger(service)
        if not logger.handlers:
            logger.addHandler(logging.StreamHandler(sys.stdout))
            logger.setLevel(logging.INFO)
            logger.propagate = False
        for handler in logger.handlers:
            handler.setFormatter(formatter)


def as_component(name: str, work: Callable[P, R]) -> Callable[P, R]:
    """``work``, with every line it logs prefixed by ``name``."""

    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        with log_context(component=name):
            return work(*args, **kwargs)

    return run
