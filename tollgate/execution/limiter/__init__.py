"""The provider budget: requests/min, tokens/min and calls in flight, acquired together before each call."""

from tollgate.execution.limiter.base import Denied, Limiter, LimiterUnavailable, Permit, Reservation

__all__ = ["Denied", "Limiter", "LimiterUnavailable", "Permit", "Reservation"]
