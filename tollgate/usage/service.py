"""Usage use cases: read a tenant's (or every tenant's) usage over a range of days, announce spend
thresholds when an attempt's cost crosses them, set a tenant's monthly budget. Everything reads the counter
rows the triggers of migration 0016 keep; nothing here reads attempts."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal
from enum import StrEnum
from typing import Any
from uuid import UUID

from pydantic import BaseModel, Field

from tollgate.core.clock import IdFactory
from tollgate.core.errors import NotFound, ValidationFailed
from tollgate.db import Database
from tollgate.db.database import Conn
from tollgate.db.queries import Queries
from tollgate.events import TenantSpendThreshold, outbox_row
from tollgate.usage.spend import MonthSpend, thresholds_crossed

MAX_RANGE_DAYS = 366
# What usage_by_attempts sums, and so what a report's total adds up over its rows.
ATTEMPT_TOTALS = (
    "attempts",
    "input_tokens",
    "output_tokens",
    "cost_usd",
    "batch_attempts",
    "batch_discount_usd",
)


class UsageDimension(StrEnum):
    DAY = "day"
    JOB_TYPE = "job_type"
    MODEL = "model"


class UsageRow(BaseModel):
    """One group of usage. A dimension not grouped by is null. Jobs are counted on the UTC day they
    finished; attempts, tokens and cost on the day each attempt closed."""

    tenant: str | None = Field(default=None, description="The tenant's name (only across tenants).")
    day: date | None = None
    job_type: str | None = None
    model: str | None = Field(
        default=None, description="The attempts' model; empty for attempts that ended before any call."
    )
    attempts: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: Decimal = Decimal("0")
    batch_attempts: int = Field(
        default=0, description="Of the attempts, those made through a provider batch (the Batch API)."
    )
    batch_discount_usd: Decimal = Field(
        default=Decimal("0"),
        description="What the batch price saved against the list price; cost_usd is what was paid, so "
        "cost_usd + batch_discount_usd is the cost at the list price.",
    )
    finished_jobs: int | None = Field(
        default=None, description="Jobs that reached a finished state; null when grouped by model."
    )
    completed_jobs: int | None = Field(
        default=None, description="Jobs that reached SUCCEEDED; null when grouped by model."
    )
    completed_cost_usd: Decimal | None = Field(
        default=None,
        description="Cost of all attempts of the completed jobs; null when grouped by model (a job's "
        "attempts may use several models).",
    )
    cost_per_completed_job: Decimal | None = Field(
        default=None,
        description="completed_cost_usd / completed_jobs; null without completed jobs or when grouped by "
        "model.",
    )


class UsageReport(BaseModel):
    from_day: date = Field(serialization_alias="from")
    to_day: date = Field(serialization_alias="to")
    group_by: list[UsageDimension]
    rows: list[UsageRow]
    total: UsageRow = Field(description="The whole range, every dimension summed.")


@dataclass(frozen=True)
class UsageQuery:
    from_day: date
    to_day: date
    group_by: tuple[UsageDimension, ...]


def parse_usage_query(
    from_text: str | None, to_text: str | None, group_by: str | None, *, today: date
) -> UsageQuery:
    """The range and grouping a request asks for; 422 for a date that is not one, a reversed or too long
    range, or an unknown dimension. Without dates: the current UTC month to today."""
    errors: list[dict[str, Any]] = []

    def day(text: str | None, name: str, default: date) -> date:
        if text is None or text == "":
            return default
        try:
            return date.fromisoformat(text)
        except ValueError:
            errors.append({"loc": ["query", name], "msg": "not a date (YYYY-MM-DD)"})
            return default

    to_day = day(to_text, "to", today)
    from_day = day(from_text, "from", to_day.replace(day=1))
    dimensions: list[UsageDimension] = []
    for raw in (group_by or "").split(","):
        name = raw.strip()
        if not name:
            continue
        try:
            dimension = UsageDimension(name)
        except ValueError:
            errors.append({"loc": ["query", "group_by"], "msg": f"unknown dimension {name!r}"})
            continue
        if dimension not in dimensions:
            dimensions.append(dimension)
    if not errors and from_day > to_day:
        errors.append({"loc": ["query", "from"], "msg": "from is after to"})
    if not errors and (to_day - from_day).days + 1 > MAX_RANGE_DAYS:
        errors.append({"loc": ["query", "to"], "msg": f"the range is longer than {MAX_RANGE_DAYS} days"})
    if errors:
        raise ValidationFailed(
            "from and to are UTC days (YYYY-MM-DD, inclusive, at most 366 apart); group_by is a comma list "
            "of day, job_type, model",
            errors=errors,
        )
    return UsageQuery(from_day, to_day, tuple(dimensions))


def get_usage(db: Database, tenant_id: UUID | None, query: UsageQuery) -> UsageReport:
    """Usage over the range: for one tenant (its own transaction, row-level security), or with None for
    every tenant by name (support staff, as tollgate_system)."""
    by = set(query.group_by)
    params = {
        "tenant_id": tenant_id,
        "from_day": query.from_day,
        "to_day": query.to_day,
        "by_tenant": tenant_id is None,
        "by_day": UsageDimension.DAY in by,
        "by_job_type": UsageDimension.JOB_TYPE in by,
        "by_model": UsageDimension.MODEL in by,
    }
    with db.transaction(tenant_id) as conn:
        attempts = conn.execute(db.q.usage_by_attempts, params).fetchall()
        jobs = conn.execute(db.q.usage_by_jobs, params).fetchall()
    jobs_by_key = {(r["tenant"], r["day"], r["job_type"]): r for r in jobs}
    rows: list[UsageRow] = []
    if UsageDimension.MODEL in by:
        rows = [UsageRow.model_validate(r) for r in attempts]
    else:
        keys = sorted(
            {(r["tenant"], r["day"], r["job_type"]) for r in attempts} | set(jobs_by_key),
            key=lambda k: tuple("" if v is None else str(v) for v in k),
        )
        by_key = {(r["tenant"], r["day"], r["job_type"]): r for r in attempts}
        for key in keys:
            row = _with_jobs(dict(by_key.get(key) or {}), jobs_by_key.get(key))
            row.update(tenant=key[0], day=key[1], job_type=key[2])
            rows.append(UsageRow.model_validate(row))
    total = _with_jobs(_sum(attempts, ATTEMPT_TOTALS), _sum_jobs(jobs))
    return UsageReport(
        from_day=query.from_day,
        to_day=query.to_day,
        group_by=list(query.group_by),
        rows=rows,
        total=UsageRow.model_validate(total),
    )


def _sum(rows: Iterable[dict[str, Any]], names: tuple[str, ...]) -> dict[str, Any]:
    totals: dict[str, Any] = {name: 0 for name in names}
    for row in rows:
        for name in names:
            totals[name] += row[name] or 0
    return totals


def _sum_jobs(rows: list[dict[str, Any]]) -> dict[str, Any]:
    return _sum(rows, ("finished_jobs", "completed_jobs", "completed_cost_usd"))


def _with_jobs(row: dict[str, Any], jobs: dict[str, Any] | None) -> dict[str, Any]:
    finished = (jobs or {}).get("finished_jobs") or 0
    completed = (jobs or {}).get("completed_jobs") or 0
    cost = Decimal(str((jobs or {}).get("completed_cost_usd") or 0))
    per_job = (cost / completed).quantize(Decimal("0.000001")) if completed else None
    return {
        **row,
        "finished_jobs": finished,
        "completed_jobs": completed,
        "completed_cost_usd": cost,
        "cost_per_completed_job": per_job,
    }


def month_spend(
    conn: Conn, q: Queries, tenant_id: UUID, month: date, system_budget: float | None
) -> MonthSpend:
    row = conn.execute(q.tenant_month_spend, {"tenant_id": tenant_id, "month": month}).fetchone()
    if row is None:
        raise NotFound(f"no tenant {tenant_id}")
    return MonthSpend.of(row, system_budget)


def announce_spend_thresholds(
    conn: Conn, q: Queries, tenant_id: UUID, month: date, *, new_id: IdFactory, trace_context: str | None
) -> list[int]:
    """In the transaction that recorded an attempt's cost: one tenant.spend_threshold.v1 event for each
    threshold the month's spend crossed, once per tenant, month and threshold. Returns those announced."""
    row = conn.execute(q.announce_spend_thresholds, {"tenant_id": tenant_id, "month": month}).fetchone()
    if row is None:
        return []
    crossed = thresholds_crossed(row["previous"], row["reached"])
    for percent in crossed:
        event = TenantSpendThreshold(
            tenant_id=tenant_id,
            month=f"{month:%Y-%m}",
            threshold_percent=percent,  # type: ignore[arg-type]  # one of THRESHOLDS: 80 or 100
            budget_usd=str(row["budget"]),
            spent_usd=str(row["spent"]),
        )
        conn.execute(q.insert_outbox_event, outbox_row(event, event_id=new_id(), trace_context=trace_context))
    return list(crossed)


def set_monthly_budget(db: Database, tenant_id: UUID, budget_usd: Decimal | None) -> None:
    """Sets (or with None removes) a tenant's monthly budget; it applies to the next admission and call."""
    with db.transaction() as conn:
        updated = conn.execute(
            db.q.set_tenant_monthly_budget, {"tenant_id": tenant_id, "budget": budget_usd}
        ).fetchone()
    if updated is None:
        raise NotFound(f"no tenant {tenant_id}")


def utc_today(now: datetime) -> date:
    """Today's UTC day, the default end of a usage range."""
    return now.astimezone(UTC).date()
