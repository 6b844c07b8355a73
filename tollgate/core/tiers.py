"""Service tiers: which worker service runs a job, and how much of the provider budget it may take while
higher tiers wait. Highest first; the order is the claim's and the limiter's."""

from __future__ import annotations

from typing import Literal, get_args

ServiceTier = Literal["high", "normal", "batch"]
SERVICE_TIERS: tuple[ServiceTier, ...] = get_args(ServiceTier)
DEFAULT_SERVICE_TIER: ServiceTier = "normal"


def higher_tiers(tier: ServiceTier) -> tuple[ServiceTier, ...]:
    """The tiers ranked above ``tier``, highest first."""
    return SERVICE_TIERS[: SERVICE_TIERS.index(tier)]
