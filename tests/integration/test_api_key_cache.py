"""The authorizer's per-process cache: fast for repeated keys, and a revoked key stops working once
its cached answer expires (time is injected, nothing sleeps)."""

import psycopg
import pytest

from tollgate.core.clock import FakeClock, new_id
from tollgate.tenants.keys import ApiKeyResolver, create_tenant

pytestmark = pytest.mark.integration


def test_a_revoked_key_works_until_its_cache_entry_expires_then_never(app_db, system_db, clean_db):
    tenant = create_tenant(system_db, "acme", new_id)
    clock = FakeClock()
    resolver = ApiKeyResolver(app_db, clock, ttl_seconds=60)
    assert resolver.resolve(tenant.api_key).tenant_id == tenant.tenant_id

    with psycopg.connect(clean_db) as conn:
        conn.execute("UPDATE api_keys SET revoked_at = now()")
    clock.advance(59)
    still_cached = resolver.resolve(tenant.api_key)
    clock.advance(2)
    after_expiry = resolver.resolve(tenant.api_key)

    assert still_cached is not None
    assert after_expiry is None


def test_a_tenant_name_is_unique(system_db, clean_db):
    from tollgate.core.errors import InvalidRequest

    create_tenant(system_db, "acme", new_id)
    with pytest.raises(InvalidRequest, match="already exists"):
        create_tenant(system_db, "acme", new_id)
