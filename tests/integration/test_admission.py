"""Admission before acceptance: per-tenant limits answer 429, a full system answers 503, both with
Retry-After and without writing anything."""

from __future__ import annotations

import psycopg
import pytest

from tests.support import count_rows, invoice_request
from tollgate_dev.local.client import ApiClient

pytestmark = pytest.mark.integration


@pytest.fixture
def tight_stack(stack_factory, clean_db):
    return stack_factory(
        tenant_max_pending_jobs=2,
        tenant_max_pending_bytes=10_000,
        tenant_max_pending_tokens=100_000,
        system_max_backlog=3,
        admission_retry_after_seconds=17,
    )


def _client(tight_stack, tenant):
    return ApiClient(tight_stack.api_url, tenant.api_key)


def test_a_tenant_over_its_pending_job_limit_gets_429_with_retry_after(tight_stack, make_tenant, clean_db):
    client = _client(tight_stack, make_tenant("busy"))
    assert [client.submit(invoice_request(text=f"i{i}"), f"k{i}").status for i in range(2)] == [202, 202]
    before = count_rows(clean_db)

    refused = client.submit(invoice_request(text="one too many"), "k3")

    assert refused.status == 429
    assert refused.header("Retry-After") == "17"
    assert refused.json["type"].endswith("/tenant-over-quota") and refused.json["limit_dimension"] == "jobs"
    assert count_rows(clean_db) == before


def test_a_replay_is_answered_even_when_the_tenant_is_at_its_limit(tight_stack, make_tenant, clean_db):
    client = _client(tight_stack, make_tenant("busy"))
    first = client.submit(invoice_request(text="a"), "a")
    client.submit(invoice_request(text="b"), "b")

    replay = client.submit(invoice_request(text="a"), "a")

    assert replay.status == 202 and replay.json["job_id"] == first.json["job_id"]


def test_finished_jobs_free_the_tenants_capacity(tight_stack, make_tenant, clean_db):
    client = _client(tight_stack, make_tenant("busy"))
    first = client.submit(invoice_request(text="a"), "a").json["job_id"]
    client.submit(invoice_request(text="b"), "b")
    client.request("POST", f"/extraction-jobs/{first}/cancel")

    assert client.submit(invoice_request(text="c"), "c").status == 202


def test_byte_and_token_limits_are_checked_too(tight_stack, make_tenant, clean_db):
    client = _client(tight_stack, make_tenant("big"))
    too_many_bytes = client.submit(invoice_request(text="x" * 12_000), "bytes")
    assert too_many_bytes.status == 429 and too_many_bytes.json["limit_dimension"] == "bytes"

    with psycopg.connect(clean_db) as conn:
        conn.execute("UPDATE tenants SET max_pending_bytes = 10000000")
    two_long_pages = {"document": {"pages": [{"text": "x" * 199_000}, {"text": "y" * 199_000}]}}
    too_many_tokens = client.submit(two_long_pages, "tokens")
    assert too_many_tokens.status == 429 and too_many_tokens.json["limit_dimension"] == "tokens"


def test_a_tenant_override_wins_over_the_default(tight_stack, make_tenant, clean_db):
    tenant = make_tenant("vip")
    with psycopg.connect(clean_db) as conn:
        conn.execute("UPDATE tenants SET max_pending_jobs = 3 WHERE tenant_id = %s", (tenant.tenant_id,))
    client = _client(tight_stack, tenant)
    statuses = [client.submit(invoice_request(text=f"i{i}"), f"k{i}").status for i in range(3)]
    assert statuses == [202, 202, 202]


def test_a_full_system_backlog_answers_503_with_retry_after(tight_stack, make_tenant, clean_db):
    a, b = _client(tight_stack, make_tenant("a")), _client(tight_stack, make_tenant("b"))
    a.submit(invoice_request(text="1"), "1")
    a.submit(invoice_request(text="2"), "2")
    b.submit(invoice_request(text="3"), "3")
    before = count_rows(clean_db)

    refused = b.submit(invoice_request(text="4"), "4")

    assert refused.status == 503
    assert refused.header("Retry-After") == "17"
    assert refused.json["type"].endswith("/system-overloaded")
    assert count_rows(clean_db) == before
