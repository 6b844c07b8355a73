"""Runs the local system in the foreground: up until Ctrl-C or SIGTERM, and always stopped on the way out.

A Ctrl-C can come at any moment, also while the pieces are still starting. It never raises in the middle of
a step (a KeyboardInterrupt inside the embedded PostgreSQL's start would leave that server running with no
one to stop it): it asks the start to end at its next step, and then whatever had started is stopped. A
second Ctrl-C ends the process at once.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Protocol

# The shell's convention for a process ended by SIGINT.
INTERRUPTED_EXIT_CODE = 130


class StartCancelled(Exception):
    """Raised by a system's ``start`` at its next step once ``cancel`` was called."""


class ForegroundSystem(Protocol):
    def start(self) -> object: ...

    def cancel(self) -> None: ...

    def stop(self) -> None: ...


def run_in_foreground(
    system: ForegroundSystem, on_ready: Callable[[], None], on_stopping: Callable[[str], None]
) -> int:
    """Starts ``system``, calls ``on_ready``, waits for SIGINT or SIGTERM, stops it; returns the exit code
    (0 for a stop asked once the system was up, 130 when the start itself was interrupted).

    Must run on the main thread, where Python runs signal handlers.
    """
    stop_requested = threading.Event()
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}

    def cancel_start(signum: int, frame: FrameType | None) -> None:
        on_stopping("interrupted while starting; stopping after the current step")
        system.cancel()
        signal.signal(signal.SIGINT, quit_now)
        signal.signal(signal.SIGTERM, quit_now)

    def request_stop(signum: int, frame: FrameType | None) -> None:
        stop_requested.set()

    def quit_now(signum: int, frame: FrameType | None) -> None:
        on_stopping("stopping again at once, without waiting for the rest")
        os._exit(INTERRUPTED_EXIT_CODE)

    exit_code = 0
    try:
        signal.signal(signal.SIGINT, cancel_start)
        signal.signal(signal.SIGTERM, cancel_start)
        try:
            system.start()
        except StartCancelled:
            exit_code = INTERRUPTED_EXIT_CODE
        except BaseException:
            system.stop()  # a start that failed (a port taken, say) still stops what it had started
            raise
        else:
            signal.signal(signal.SIGINT, request_stop)
            signal.signal(signal.SIGTERM, request_stop)
            on_ready()
            stop_requested.wait()
        signal.signal(signal.SIGINT, quit_now)
        signal.signal(signal.SIGTERM, quit_now)
        on_stopping("stopping everything that was started (Ctrl-C again to quit at once)")
        system.stop()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return exit_code
