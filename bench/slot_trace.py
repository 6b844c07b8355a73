"""Where a worker slot's time goes between one provider call and the next: ``python -m bench.slot_trace``
runs the harness worker with light timing wrapped around it from outside, for diagnosis only.

Every blocking step a slot hands to a thread (the peek, each budget ask, the claim, the document, the
commit, the limiter's release) is recorded with when it was handed over, when a thread took it and when it
ended; the provider call and the slot's idle waits are recorded too. Each slot's steps are told apart by a
context variable set when the slot starts, which threads and the tasks it creates inherit. Nothing in
``tollgate`` knows of it: the wrappers are put in place here, before the worker starts, and the events are
written as JSON lines to ``SLOT_TRACE_FILE`` when it stops. ``summarize`` turns the files into figures.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import itertools
import json
import os
import statistics
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

SLOT: contextvars.ContextVar[str | None] = contextvars.ContextVar("bench_slot", default=None)
_events: list[tuple[Any, ...]] = []


def _outcome(name: str, result: Any) -> str:
    if name == "try_acquire":
        return "granted" if hasattr(result, "permit_id") else f"denied:{getattr(result, 'reason', '?')}"
    if name in ("claim_next_job", "peek_next_job"):
        return "none" if result is None else "some"
    return ""


def install() -> None:
    """Wraps the worker's seams; call before the worker starts."""
    import worker.main as container
    from tollgate.execution import worker as slots

    original_to_thread = asyncio.to_thread

    async def to_thread(func: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        slot = SLOT.get()
        name = getattr(func, "__name__", type(func).__name__)
        handed = time.time()
        taken: list[float] = []

        def run() -> Any:
            taken.append(time.time())
            return func(*args, **kwargs)

        result = await original_to_thread(run)
        if slot is not None:
            held = getattr(result, "permit_id", None) or next(
                (a.permit_id for a in args[:1] if hasattr(a, "permit_id")), ""
            )
            _events.append((slot, name, handed, taken[0], time.time(), _outcome(name, result), held))
        return result

    asyncio.to_thread = to_thread

    original_run_slot = slots._run_slot
    counter = iter(range(10**6))
    worker_id = os.environ.get("WORKER_ID", "w")

    async def run_slot(*args: Any, **kwargs: Any) -> None:
        SLOT.set(f"{worker_id}/{next(counter)}")
        await original_run_slot(*args, **kwargs)

    slots._run_slot = run_slot

    original_wait = slots._wait

    async def wait(event: asyncio.Event, timeout: float) -> None:
        begun = time.time()
        await original_wait(event, timeout)
        if (slot := SLOT.get()) is not None:
            _events.append((slot, "idle_wait", begun, begun, time.time(), ""))

    slots._wait = wait

    from botocore.endpoint import Endpoint

    original_needs_retry = Endpoint._needs_retry

    def needs_retry(self: Any, attempts: int, operation_model: Any, *args: Any, **kwargs: Any) -> Any:
        retrying = original_needs_retry(self, attempts, operation_model, *args, **kwargs)
        if retrying:
            response = kwargs.get("response") or (args[1] if len(args) > 1 else None)
            caught = kwargs.get("caught_exception") or (args[2] if len(args) > 2 else None)
            status = response[0].status_code if response else None
            why = f"{operation_model.name}:{type(caught).__name__ if caught else status}"
            now = time.time()
            _events.append((SLOT.get() or "-", "sdk_retry", now, now, now, why, ""))
        return retrying

    Endpoint._needs_retry = needs_retry  # type: ignore[method-assign]

    original_build = container.build_execution

    def build_execution(*args: Any, **kwargs: Any) -> Any:
        deps = original_build(*args, **kwargs)
        return dataclasses.replace(deps, llm=_TracedLlm(deps.llm))

    container.build_execution = build_execution


class _TracedLlm:
    def __init__(self, inner: Any) -> None:
        self._inner = inner

    async def extract(self, *args: Any, **kwargs: Any) -> Any:
        begun = time.time()
        try:
            return await self._inner.extract(*args, **kwargs)
        finally:
            if (slot := SLOT.get()) is not None:
                _events.append((slot, "provider_call", begun, begun, time.time(), ""))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def write(path: Path) -> None:
    with path.open("w") as out:
        for event in _events:
            out.write(json.dumps(event) + "\n")


def main() -> None:
    from tollgate_dev import worker as harness

    install()
    try:
        harness.main()
    finally:
        write(Path(os.environ["SLOT_TRACE_FILE"]))


# ------------------------------------------------------------------------------------------------ figures

# Steps that run beside the slot's own path (the heartbeat task), not in the gap between calls.
BESIDE = {"extend_lease"}


def _pct(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _spread(values: Sequence[float]) -> dict[str, float | int | None]:
    return {
        "count": len(values),
        "mean_ms": statistics.fmean(values) * 1000 if values else None,
        "p50_ms": (_pct(values, 0.5) or 0) * 1000 if values else None,
        "p95_ms": (_pct(values, 0.95) or 0) * 1000 if values else None,
    }


def load(paths: Iterable[Path]) -> list[tuple[Any, ...]]:
    events: list[tuple[Any, ...]] = []
    for path in paths:
        events.extend(tuple(json.loads(line)) for line in path.read_text().splitlines() if line)
    return events


def summarize(events: list[tuple[Any, ...]], start: float, phases: Sequence[tuple[float, float]]) -> dict:
    """Per phase (seconds after ``start``): each gap between a slot's call ending and its next starting,
    split into the steps in it (queue = waiting for a thread, run = the step itself), plus the time no step
    covers (sleeps between budget asks, idle waits, the event loop); and calls and permits in flight."""
    by_slot: dict[str, list[tuple[Any, ...]]] = defaultdict(list)
    for event in events:
        by_slot[event[0]].append(event)
    out: dict[str, Any] = {}
    for lo, hi in phases:
        gaps: list[float] = []
        parts: dict[str, list[float]] = defaultdict(list)
        asks: list[int] = []
        for slot_events in by_slot.values():
            slot_events.sort(key=lambda e: e[2])
            calls = [e for e in slot_events if e[1] == "provider_call"]
            for before, after in itertools.pairwise(calls):
                gap_start, gap_end = before[4], after[2]
                if not (start + lo <= gap_start < start + hi):
                    continue
                gaps.append(gap_end - gap_start)
                inside = [
                    e
                    for e in slot_events
                    if e[1] not in BESIDE
                    and e[1] != "provider_call"
                    and gap_start <= e[2]
                    and e[4] <= gap_end
                ]
                sums: dict[str, float] = defaultdict(float)
                covered = 0.0
                for _, name, handed, taken, ended, *_ in inside:
                    key = "idle_wait" if name == "idle_wait" else name
                    sums[f"{key}.queue"] += taken - handed
                    sums[f"{key}.run"] += ended - taken
                    covered += ended - handed
                asks.append(sum(1 for e in inside if e[1] == "try_acquire"))
                sums["uncovered"] = (gap_end - gap_start) - covered
                for key in {*parts, *sums}:
                    parts[key].append(sums.get(key, 0.0))
        out[f"{lo:.0f}-{hi:.0f}s"] = {
            "gap": _spread(gaps),
            "budget_asks_per_gap": statistics.fmean(asks) if asks else None,
            "parts_mean_ms": {k: round(statistics.fmean(v) * 1000, 2) for k, v in sorted(parts.items())},
            "parts_p95_ms": {k: round((_pct(v, 0.95) or 0) * 1000, 2) for k, v in sorted(parts.items())},
            "calls_in_flight": _mean_overlap(
                [e for e in events if e[1] == "provider_call"], start + lo, start + hi
            ),
            "permits_held": _mean_overlap(_permits(by_slot), start + lo, start + hi),
        }
    return out


def _permits(by_slot: dict[str, list[tuple[Any, ...]]]) -> list[tuple[Any, ...]]:
    """A permit is held from the end of the ask that granted it to the end of its release or cancel."""
    held = []
    for slot_events in by_slot.values():
        granted_at = None
        for event in sorted(slot_events, key=lambda e: e[2]):
            if event[1] == "try_acquire" and event[5] == "granted":
                granted_at = event[4]
            elif event[1] in ("release", "cancel") and granted_at is not None:
                held.append((event[0], "permit", granted_at, granted_at, event[4], ""))
                granted_at = None
    return held


def _mean_overlap(spans: list[tuple[Any, ...]], lo: float, hi: float) -> float:
    total = sum(max(0.0, min(e[4], hi) - max(e[2], lo)) for e in spans)
    return total / (hi - lo) if hi > lo else 0.0


if __name__ == "__main__":
    main()
