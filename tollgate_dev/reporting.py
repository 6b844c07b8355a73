"""Read-only summaries of tenants' work: states, attempts, tokens, cost and completion latency."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any
from uuid import UUID

from tollgate.db import Database
from tollgate_dev.queries import dev_queries


@dataclass(frozen=True)
class ModelUsage:
    model: str
    attempts: int
    failed_attempts: int
    input_tokens: int
    output_tokens: int
    cost_usd: Decimal


@dataclass(frozen=True)
class WorkSummary:
    states: dict[str, int]
    models: list[ModelUsage]
    completion_p50_seconds: float | None
    completion_p95_seconds: float | None


def job_states(db: Database, tenant_ids: list[UUID]) -> dict[str, int]:
    with db.transaction() as conn:
        rows = conn.execute(dev_queries().job_states_for_tenants, {"tenant_ids": tenant_ids}).fetchall()
    return {row["state"]: row["jobs"] for row in rows}


def jobs(db: Database, tenant_ids: list[UUID]) -> list[dict[str, Any]]:
    with db.transaction() as conn:
        return conn.execute(dev_queries().jobs_for_tenants, {"tenant_ids": tenant_ids}).fetchall()


def summarize_work(db: Database, tenant_ids: list[UUID]) -> WorkSummary:
    with db.transaction() as conn:
        states = {
            r["state"]: r["jobs"]
            for r in conn.execute(dev_queries().job_states_for_tenants, {"tenant_ids": tenant_ids})
        }
        models = [
            ModelUsage(**r) for r in conn.execute(dev_queries().attempts_by_model, {"tenant_ids": tenant_ids})
        ]
        latency = conn.execute(dev_queries().completion_latency, {"tenant_ids": tenant_ids}).fetchone()
    assert latency is not None
    return WorkSummary(states, models, latency["p50"], latency["p95"])


def delivery_states(db: Database, tenant_ids: list[UUID]) -> dict[str, int]:
    with db.transaction() as conn:
        rows = conn.execute(dev_queries().delivery_states_for_tenants, {"tenant_ids": tenant_ids}).fetchall()
    return {row["state"]: row["deliveries"] for row in rows}
