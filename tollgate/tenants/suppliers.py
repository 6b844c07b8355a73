"""Tenants' supplier master data, which validation matches extracted suppliers against."""

from __future__ import annotations

from uuid import UUID

from tollgate.core.clock import IdFactory
from tollgate.core.errors import InvalidRequest
from tollgate.db import Database
from tollgate.jobtypes.invoice_extraction.validation import iban_is_valid, normalize_name


def add_supplier(db: Database, tenant_id: UUID, name: str, iban: str | None, new_id: IdFactory) -> None:
    """Adds (or updates the IBAN of) a supplier; runs as the system role on the tenant's behalf."""
    compact = iban.replace(" ", "").upper() if iban else None
    if compact is not None and not iban_is_valid(compact):
        raise InvalidRequest(f"{iban!r} is not a valid IBAN")
    if not normalize_name(name):
        raise InvalidRequest("a supplier needs a name")
    with db.transaction() as conn:
        conn.execute(
            db.q.insert_supplier,
            {
                "supplier_id": new_id(),
                "tenant_id": tenant_id,
                "name": name.strip(),
                "normalized_name": normalize_name(name),
                "iban": compact,
            },
        )


def find_tenant(db: Database, name: str) -> UUID:
    """A tenant's id by its name (support and operator commands name tenants, not ids)."""
    with db.transaction() as conn:
        row = conn.execute(db.q.find_tenant_by_name, {"name": name}).fetchone()
    if row is None:
        raise InvalidRequest(f"no tenant named {name!r}")
    tenant_id: UUID = row["tenant_id"]
    return tenant_id
