"""The limiter port. One acquire takes a request, a token reservation and an in-flight permit together, or
nothing; the release after the call reconciles tokens with what the provider reported, never refunds the
request (it was sent), frees the in-flight permit, and passes on a provider 429 as a cooldown.

A worker takes its permit before it claims a job (a slot waiting for budget holds no job that a fairer
claim could have given to another tenant), so two more steps sit between acquire and release: ``resize``
makes the reservation the claimed job's own estimate, and ``cancel`` gives everything back when no call
is made after all (nothing was claimed, or the job ended before its call)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol


@dataclass(frozen=True)
class Reservation:
    pool: str  # provider project + model pool: the scope the limits apply to
    tokens: int  # prompt estimate + max output tokens


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
