"""The limiter port. One acquire takes a request, a token reservation and an in-flight permit together, or
nothing; the release after the call reconciles tokens with what the provider reported, never refunds the
request (it was sent), frees the in-flight permit, and passes on a provider 429 as a cooldown.

A worker takes its permit before it claims a job (a slot waiting for budget holds no job that a fairer
claim could have given to another tenant), so two more steps sit between acquire and release: ``resize``
makes the reservation the claimed job's own estimate, and ``cancel`` gives everything back when no call
is made after all (nothing was claimed, or the job ended before its call).

Service tiers share one pool by reserved shares (``TierShares``). While a higher tier is waiting for budget,
a lower tier may fill the pool only up to its ceiling: batch up to half of the in-flight permits and of the
token bucket, say, normal up to 80%, so that the rest is there for the waiting higher tier as soon as calls
come back. While no higher tier is waiting, a lower tier may use the whole pool: the reservation is a
guarantee, not a cap that leaves capacity idle. The signal is explicit and shared: a tier denied budget
marks itself waiting in the budget's store (for ``recall_seconds``, renewed while it keeps asking, cleared
when it is granted), and a lower tier's grant beyond its ceiling is conditional on no such mark, in the
same atomic write. Calls in flight are never taken back, so a higher tier waits at most for the next call
to end, plus its own poll."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from tollgate.core.tiers import DEFAULT_SERVICE_TIER, SERVICE_TIERS, ServiceTier, higher_tiers


@dataclass(frozen=True)
class Reservation:
    pool: str  # provider project + model pool: the scope the limits apply to
    tokens: int  # prompt estimate + max output tokens
    tier: ServiceTier = DEFAULT_SERVICE_TIER  # whose share of the pool it draws on


@dataclass(frozen=True)
class TierShares:
    """The share of a pool's in-flight permits and token bucket each tier may fill while a higher tier is
    waiting; the high tier, having none above it, may always fill all of it. A ceiling never raises a limit:
    it is a fraction of the pool's own (after AIMD and the provider's headers)."""

    normal: float = 0.8
    batch: float = 0.5
    # How long a higher tier's denial holds lower tiers at their ceilings unless renewed: a few of a waiting
    # caller's polls, so a crashed or satisfied waiter stops holding capacity back soon after.
    recall_seconds: float = 1.0

    def __post_init__(self) -> None:
        if not 0 < self.batch <= self.normal <= 1:
            raise ValueError("tier ceilings must satisfy 0 < batch <= normal <= 1")
        if self.recall_seconds <= 0:
            raise ValueError("a waiting mark must last a while")

    def ceiling(self, tier: ServiceTier) -> float:
        return {"high": 1.0, "normal": self.normal, "batch": self.batch}[tier]

    def in_flight_cap(self, tier: ServiceTier, cap: int, higher_waiting: bool) -> int:
        """Permits ``tier`` may bring the pool (or shard) to: all of them unless a higher tier waits."""
        if not higher_waiting:
            return cap
        return math.floor(cap * self.ceiling(tier) + 1e-9)

    def window(self, tier: ServiceTier, window: float, higher_waiting: bool) -> float:
        """The part of a bucket of ``window`` seconds' worth that ``tier`` may empty."""
        return window if not higher_waiting else window * self.ceiling(tier)

    @staticmethod
    def recalls(tier: ServiceTier) -> bool:
        """Whether a waiting ``tier`` holds any tier below it back (every tier but the lowest)."""
        return tier != SERVICE_TIERS[-1]

    @staticmethod
    def above(tier: ServiceTier) -> tuple[ServiceTier, ...]:
        return higher_tiers(tier)


@dataclass(frozen=True)
class Permit:
    permit_id: str
    pool: str
    tokens: int
    expires_at: datetime


@dataclass(frozen=True)
class Denied:
    wait_seconds: float
    reason: str


@dataclass(frozen=True)
class Outcome:
    """What the call did, for reconciliation: the tokens it really used and any throttling it met."""

    used_tokens: int | None = None
    throttled: bool = False
    retry_after_seconds: float | None = None
    rate_limit_headers: dict[str, str] = field(default_factory=dict)


class LimiterUnavailable(RuntimeError):
    """The budget's store cannot be reached: fail closed, make no call."""


class Limiter(Protocol):
    def try_acquire(self, reservation: Reservation) -> Permit | Denied: ...

    def release(self, permit: Permit, outcome: Outcome) -> None: ...

    def resize(self, permit: Permit, tokens: int) -> Permit:
        """The same permit reserving ``tokens``: the difference is charged (even past empty, as a charge at
        release would be) or refunded. Raises LimiterUnavailable when the budget cannot be reached."""
        ...

    def cancel(self, permit: Permit) -> None:
        """No call was sent under this permit: its request, tokens and in-flight place all go back. Only
        before a call: a request that may have reached the provider is never refunded (use ``release``)."""
        ...
