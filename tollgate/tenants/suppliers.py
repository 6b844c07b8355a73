"""Tenants' supplier master data, which validation matches extracted suppliers against, and the rest of the
tenant's validation policy."""

from __future__ import annotations

from uuid import UUID

from tollgate.core.clock import IdFactory
from tollgate.core.errors import InvalidRequest
from tollgate.db import Database
from tollgate.db.database import Conn
from tollgate.jobtypes.base import KnownSupplier, TenantPolicy
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


def read_tenant_policy(conn: Conn, db: Database, tenant_id: UUID) -> TenantPolicy:
    """The tenant's master data as validation reads it (per attempt and per correction, so an edit applies at
    once): its currencies, its suppliers with their IBANs, and whether an IBAN it cannot check is accepted."""
    row = conn.execute(db.q.tenant_validation_policy, {"tenant_id": tenant_id}).fetchone()
    if row is None:
        raise InvalidRequest(f"no tenant with id {tenant_id}")
    suppliers = tuple(
        KnownSupplier(name, iban)
        for name, iban in zip(row["supplier_names"], row["supplier_ibans"], strict=True)
    )
    return TenantPolicy(frozenset(row["allowed_currencies"]), suppliers, row["accept_unverified_iban"])


def set_accept_unverified_iban(db: Database, tenant_id: UUID, accept: bool) -> None:
    """Whether an invoice whose supplier has no IBAN on file may carry an IBAN straight to the ERP. Off by
    default: such an IBAN cannot be checked, so the job waits for a person (``iban_unverified``)."""
    with db.transaction() as conn:
        updated = conn.execute(
            db.q.set_accept_unverified_iban, {"tenant_id": tenant_id, "accept": accept}
        ).fetchone()
    if updated is None:
        raise InvalidRequest(f"no tenant with id {tenant_id}")
