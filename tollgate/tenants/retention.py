"""A tenant's own retention: how long its finished jobs, results, deliveries and idempotency keys are kept
before the scheduler archives and deletes them (``tollgate/scheduler/retention.py``)."""

from __future__ import annotations

from uuid import UUID

from tollgate.core.errors import InvalidRequest
from tollgate.db import Database

MAX_RETENTION_DAYS = 3650  # the column's CHECK constraint (migration 0011)


def set_tenant_retention(db: Database, tenant_id: UUID, days: int | None) -> None:
    """Sets the tenant's retention in days; ``None`` returns it to the deployment's default. A shorter one
    applies from the scheduler's next tick, to jobs that already finished as well."""
    if days is not None and not 1 <= days <= MAX_RETENTION_DAYS:
        raise InvalidRequest(f"a retention is 1 to {MAX_RETENTION_DAYS} days")
    with db.transaction() as conn:
        updated = conn.execute(
            db.q.set_tenant_retention, {"tenant_id": tenant_id, "retention_days": days}
        ).fetchone()
    if updated is None:
        raise InvalidRequest(f"no tenant with id {tenant_id}")
