"""Ctrl-C and SIGTERM against a system run in the foreground: a stop asked at any moment, during the start
too, stops what had started, and the process's signal handlers are put back afterwards."""

from __future__ import annotations

import os
import signal

import pytest

from tollgate_dev.local.foreground import INTERRUPTED_EXIT_CODE, StartCancelled, run_in_foreground


class System:
    """Records what was done to it; ``during_start`` runs in the middle of its start, as a user's key
    press would land there."""

    def __init__(self, during_start=None) -> None:
        self.during_start = during_start
        self.calls: list[str] = []
        self.cancelled = False

    def start(self) -> None:
        self.calls.append("start")
        if self.during_start:
            self.during_start()
        # The next step of the start: it ends here when a stop was asked meanwhile.
        if self.cancelled:
            raise StartCancelled
        self.calls.append("started")

    def cancel(self) -> None:
        self.cancelled = True

    def stop(self) -> None:
        self.calls.append("stop")


def handlers() -> tuple[object, object]:
    return signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_once_the_system_is_up_stops_it_and_exits_0(signum):
    before = handlers()
    system = System()
    notes: list[str] = []

    code = run_in_foreground(system, lambda: os.kill(os.getpid(), signum), notes.append)

    assert code == 0
    assert system.calls == ["start", "started", "stop"]
    assert handlers() == before
    assert any("stopping everything" in note for note in notes)


def test_ctrl_c_during_the_start_ends_it_at_the_next_step_and_stops_what_had_started():
    before = handlers()
    system = System(during_start=lambda: os.kill(os.getpid(), signal.SIGINT))
    ready: list[bool] = []

    code = run_in_foreground(system, lambda: ready.append(True), lambda _note: None)

    assert code == INTERRUPTED_EXIT_CODE
    assert system.calls == ["start", "stop"]
    assert ready == []
    assert handlers() == before


def test_a_start_that_fails_still_stops_what_had_started_and_raises():
    def fail() -> None:
        raise OSError("port taken")

    before = handlers()
    system = System(during_start=fail)

    with pytest.raises(OSError, match="port taken"):
        run_in_foreground(system, lambda: None, lambda _note: None)

    assert system.calls == ["start", "stop"]
    assert handlers() == before
