"""Row-level security is the second wall: even a query that forgets the tenant filter sees one tenant."""

from __future__ import annotations

import psycopg
import pytest

from tests.support import invoice_request

pytestmark = pytest.mark.integration


@pytest.fixture
def two_tenants_with_jobs(make_tenant, clean_db):
    alice, bob = make_tenant("alice"), make_tenant("bob")
    alice.client.submit(invoice_request(text="alice's"), "k")
    bob.client.submit(invoice_request(text="bob's"), "k")
    return alice, bob


def test_a_query_without_a_tenant_filter_sees_only_the_transactions_tenant(app_db, two_tenants_with_jobs):
    alice, _ = two_tenants_with_jobs
    with app_db.transaction(alice.tenant_id) as conn:
        tenants = {row["tenant_id"] for row in conn.execute("SELECT tenant_id FROM extraction_jobs")}
        documents = conn.execute("SELECT count(*) AS n FROM documents").fetchone()["n"]
    assert tenants == {alice.tenant_id}
    assert documents == 1


def test_without_a_tenant_the_application_role_sees_nothing(app_db, two_tenants_with_jobs):
    with app_db.transaction() as conn:
        assert conn.execute("SELECT count(*) AS n FROM extraction_jobs").fetchone()["n"] == 0
        assert conn.execute("SELECT count(*) AS n FROM tenants").fetchone()["n"] == 0


def test_the_application_role_cannot_write_rows_for_another_tenant(app_db, two_tenants_with_jobs):
    alice, bob = two_tenants_with_jobs
    with pytest.raises(psycopg.errors.InsufficientPrivilege), app_db.transaction(alice.tenant_id) as conn:
        conn.execute(
            "INSERT INTO outbox_events (event_id, tenant_id, aggregate_id, event_type, payload)"
            " VALUES (gen_random_uuid(), %s, gen_random_uuid(), 'x', '{}')",
            (bob.tenant_id,),
        )


def test_the_application_role_cannot_update_another_tenants_job(app_db, two_tenants_with_jobs, clean_db):
    alice, bob = two_tenants_with_jobs
    with app_db.transaction(alice.tenant_id) as conn:
        updated = conn.execute("UPDATE extraction_jobs SET priority = 0 RETURNING tenant_id").fetchall()
    assert {row["tenant_id"] for row in updated} == {alice.tenant_id}
    with psycopg.connect(clean_db) as conn:
        bob_priority = conn.execute(
            "SELECT priority FROM extraction_jobs WHERE tenant_id = %s", (bob.tenant_id,)
        ).fetchone()[0]
    assert bob_priority == 5


def test_the_application_role_cannot_read_api_key_hashes(app_db, two_tenants_with_jobs):
    alice, _ = two_tenants_with_jobs
    with pytest.raises(psycopg.errors.InsufficientPrivilege), app_db.transaction(alice.tenant_id) as conn:
        conn.execute("SELECT key_hash FROM api_keys")


def test_the_tenant_setting_does_not_leak_into_the_next_transaction(app_db, two_tenants_with_jobs):
    alice, _ = two_tenants_with_jobs
    # A pool of one connection: the second transaction reuses the first one's session.
    with app_db.transaction(alice.tenant_id) as conn:
        conn.execute("SELECT 1")
    with app_db.transaction() as conn:
        assert conn.execute("SELECT count(*) AS n FROM extraction_jobs").fetchone()["n"] == 0
        role = conn.execute("SELECT current_user AS r").fetchone()["r"]
    assert role == "tollgate_app"
