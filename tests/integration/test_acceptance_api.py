"""The acceptance API over HTTP on 127.0.0.1, against real PostgreSQL and moto S3."""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor

import psycopg
import pytest

from tests.support import count_rows, invoice_request

pytestmark = pytest.mark.integration


def test_accepting_a_job_writes_the_job_and_its_outbox_event_together(tenant, clean_db):
    response = tenant.client.submit(invoice_request(), "order-1")

    assert response.status == 202
    job = response.json
    assert response.header("Location") == f"/extraction-jobs/{job['job_id']}"
    assert response.header("Idempotent-Replayed") is None
    assert job["state"] == "READY" and job["state_version"] == 1 and job["attempt"] == 0
    with psycopg.connect(clean_db) as conn:
        events = conn.execute(
            "SELECT event_type, aggregate_id, tenant_id, payload, published_at FROM outbox_events"
            " WHERE event_type <> 'job.state_changed.v1'"
        ).fetchall()
    assert len(events) == 1
    event_type, aggregate_id, tenant_id, payload, published_at = events[0]
    assert event_type == "extraction.requested.v1"
    assert str(aggregate_id) == job["job_id"] and tenant_id == tenant.tenant_id
    assert payload["job_id"] == job["job_id"]
    assert published_at is None


def test_same_key_and_same_request_replays_the_first_job(tenant, clean_db):
    first = tenant.client.submit(invoice_request(), "order-1")
    again = tenant.client.submit(invoice_request(), "order-1")

    assert again.status == 202
    assert again.header("Idempotent-Replayed") == "true"
    assert again.json["job_id"] == first.json["job_id"]
    assert count_rows(clean_db)["extraction_jobs"] == 1


def test_fields_that_do_not_change_the_result_are_not_part_of_identity(tenant, clean_db):
    first = tenant.client.submit(invoice_request(priority=2, metadata={"filename": "a.pdf"}), "order-1")
    again = tenant.client.submit(
        invoice_request(priority=9, deadline_seconds=600, metadata={"filename": "renamed.pdf"}), "order-1"
    )
    explicit_defaults = tenant.client.submit(
        invoice_request(model_policy="auto", schema_version="invoice.v1", options={}), "order-1"
    )

    assert again.status == 202 and again.json["job_id"] == first.json["job_id"]
    assert explicit_defaults.json["job_id"] == first.json["job_id"]


@pytest.mark.parametrize(
    "changed",
    [
        invoice_request(text="another invoice"),
        invoice_request(model_policy="large"),
        invoice_request(options={"currency_hint": "USD"}),
        invoice_request(options={"language_hint": "de"}),
    ],
    ids=["document", "model-policy", "currency-hint", "language-hint"],
)
def test_same_key_with_a_different_request_is_a_conflict_and_writes_nothing(tenant, clean_db, changed):
    first = tenant.client.submit(invoice_request(), "order-1")
    before = count_rows(clean_db)

    conflict = tenant.client.submit(changed, "order-1")

    assert conflict.status == 409
    assert conflict.json["type"].endswith("/idempotency-conflict")
    assert conflict.json["job_id"] == first.json["job_id"]
    assert count_rows(clean_db) == before


def test_fifty_concurrent_requests_with_one_key_make_one_job_and_one_outbox_row(tenant, clean_db):
    def submit(_: int):
        return tenant.client.submit(invoice_request(), "same-key")

    with ThreadPoolExecutor(max_workers=50) as pool:
        responses = list(pool.map(submit, range(50)))

    assert {r.status for r in responses} == {202}
    assert len({r.json["job_id"] for r in responses}) == 1
    assert sum(r.header("Idempotent-Replayed") == "true" for r in responses) == 49
    rows = count_rows(clean_db)
    # The outbox holds the requested event and live notifications' state change (READY).
    assert rows["extraction_jobs"] == 1 and rows["outbox_events"] == 2 and rows["documents"] == 1


def test_concurrent_requests_racing_one_key_with_different_bodies_make_exactly_one_job(tenant, clean_db):
    bodies = [invoice_request(text=f"variant {i % 2}") for i in range(30)]

    with ThreadPoolExecutor(max_workers=30) as pool:
        responses = list(pool.map(lambda b: tenant.client.submit(b, "contested"), bodies))

    winners = [r for r in responses if r.status == 202]
    assert {r.status for r in responses} <= {202, 409}
    assert len({r.json["job_id"] for r in winners}) == 1
    assert count_rows(clean_db)["extraction_jobs"] == 1


def test_another_tenants_job_answers_404_everywhere(make_tenant, clean_db):
    alice, mallory = make_tenant("alice"), make_tenant("mallory")
    job_id = alice.client.submit(invoice_request(), "k").json["job_id"]

    for method, path in [
        ("GET", f"/extraction-jobs/{job_id}"),
        ("GET", f"/extraction-jobs/{job_id}/result"),
        ("POST", f"/extraction-jobs/{job_id}/cancel"),
    ]:
        response = mallory.client.request(method, path)
        assert response.status == 404, path
        assert response.json["type"].endswith("/not-found")
    assert mallory.client.request("GET", "/extraction-jobs").json["items"] == []
    assert alice.client.request("GET", f"/extraction-jobs/{job_id}").json["state"] == "READY"


def test_the_same_idempotency_key_is_independent_per_tenant(make_tenant, clean_db):
    alice, bob = make_tenant("alice"), make_tenant("bob")
    a = alice.client.submit(invoice_request(), "k")
    b = bob.client.submit(invoice_request(text="bob's invoice"), "k")
    assert a.status == b.status == 202
    assert a.json["job_id"] != b.json["job_id"]


def test_a_reference_to_an_object_version_under_the_tenants_prefix_is_accepted(tenant, stack, clean_db):
    import boto3

    from tollgate_dev.local.runtime import LOCAL_BUCKET

    key = f"tenants/{tenant.tenant_id}/uploads/inv.txt"
    version = boto3.client("s3").put_object(Bucket=LOCAL_BUCKET, Key=key, Body=b"page one\fpage two")[
        "VersionId"
    ]

    by_reference = tenant.client.submit({"document": {"s3_key": key, "version_id": version}}, "ref-1")
    inline_same_content = tenant.client.submit(
        {"document": {"pages": [{"text": "page one"}, {"text": "page two"}]}}, "inline-1"
    )

    assert by_reference.status == 202, by_reference.json
    assert by_reference.json["document"]["page_count"] == 2
    # Identity is content: the inline copy is the same document, not a second one.
    assert inline_same_content.json["document"]["document_id"] == by_reference.json["document"]["document_id"]


def stored_document(owner_url, document_id):
    with psycopg.connect(owner_url) as conn:
        return conn.execute(
            "SELECT s3_key, s3_version_id, body FROM documents WHERE document_id = %s", (document_id,)
        ).fetchone()


def bucket_keys(tenant_id):
    import boto3

    from tollgate_dev.local.runtime import LOCAL_BUCKET

    listed = boto3.client("s3").list_objects_v2(Bucket=LOCAL_BUCKET, Prefix=f"tenants/{tenant_id}/")
    return [item["Key"] for item in listed.get("Contents", [])]


def test_a_small_document_is_committed_in_its_row_and_puts_nothing_in_s3(tenant, clean_db):
    from tollgate.core.documents import pages_from_canonical

    accepted = tenant.client.submit(invoice_request(text="a small invoice"), "small")

    assert accepted.status == 202
    s3_key, version, body = stored_document(clean_db, accepted.json["document"]["document_id"])
    assert (s3_key, version) == (None, None)
    assert pages_from_canonical(body) == ("a small invoice",)
    assert bucket_keys(tenant.tenant_id) == []


def test_a_document_over_the_row_limit_is_put_in_s3_before_the_answer(tenant, clean_db):
    from tollgate.settings import ApiSettings

    limit = ApiSettings.model_fields["document_row_max_bytes"].default
    text = "Line item, delivered and invoiced. " * (limit // 30)

    accepted = tenant.client.submit(invoice_request(text=text), "large")

    assert accepted.status == 202
    assert accepted.json["document"]["size_bytes"] > limit
    s3_key, version, body = stored_document(clean_db, accepted.json["document"]["document_id"])
    assert body is None and version is not None
    assert bucket_keys(tenant.tenant_id) == [s3_key]


def test_listing_pages_through_jobs_newest_first_with_a_state_filter(tenant, clean_db):
    ids = [
        tenant.client.submit(invoice_request(text=f"invoice {i}"), f"k{i}").json["job_id"] for i in range(5)
    ]
    tenant.client.request("POST", f"/extraction-jobs/{ids[0]}/cancel")

    seen, cursor = [], None
    while True:
        path = "/extraction-jobs?limit=2" + (f"&cursor={cursor}" if cursor else "")
        page = tenant.client.request("GET", path).json
        seen += [item["job_id"] for item in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    cancelled = tenant.client.request("GET", "/extraction-jobs?state=CANCELLED").json["items"]

    assert seen == list(reversed(ids))
    assert [job["job_id"] for job in cancelled] == [ids[0]]


def test_cancel_moves_a_ready_job_to_cancelled_once(tenant, clean_db):
    job_id = tenant.client.submit(invoice_request(), "k").json["job_id"]

    first = tenant.client.request("POST", f"/extraction-jobs/{job_id}/cancel")
    second = tenant.client.request("POST", f"/extraction-jobs/{job_id}/cancel")

    assert first.status == 200 and first.json["state"] == "CANCELLED" and first.json["state_version"] == 2
    assert second.status == 200 and second.json["state_version"] == 2
    assert first.json["finished_at"] is not None


def test_a_running_job_cannot_be_cancelled(tenant, clean_db):
    job_id = tenant.client.submit(invoice_request(), "k").json["job_id"]
    with psycopg.connect(clean_db) as conn:
        conn.execute(
            "UPDATE extraction_jobs SET state='RUNNING', attempt=1, fence=1, lease_owner='w1',"
            " lease_until=now() + interval '1 minute', state_version=2 WHERE job_id=%s",
            (job_id,),
        )

    response = tenant.client.request("POST", f"/extraction-jobs/{job_id}/cancel")

    assert response.status == 409 and response.json["type"].endswith("/invalid-state")
    assert tenant.client.request("GET", f"/extraction-jobs/{job_id}").json["state"] == "RUNNING"


def test_result_is_409_until_one_exists_then_200(tenant, clean_db):
    job_id = tenant.client.submit(invoice_request(), "k").json["job_id"]
    assert tenant.client.request("GET", f"/extraction-jobs/{job_id}/result").status == 409

    with psycopg.connect(clean_db) as conn:
        conn.execute(
            "UPDATE extraction_jobs SET state='SUCCEEDED', attempt=1, state_version=3, finished_at=now()"
            " WHERE job_id=%s",
            (job_id,),
        )
        conn.execute(
            "INSERT INTO extraction_results (job_id, tenant_id, attempt, policy_version, result)"
            " VALUES (%s, %s, 1, 'validation.v1', '{\"total\": \"119.00\"}')",
            (job_id, tenant.tenant_id),
        )

    response = tenant.client.request("GET", f"/extraction-jobs/{job_id}/result")
    assert response.status == 200
    assert response.json["result"] == {"total": "119.00"} and response.json["state"] == "SUCCEEDED"


def test_openapi_is_served_without_a_key_and_equals_the_committed_document(tenant, stack):
    from tollgate.settings import REPO_ROOT

    response = tenant.client.request("GET", "/openapi.json", auth=False)

    assert response.status == 200
    committed = (REPO_ROOT / "openapi.json").read_bytes()
    assert response.body == committed, "run `make openapi` and commit openapi.json"


def test_the_document_says_the_idempotency_key_is_required(tenant, stack):
    # A client generated from the document must send the key: the API refuses a submission without one.
    document = tenant.client.request("GET", "/openapi.json", auth=False).json

    parameters = document["paths"]["/extraction-jobs"]["post"]["parameters"]
    [key] = [p for p in parameters if p["name"].lower() == "idempotency-key"]
    assert (key["in"], key["required"]) == ("header", True)
    assert key["schema"]["pattern"] == "^[\\x21-\\x7e]{1,255}$", "and what a key may look like"


def test_concurrent_requests_of_different_tenants_are_never_mixed_up(make_tenant, clean_db):
    tenants = [make_tenant(f"t{i}") for i in range(4)]
    work = [(tenant, f"key-{n}") for tenant in tenants for n in range(10)]

    def submit(item):
        tenant, key = item
        return tenant, tenant.client.submit(invoice_request(text=f"{tenant.tenant_id} {key}"), key)

    with ThreadPoolExecutor(max_workers=16) as pool:
        results = list(pool.map(submit, work))

    assert {response.status for _, response in results} == {202}
    assert all(response.header("Idempotent-Replayed") is None for _, response in results)
    with psycopg.connect(clean_db) as conn:
        owners = dict(conn.execute("SELECT job_id::text, tenant_id FROM extraction_jobs").fetchall())
    assert len(owners) == 40
    assert all(owners[response.json["job_id"]] == tenant.tenant_id for tenant, response in results)


def _trace_contexts(url):
    with psycopg.connect(url) as conn:
        return conn.execute(
            "SELECT j.idempotency_key, j.trace_context, o.trace_context FROM extraction_jobs j"
            " JOIN outbox_events o ON o.aggregate_id = j.job_id AND o.event_type = 'extraction.requested.v1'"
            " ORDER BY j.created_at"
        ).fetchall()


def test_every_job_gets_a_trace_the_callers_the_gateways_or_a_new_one(tenant, clean_db):
    callers = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    tenant.client.submit(invoice_request(), "with-traceparent", headers={"traceparent": callers})
    tenant.client.submit(
        invoice_request(text="second"),
        "with-xray",
        headers={
            "X-Amzn-Trace-Id": "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"
        },
    )
    tenant.client.submit(invoice_request(text="third"), "with-nothing", headers={"traceparent": "garbage"})

    stored = {key: (job, event) for key, job, event in _trace_contexts(clean_db)}

    assert stored["with-traceparent"] == (callers, callers)
    assert stored["with-xray"][0] == "00-5759e988bd862e3fe1be46a994272793-53995c3f42cd8ad8-01"
    fresh, event = stored["with-nothing"]
    assert fresh == event and re.fullmatch(r"00-[0-9a-f]{32}-[0-9a-f]{16}-01", fresh)
    assert fresh.split("-")[1] not in {callers.split("-")[1], "5759e988bd862e3fe1be46a994272793"}
