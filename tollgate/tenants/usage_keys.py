"""Each tenant's API Gateway key on the stage's usage plan, so API Gateway meters and throttles tenants.

The authorizer returns the key's value as ``usageIdentifierKey``; tenants never see or send it (the API
takes keys only from the authorizer). A deployed stage makes keys through API Gateway
(``ApiGatewayUsagePlan``); local development has no API Gateway and no usage plan (``NoUsagePlan``).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol
from uuid import UUID

from tollgate.db import Database

if TYPE_CHECKING:
    from mypy_boto3_apigateway import APIGatewayClient


@dataclass(frozen=True)
class UsageKey:
    key_id: str
    value: str


class UsagePlan(Protocol):
    """Where tenants' usage keys live."""

    def attach(self, tenant_id: UUID, tenant_name: str) -> UsageKey | None:
        """The tenant's key, on the plan: made if missing, found again if made before (so a retry after a
        failure half-way never makes a second one). None where there is no usage plan."""


class NoUsagePlan:
    """Local development: API Gateway does not run, so there is no plan and no key to make."""

    def attach(self, tenant_id: UUID, tenant_name: str) -> UsageKey | None:
        return None


def usage_key_name(tenant_id: UUID) -> str:
    """One name per tenant; tenant ids are unique across stages, so stages in one account never collide."""
    return f"tollgate-tenant-{tenant_id}"


class ApiGatewayUsagePlan:
    """Keys made by API Gateway (it draws the value) and added to the usage plan ``usage_plan_id``."""

    def __init__(self, client: APIGatewayClient, usage_plan_id: str) -> None:
        self._client = client
        self._usage_plan_id = usage_plan_id

    def attach(self, tenant_id: UUID, tenant_name: str) -> UsageKey | None:
        key = self._find(tenant_id) or self._create(tenant_id, tenant_name)
        # A conflict means the key is on the plan already: an earlier attach got this far.
        with contextlib.suppress(self._client.exceptions.ConflictException):
            self._client.create_usage_plan_key(
                usagePlanId=self._usage_plan_id, keyId=key.key_id, keyType="API_KEY"
            )
        return key

    def _find(self, tenant_id: UUID) -> UsageKey | None:
        name = usage_key_name(tenant_id)
        # nameQuery matches by prefix; the full name with the tenant's id is what identifies it.
        found = self._client.get_api_keys(nameQuery=name, includeValues=True, limit=500)["items"]
        for item in found:
            if item.get("name") == name:
                return UsageKey(item["id"], item["value"])
        return None

    def _create(self, tenant_id: UUID, tenant_name: str) -> UsageKey:
        created = self._client.create_api_key(
            name=usage_key_name(tenant_id),
            description=f"Tollgate tenant {tenant_name}: usage-plan metering only, never sent by clients",
            enabled=True,
        )
        return UsageKey(created["id"], created["value"])


def sync_usage_keys(db: Database, plan: UsagePlan) -> list[UUID]:
    """Gives every tenant without a usage key one (tenants made before migration 0018, or while no plan was
    configured); returns the tenants that got one. Safe to run again; needs the system role."""
    with db.transaction() as conn:
        missing = list(conn.execute(db.q.tenants_without_usage_key).fetchall())
    synced: list[UUID] = []
    for tenant in missing:
        key = plan.attach(tenant["tenant_id"], tenant["name"])
        if key is None:
            break  # no usage plan here, so nothing to sync
        with db.transaction() as conn:
            stored = conn.execute(
                db.q.set_tenant_usage_key,
                {"tenant_id": tenant["tenant_id"], "usage_key_id": key.key_id, "usage_key_value": key.value},
            ).fetchone()
        if stored is not None:
            synced.append(tenant["tenant_id"])
    return synced
