"""Monthly spend budgets: the month a moment belongs to, what a job may cost, and the budget checks that
admission and the worker share. Pure: the counters they read come from the database (migration 0016)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal

Prices = Mapping[str, tuple[float, float]]
# Spend thresholds announced once each per tenant and month, in percent of the budget.
THRESHOLDS = (80, 100)
MICRO = Decimal("0.000001")


def month_of(at: datetime) -> date:
    """The first day of ``at``'s UTC month: the key of its spend row."""
    at = at.astimezone(UTC)
    return date(at.year, at.month, 1)


def next_month_start(at: datetime) -> datetime:
    """The first instant of the UTC month after ``at``'s: when a month's budget opens again."""
    month = month_of(at)
    year, number = (month.year + 1, 1) if month.month == 12 else (month.year, month.month + 1)
    return datetime(year, number, 1, tzinfo=UTC)


def seconds_until_next_month(at: datetime) -> int:
    """Retry-After for a spend refusal: whole seconds, at least one, until the next month starts."""
    return max(1, math.ceil((next_month_start(at) - at).total_seconds()))


def top_price_per_token(prices: Prices, model: str | None = None) -> Decimal:
    """The dearest per-token price, input or output, of ``model`` (or of every priced model): an estimate at
    it is never below what the tokens can cost, whichever way they split between input and output."""
    rows = [prices.get(model, (0.0, 0.0))] if model is not None else list(prices.values())
    highest = max((max(pair) for pair in rows), default=0.0)
    return Decimal(str(highest)) / Decimal(1_000_000)


def estimated_cost(prices: Prices, tokens: int, model: str | None = None) -> Decimal:
    """A job's (or one attempt's) estimated cost: its token estimate at the dearest price, rounded up to the
    micro-dollar the counters keep."""
    cost = top_price_per_token(prices, model) * tokens
    return cost.quantize(MICRO, rounding="ROUND_CEILING")


@dataclass(frozen=True)
class MonthSpend:
    """A tenant's month as the counters have it, with the system's; budgets None when there is none."""

    budget: Decimal | None
    spent: Decimal
    reserved: Decimal
    system_budget: Decimal | None
    system_spent: Decimal
    system_reserved: Decimal

    @classmethod
    def of(cls, row: Mapping[str, object], system_budget: float | None) -> MonthSpend:
        def money(value: object) -> Decimal:
            return Decimal(str(value or 0))

        budget = row["budget"]
        return cls(
            budget=None if budget is None else money(budget),
            spent=money(row["spent"]),
            reserved=money(row["reserved"]),
            system_budget=None if system_budget is None else Decimal(str(system_budget)),
            system_spent=money(row["system_spent"]),
            system_reserved=money(row["system_reserved"]),
        )

    def admission_refusal(self, estimate: Decimal) -> str | None:
        """Why a job estimated at ``estimate`` may not be accepted now, or None. Accepted jobs' reservations
        count with what was spent, so the jobs admitted in a month never add up to more than the budget."""
        if self.budget is not None and self.spent + self.reserved + estimate > self.budget:
            return (
                f"the tenant's monthly budget of {self.budget} USD would be passed: {self.spent} USD spent "
                f"and {self.reserved} USD held for unfinished jobs this month, and this job may cost up to "
                f"{estimate} USD"
            )
        if (
            self.system_budget is not None
            and self.system_spent + self.system_reserved + estimate > self.system_budget
        ):
            return f"the system's monthly budget of {self.system_budget} USD would be passed"
        return None

    def call_refusal(self, estimate: Decimal) -> str | None:
        """Why the worker may not start a call estimated at ``estimate``, or None: only what was spent
        counts here (the job's own reservation is part of what is held, so it is not counted against it)."""
        if self.budget is not None and self.spent + estimate > self.budget:
            return (
                f"the tenant's monthly budget of {self.budget} USD would be passed ({self.spent} USD spent)"
            )
        if self.system_budget is not None and self.system_spent + estimate > self.system_budget:
            return f"the system's monthly budget of {self.system_budget} USD would be passed"
        return None


def thresholds_crossed(previous: int, reached: int) -> tuple[int, ...]:
    """The thresholds to announce when a month moves from ``previous`` announced to ``reached``."""
    return tuple(t for t in THRESHOLDS if previous < t <= reached)
