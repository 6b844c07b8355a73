"""The two limiters the drain benchmark compares the shared budget with. Neither is for production.

``PerWorkerAimdLimiter`` is what a worker can do alone: pace its own calls, halve its rate on a provider
429 and add back a step of the ceiling per success, with no idea what the other workers send.
``NoLimiter`` grants everything and leaves it to the provider's 429s and the job retry policy.
"""

from __future__ import annotations

import dataclasses
import threading
import uuid
from datetime import datetime, timedelta

from tollgate.core.clock import Clock
from tollgate.execution.limiter.aimd import AimdPolicy
from tollgate.execution.limiter.base import Denied, Outcome, Permit, Reservation


class NoLimiter:
    def __init__(self, clock: Clock, permit_ttl_seconds: float = 300.0) -> None:
        self._clock = clock
        self._ttl = permit_ttl_seconds

    def try_acquire(self, reservation: Reservation) -> Permit | Denied:
        expires_at = self._clock.now() + timedelta(seconds=self._ttl)
        return Permit(uuid.uuid4().hex, reservation.pool, reservation.tokens, expires_at)

    def release(self, permit: Permit, outcome: Outcome) -> None:
        pass

    def resize(self, permit: Permit, tokens: int) -> Permit:
        return dataclasses.replace(permit, tokens=tokens)

    def cancel(self, permit: Permit) -> None:
        pass


class PerWorkerAimdLimiter:
    """Paces this process's calls at an AIMD rate under a fixed ceiling (requests per minute).

    Calls are spaced evenly, one every 1/rate seconds, without bursts: a worker alone has no budget to
    save up for. Tokens and calls in flight are left to the provider, as a single worker cannot see them.
    """

    def __init__(
        self,
        clock: Clock,
        *,
        ceiling_per_minute: float,
        aimd: AimdPolicy | None = None,
        permit_ttl_seconds: float = 300.0,
    ) -> None:
        if ceiling_per_minute <= 0:
            raise ValueError("the ceiling must allow some calls")
        self._clock = clock
        self._ceiling = ceiling_per_minute / 60.0
        self._aimd = aimd or AimdPolicy(increase_step=0.05)
        self._ttl = permit_ttl_seconds
        self._share = 1.0
        self._next_at: datetime | None = None
        self._lock = threading.Lock()

    @property
    def requests_per_second(self) -> float:
        with self._lock:
            return self._ceiling * self._share

    def try_acquire(self, reservation: Reservation) -> Permit | Denied:
        with self._lock:
            now = self._clock.now()
            if self._next_at is not None and now < self._next_at:
                return Denied((self._next_at - now).total_seconds(), "requests")
            start = now if self._next_at is None else max(self._next_at, now)
            self._next_at = start + timedelta(seconds=1 / (self._ceiling * self._share))
            return Permit(
                uuid.uuid4().hex, reservation.pool, reservation.tokens, now + timedelta(seconds=self._ttl)
            )

    def release(self, permit: Permit, outcome: Outcome) -> None:
        with self._lock:
            if outcome.throttled:
                self._share = self._aimd.decreased(self._share)
            elif outcome.used_tokens is not None:
                self._share = self._aimd.increased(self._share)

    def resize(self, permit: Permit, tokens: int) -> Permit:
        return dataclasses.replace(permit, tokens=tokens)  # tokens are left to the provider

    def cancel(self, permit: Permit) -> None:
        """The paced slot goes unused, as a worker alone has nobody to hand it to."""
