"""When a job's next attempt may start: full jitter, the provider's Retry-After, and the deadline.

Retries live in this one layer; attempts and their times are persisted on the job, never kept in a
process. An attempt that could not finish before the deadline is never scheduled.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

Jitter = Callable[[float, float], float]


@dataclass(frozen=True)
class RetryPolicy:
    base_seconds: float = 2.0
    cap_seconds: float = 300.0
    # How long one attempt may take; a retry must start early enough to finish before the deadline.
    attempt_timeout_seconds: float = 120.0

    def backoff_ceiling(self, attempt: int) -> float:
        return float(min(self.cap_seconds, self.base_seconds * 2 ** max(attempt - 1, 0)))


def next_attempt_at(
    policy: RetryPolicy,
    *,
    now: datetime,
    deadline_at: datetime,
    attempt: int,
    max_attempts: int,
    retry_after_seconds: float | None = None,
    jitter: Jitter = random.uniform,
) -> datetime | None:
    """The start of the next attempt, or None when attempts or time have run out.

    ``attempt`` is the number of attempts made so far. Full jitter spreads retries of many jobs that
    failed together; a provider's Retry-After is a floor, never shortened by the jitter.
    """
    if attempt >= max_attempts:
        return None
    delay = jitter(0.0, policy.backoff_ceiling(attempt))
    if retry_after_seconds is not None:
        delay = max(delay, retry_after_seconds)
    start = now + timedelta(seconds=delay)
    if start + timedelta(seconds=policy.attempt_timeout_seconds) > deadline_at:
        return None
    return start
