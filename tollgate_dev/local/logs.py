"""Readable, interleaved logs for the local system: one line per record, prefixed by the part that wrote it.

In AWS every process writes Powertools' JSON lines, which CloudWatch indexes. On one machine the API, the
relay, the scheduler, two workers, the webhook dispatcher and the demo ERP share a terminal, so each line
starts with its component (``api``, ``relay``, ``worker-1`` ...) and keeps its keys as ``key=value``.
The component is a log key set in each part's context, so it follows work into the threads it starts.
``tollgate local demo`` writes the same lines into a file instead, so its terminal shows only its progress.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

from aws_lambda_powertools.logging.formatter import LambdaPowertoolsFormatter

from tollgate.core.observability import log_context

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


def _service_loggers() -> list[logging.Logger]:
    """The top-level logger of every tollgate service created so far ("tollgate-worker", "tollgate" ...)."""
    services = {
        name.split(".")[0] for name in logging.Logger.manager.loggerDict if name.startswith("tollgate")
    }
    return [logging.getLogger(service) for service in sorted(services)]


def use_readable_logs() -> None:
    """Gives every tollgate logger created so far the readable format (call after the imports).

    Powertools' child loggers (``child=True``) write through their service's logger, which only a deployed
    entrypoint creates; here the service loggers get a handler of their own.
    """
    formatter = ReadableFormatter()
    for logger in _service_loggers():
        if not logger.handlers:
            logger.addHandler(logging.StreamHandler(sys.stdout))
            logger.setLevel(logging.INFO)
            logger.propagate = False
        for handler in logger.handlers:
            handler.setFormatter(formatter)


@contextmanager
def logs_into(path: Path) -> Iterator[Path]:
    """Inside the block every log record is a readable line in ``path`` (started afresh), not on the terminal.

    Tollgate's loggers write their lines there, and so does anything else at WARNING or above (libraries,
    Python's warnings), so the terminal shows only what the command prints itself. Call it after the imports,
    as ``use_readable_logs``; everything it changed is put back when the block ends.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    # The file closes last, after every handler has been turned back from it.
    with path.open("w", encoding="utf-8", buffering=1) as stream, ExitStack() as undo:
        formatter = ReadableFormatter()
        for logger in _service_loggers():
            undo.callback(_restore_logger(logger))
            if not logger.handlers:
                logger.addHandler(logging.StreamHandler(stream))
                logger.setLevel(logging.INFO)
                logger.propagate = False
            for handler in logger.handlers:
                handler.setFormatter(formatter)
                if isinstance(handler, logging.StreamHandler):
                    handler.setStream(stream)
        others = logging.StreamHandler(stream)
        others.setLevel(logging.WARNING)
        others.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
        root = logging.getLogger()
        root.addHandler(others)
        undo.callback(root.removeHandler, others)
        logging.captureWarnings(True)
        undo.callback(logging.captureWarnings, False)
        yield path


def _restore_logger(logger: logging.Logger) -> Callable[[], None]:
    """A function that puts back ``logger``'s handlers, their formats and streams, level and propagation."""
    handlers = [(h, h.formatter, getattr(h, "stream", None)) for h in logger.handlers]
    level, propagate = logger.level, logger.propagate

    def restore() -> None:
        logger.handlers = [handler for handler, _, _ in handlers]
        for handler, formatter, stream in handlers:
            handler.setFormatter(formatter)
            if isinstance(handler, logging.StreamHandler) and stream is not None:
                handler.setStream(stream)
        logger.setLevel(level)
        logger.propagate = propagate

    return restore


def as_component(name: str, work: Callable[P, R]) -> Callable[P, R]:
    """``work``, with every line it logs prefixed by ``name``."""

    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        with log_context(component=name):
            return work(*args, **kwargs)

    return run
