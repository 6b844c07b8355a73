"""The job row and its outbox row commit together or not at all."""

from __future__ import annotations

import psycopg
import pytest

from tests.support import count_rows, invoice_request

pytestmark = pytest.mark.integration


@pytest.fixture
def outbox_insert_fails(clean_db):
    """A real fault between the two inserts: the outbox insert is refused by the database itself."""
    with psycopg.connect(clean_db, autocommit=True) as conn:
        conn.execute("REVOKE INSERT ON outbox_events FROM tollgate_app")
    yield
    with psycopg.connect(clean_db, autocommit=True) as conn:
        conn.execute("GRANT INSERT ON outbox_events TO tollgate_app")


def test_a_fault_between_the_job_insert_and_the_outbox_insert_leaves_nothing(
    tenant, clean_db, outbox_insert_fails
):
    response = tenant.client.submit(invoice_request(), "k")

    assert response.status == 500
    assert response.header("Content-Type") == "application/problem+json"
    assert count_rows(clean_db) == {
        "extraction_jobs": 0,
        "outbox_events": 0,
        "documents": 0,
        "job_attempts": 0,
        "extraction_results": 0,
        "webhook_endpoints": 0,
    }


def test_after_the_fault_clears_the_same_key_is_accepted(tenant, clean_db, outbox_insert_fails):
    assert tenant.client.submit(invoice_request(), "k").status == 500
    with psycopg.connect(clean_db, autocommit=True) as conn:
        conn.execute("GRANT INSERT ON outbox_events TO tollgate_app")

    retried = tenant.client.submit(invoice_request(), "k")

    assert retried.status == 202 and retried.header("Idempotent-Replayed") is None
    # The requested event, and live notifications' state change (READY) written by the job's trigger.
    assert count_rows(clean_db)["outbox_events"] == 2
