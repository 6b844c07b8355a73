"""Chooses the limiter an entrypoint uses from its settings."""

from __future__ import annotations

from tollgate.clock import Clock
from tollgate.limiter.base import Limiter
from tollgate.limiter.local import InProcessLimiter
from tollgate.settings import LimiterSettings


def build_limiter(settings: LimiterSettings, clock: Clock) -> Limiter:
    return InProcessLimiter(
        clock,
        requests_per_minute=settings.provider_requests_per_minute,
        tokens_per_minute=settings.provider_tokens_per_minute,
        max_in_flight=settings.provider_max_in_flight,
    )
