"""Tenants and their keys as operators list them: every tenant with its live API keys and webhook endpoints
and the retention and budget it has of its own; a tenant's keys without their hashes. The views the CLI
prints and the operations function answers with, light enough for the CLI's read commands to import."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from uuid import UUID

from pydantic import BaseModel

from tollgate.db import Database

MAX_TENANTS_LISTED = 1000


class TenantSummary(BaseModel):
    tenant_id: UUID
    name: str
    created_at: datetime
    live_keys: int
    webhook_endpoints: int
    retention_days: int | None  # None: the deployment's default
    monthly_budget_usd: Decimal | None  # None: no budget


class TenantList(BaseModel):
    tenants: list[TenantSummary]


class KeyView(BaseModel):
    key_id: UUID
    key_prefix: str
    scopes: list[str]
    created_at: datetime
    revoked_at: datetime | None


class KeyList(BaseModel):
    keys: list[KeyView]


def list_tenants(db: Database, limit: int) -> list[TenantSummary]:
    """Tenants by name, at most ``limit`` of them."""
    with db.transaction() as conn:
        rows = conn.execute(db.q.list_tenants, {"limit": limit}).fetchall()
    return [TenantSummary.model_validate(row) for row in rows]
