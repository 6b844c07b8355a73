"""An in-process limiter: the same budget for the calls of one process. It is exact for one worker and
the fallback for tests; several workers share a budget only through the DynamoDB limiter. Tiers share it
as they share the DynamoDB one (base.py): a waiting higher tier holds lower tiers at their ceilings."""

from __future__ import annotations

import dataclasses
import threading
import uuid
from datetime import datetime, timedelta

from tollgate.core.clock import Clock
from tollgate.core.tiers import ServiceTier
from tollgate.execution.limiter.base import Denied, Outcome, Permit, Reservation, TierShares

DEFAULT_COOLDOWN_SECONDS = 1.0


class InProcessLimiter:
    def __init__(
        self,
        clock: Clock,
        *,
        requests_per_minute: float,
        tokens_per_minute: float,
        max_in_flight: int,
        permit_ttl_seconds: float = 300.0,
        tier_shares: TierShares | None = None,
    ) -> None:
        self._clock = clock
        self._shares = tier_shares or TierShares()
        # Until when each tier is waiting for budget (set on its denials, cleared by its grant).
        self._waiting: dict[ServiceTier, datetime] = {}
        self._rpm = requests_per_minute
        self._tpm = tokens_per_minute
        self._max_in_flight = max_in_flight
        self._ttl = permit_ttl_seconds
        self._lock = threading.Lock()
        # Token buckets start full, refill continuously at rate/60 per second, capped at one minute's worth.
        self._requests = requests_per_minute
        self._tokens = tokens_per_minute
        self._in_flight: dict[str, Permit] = {}
        self._refilled_at = clock.now()
        self._cooldown_until = clock.now()

    def _refill(self) -> None:
        now = self._clock.now()
        elapsed = max((now - self._refilled_at).total_seconds(), 0.0)
        self._requests = min(self._rpm, self._requests + elapsed * self._rpm / 60)
        self._tokens = min(self._tpm, self._tokens + elapsed * self._tpm / 60)
        self._refilled_at = now
        # A holder that died never releases; its permit lapses instead.
        for permit_id in [p.permit_id for p in self._in_flight.values() if p.expires_at <= now]:
            del self._in_flight[permit_id]

    def try_acquire(self, reservation: Reservation) -> Permit | Denied:
        with self._lock:
            self._refill()
            now = self._clock.now()
            if now < self._cooldown_until:
                return Denied((self._cooldown_until - now).total_seconds(), "cooldown")
            tier = reservation.tier
            recalled = any(self._waiting.get(higher, now) > now for higher in self._shares.above(tier))
            denied = self._deny(reservation, recalled)
            if denied is not None:
                if self._shares.recalls(tier):
                    self._waiting[tier] = now + timedelta(seconds=self._shares.recall_seconds)
                return denied
            self._waiting.pop(tier, None)
            self._requests -= 1
            self._tokens -= reservation.tokens
            permit = Permit(
                str(uuid.uuid4()), reservation.pool, reservation.tokens, now + timedelta(seconds=self._ttl)
            )
            self._in_flight[permit.permit_id] = permit
            return permit

    def _deny(self, reservation: Reservation, recalled: bool) -> Denied | None:
        """Why ``reservation`` cannot be granted now, or None; "reserved" when only a higher tier's share
        stands in the way."""
        cap = self._shares.in_flight_cap(reservation.tier, self._max_in_flight, recalled)
        # The tier may empty this part of the token bucket: what it must leave is the higher tiers'.
        kept = self._tpm * (1 - self._shares.window(reservation.tier, 1.0, recalled))
        if len(self._in_flight) >= cap:
            return Denied(0.05, "in_flight" if cap == self._max_in_flight else "reserved")
        if self._requests < 1:
            return Denied((1 - self._requests) * 60 / self._rpm, "requests")
        if self._tokens - kept < reservation.tokens:
            wait = (reservation.tokens + kept - self._tokens) * 60 / self._tpm
            return Denied(wait, "tokens" if not kept or self._tokens < reservation.tokens else "reserved")
        return None

    def release(self, permit: Permit, outcome: Outcome) -> None:
        with self._lock:
            self._refill()
            self._in_flight.pop(permit.permit_id, None)
            if outcome.used_tokens is not None:
                # Refund what was reserved but not used, or charge what was used beyond it.
                self._tokens = min(self._tpm, self._tokens + permit.tokens - outcome.used_tokens)
            if outcome.throttled:
                wait = outcome.retry_after_seconds or DEFAULT_COOLDOWN_SECONDS
                self._cooldown_until = max(self._cooldown_until, self._clock.now() + timedelta(seconds=wait))

    def resize(self, permit: Permit, tokens: int) -> Permit:
        with self._lock:
            self._refill()
            # A charge may take the bucket below empty: later acquires wait until it has refilled.
            self._tokens = min(self._tpm, self._tokens + permit.tokens - tokens)
            resized = dataclasses.replace(permit, tokens=tokens)
            if permit.permit_id in self._in_flight:
                self._in_flight[permit.permit_id] = resized
            return resized

    def cancel(self, permit: Permit) -> None:
        with self._lock:
            self._refill()
            # Only a permit still held gives anything back: cancelling twice, or after it lapsed, returns
            # nothing more than was taken.
            if self._in_flight.pop(permit.permit_id, None) is None:
                return
            self._requests = min(self._rpm, self._requests + 1)
            self._tokens = min(self._tpm, self._tokens + permit.tokens)

    @property
    def in_flight(self) -> int:
        with self._lock:
            return len(self._in_flight)
