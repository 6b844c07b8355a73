"""Bounded waits on what the chaos run can observe (a count in the database, a process that met its crash
point, a fault the provider served), which say what they awaited when they run out.

A condition that cannot be read at the moment (the database is away during an outage) counts as not yet met;
its last error is kept for the report. The clock and the pause come from the caller, so a test runs a wait
without sleeping.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Waited:
    met: bool
    seconds: float
    # Empty when met; else what was awaited, for how long, and what was seen last.
    shortfall: str = ""


@dataclass(frozen=True)
class Waiter:
    clock: Callable[[], float]
    # Waits up to the given seconds; returns True when the run was aborted meanwhile.
    pause: Callable[[float], bool]
    interval: float = 0.2

    def until(
        self,
        condition: Callable[[], bool],
        deadline: float,
        awaited: str,
        seen: Callable[[], object] | None = None,
    ) -> Waited:
        """Checks ``condition`` every ``interval`` until it holds, the clock passes ``deadline`` or the run is
        aborted. ``awaited`` names the event (e.g. "the 12th job to be accepted"); ``seen`` reports how far
        the system got, should the wait run out."""
        started = self.clock()
        error: Exception | None = None
        while True:
            try:
                if condition():
                    return Waited(True, self.clock() - started)
            except Exception as failure:  # not readable now: an outage, or a process still starting
                error = failure
            remaining = deadline - self.clock()
            if remaining <= 0:
                why = "ran out"
                break
            if self.pause(min(self.interval, remaining)):
                why = "the run was aborted"
                break
        waited = self.clock() - started
        shortfall = f"waited {waited:.0f} s for {awaited}; {why}"
        last = []
        if seen is not None:
            try:
                last.append(f"seen: {seen()}")
            except Exception as failure:
                error = failure
        if error is not None:
            last.append(f"last error: {type(error).__name__}: {error}")
        if last:
            shortfall += f" ({'; '.join(last)})"
        return Waited(False, waited, shortfall)
