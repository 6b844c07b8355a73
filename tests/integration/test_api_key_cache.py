"""The authorizer's per-process cache: fast for repeated keys, and a revoked key stops working once
its cached answer expires (time is injected, nothing sleeps)."""

import psycopg
import pytest

from tollgate.core.clock import FakeClock, new_id
from tollgate.tenants.keys import ApiKeyResolver, create_tenant, mint_api_key

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


def test_a_flood_of_wrong_keys_never_pushes_a_tenants_key_out_of_the_cache(app_db, system_db, clean_db):
    # Given a resolver that has a tenant's key cached
    tenant = create_tenant(system_db, "acme", new_id)
    clock = FakeClock()
    resolver = ApiKeyResolver(app_db, clock, ttl_seconds=60, max_entries=10, max_misses=10)
    assert resolver.resolve(tenant.api_key) is not None

    # When many more wrong keys than either cache holds arrive, and the tenant's key is revoked meanwhile
    for _ in range(50):
        assert resolver.resolve(mint_api_key()) is None
    with psycopg.connect(clean_db) as conn:
        conn.execute("UPDATE api_keys SET revoked_at = now()")

    # Then the tenant's key is still answered from the cache (no lookup, so the revocation is not yet seen)
    assert resolver.resolve(tenant.api_key) is not None


def test_a_wrong_key_is_looked_up_once_per_cache_lifetime(app_db, system_db, clean_db):
    clock = FakeClock()
    resolver = ApiKeyResolver(app_db, clock, ttl_seconds=60)
    wrong = mint_api_key()
    assert resolver.resolve(wrong) is None

    # A key created with that very value afterwards is seen only once the miss expires.
    tenant = create_tenant(system_db, "acme", new_id, mint=lambda: wrong)
    cached_miss = resolver.resolve(wrong)
    clock.advance(61)

    assert cached_miss is None
    assert resolver.resolve(wrong).tenant_id == tenant.tenant_id
