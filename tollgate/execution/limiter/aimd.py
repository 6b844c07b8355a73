"""How the provider's answers move the budget: AIMD on the effective rate, and the headroom its
``x-ratelimit-*`` headers report. Pure functions; the limiters store the results where they keep state."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class AimdPolicy:
    """The effective rate as a share of the configured ceiling: halved (by default) on a provider 429,
    raised by a fixed step of the ceiling on each success, never above the ceiling nor below a floor."""

    decrease_factor: float = 0.5
    increase_step: float = 0.02
    # A floor above zero: at share 0 nothing would be sent, so no success could ever raise it again.
    min_share: float = 0.05

    def __post_init__(self) -> None:
        if not 0 < self.decrease_factor < 1:
            raise ValueError("the decrease factor is a fraction between 0 and 1")
        if not 0 < self.increase_step <= 1:
            raise ValueError("the increase step is a share of the ceiling between 0 and 1")
        if not 0 < self.min_share <= 1:
            raise ValueError("the minimum share is between 0 and 1")

    def decreased(self, share: float) -> float:
        return max(self.min_share, share * self.decrease_factor)

    def increased(self, share: float) -> float:
        return min(1.0, share + self.increase_step)


@dataclass(frozen=True)
class ProviderHeadroom:
    """What the provider said about its own limits with one response; None where it said nothing usable."""

    limit_requests: int | None = None
    limit_tokens: int | None = None
    remaining_requests: int | None = None
    remaining_tokens: int | None = None

    @property
    def empty(self) -> bool:
        return self == ProviderHeadroom()


def _count(headers: Mapping[str, str], name: str) -> int | None:
    value = headers.get(name)
    if value is None:
        return None
    try:
        number = float(value.strip())
    except ValueError:
        return None
    # A malformed or negative figure says nothing about headroom; ignoring it beats trusting it.
    if not math.isfinite(number) or number < 0:
        return None
    return int(number)


def headroom_from_headers(headers: Mapping[str, str]) -> ProviderHeadroom:
    """Reads OpenAI's ``x-ratelimit-{limit,remaining}-{requests,tokens}`` (names compared case-blind)."""
    lowered = {key.lower(): value for key, value in headers.items()}
    return ProviderHeadroom(
        limit_requests=_count(lowered, "x-ratelimit-limit-requests"),
        limit_tokens=_count(lowered, "x-ratelimit-limit-tokens"),
        remaining_requests=_count(lowered, "x-ratelimit-remaining-requests"),
        remaining_tokens=_count(lowered, "x-ratelimit-remaining-tokens"),
    )


def capped_ceiling(configured_per_minute: float, reported_limit: int | None) -> float:
    """The ceiling to run under: the configured one, or the provider's own limit when that is lower
    (a key moved to a lower tier, a limit shared with other projects)."""
    if reported_limit is None or reported_limit <= 0:
        return configured_per_minute
    return min(configured_per_minute, float(reported_limit))
