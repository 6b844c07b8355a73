"""Background loops for the local system: the relay (nudged, and swept on an interval) and the scheduler."""

from __future__ import annotations

import threading
from collections.abc import Callable

from aws_lambda_powertools import Logger

logger = Logger(service="tollgate-local", child=True)


class Loop:
    """Calls ``step`` whenever ``wake`` is set or ``interval`` passes, until stopped. Errors are logged and
    the loop goes on, as a scheduled Lambda would be invoked again."""

    def __init__(
        self, name: str, step: Callable[[], object], interval: float, wake: threading.Event | None = None
    ) -> None:
        self.name = name
        self._step = step
        self._interval = interval
        self.wake = wake or threading.Event()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        # Called after each step, so whoever waits on the local system can look again.
        self.on_step: Callable[[], None] = lambda: None

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        self.wake.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stopped.is_set():
            self.wake.wait(self._interval)
            self.wake.clear()
            if self._stopped.is_set():
                return
            try:
                self._step()
            except Exception:
                logger.exception("local loop step failed", extra={"loop": self.name})
                continue
            self.on_step()
