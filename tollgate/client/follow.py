"""Following a submitted job until the pipeline is done with it, by polling its URL with backoff; the clock
and the sleep are passed in, so the schedule is tested without waiting."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tollgate.client.api import ApiProblem, ApiUnreachable

# The pipeline is done with a job in these (tollgate.core.job_states.FINISHED_STATES): REVIEW_REQUIRED is
# not final, but only a reviewer moves it on, so waiting longer would wait for a person.
FINISHED = frozenset({"SUCCEEDED", "REVIEW_REQUIRED", "REJECTED", "FAILED_TERMINAL", "CANCELLED"})
FIRST_WAIT_SECONDS = 0.25
MAX_WAIT_SECONDS = 5.0


class StillRunning(Exception):
    """The job had not finished when the wait ran out; ``job`` is its last known view."""

    def __init__(self, job: dict[str, Any], waited: float) -> None:
        super().__init__(f"the job is still {job.get('state')} after {waited:.0f} s")
        self.job = job


@dataclass(frozen=True)
class Backoff:
    first: float = FIRST_WAIT_SECONDS
    cap: float = MAX_WAIT_SECONDS

    def wait(self, polls: int) -> float:
        """Doubles from ``first`` up to ``cap``: quick while a fast job finishes, gentle on a slow one."""
        return float(min(self.cap, self.first * 2 ** min(polls, 16)))


def wait_for_job(
    fetch: Callable[[], dict[str, Any]],
    *,
    timeout: float,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
    on_change: Callable[[dict[str, Any]], None],
    on_retry: Callable[[Exception], None] = lambda _: None,
    backoff: Backoff = Backoff(),
    first: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Polls the job until it is finished and returns its view; ``on_change`` gets each new state version
    seen (the answer to the submit first, when given). An API that does not answer, or answers 429 or 5xx,
    is asked again on the same schedule (or after its Retry-After) until ``timeout``; any other problem is
    raised. StillRunning when the time is up."""
    started = clock()
    job = first
    version = -1
    polls = 0
    at_least = 0.0  # a Retry-After the API asked for
    while True:
        if job is not None:
            if job["state_version"] > version:
                version = job["state_version"]
                on_change(job)
            if job["state"] in FINISHED:
                return job
        pause = max(backoff.wait(polls), at_least)
        polls += 1
        waited = clock() - started
        if waited + pause > timeout:
            raise StillRunning(job or {"state": "unknown"}, waited)
        sleep(pause)
        at_least = 0.0
        try:
            job = fetch()
        except ApiUnreachable as error:
            on_retry(error)
        except ApiProblem as problem:
            if problem.input_problem:
                raise
            on_retry(problem)
            at_least = problem.retry_after or 0.0
