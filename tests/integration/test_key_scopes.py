"""API key scopes: a key does what its scopes allow and gets a 403 problem for the rest, writing nothing;
keys are created, listed and revoked from the CLI's use cases."""

from __future__ import annotations

from uuid import uuid4

import psycopg
import pytest

from tests.support import count_rows, invoice_request
from tollgate.api.surface import http_surface
from tollgate.core.clock import SystemClock, new_id
from tollgate.core.errors import NotFound
from tollgate.db import Database
from tollgate.tenants.keys import ALL_SCOPES, ApiKeyResolver, Scope, create_key, list_keys, revoke_key
from tollgate_dev.local.client import ApiClient

pytestmark = pytest.mark.integration


def keyed_client(stack, system_db: Database, tenant, *scopes: Scope) -> ApiClient:
    key = create_key(system_db, tenant.tenant_id, new_id, scopes=frozenset(scopes))
    return ApiClient(stack.api_url, key.api_key)


def assert_forbidden(response, scope: str) -> None:
    assert response.status == 403, response.json
    assert response.header("Content-Type") == "application/problem+json"
    assert response.json["type"].endswith("/forbidden")
    assert scope in response.json["detail"]


def test_a_read_only_key_reads_jobs_and_cannot_submit_or_cancel(stack, system_db, tenant, clean_db):
    job_id = tenant.client.submit(invoice_request(), "k").json["job_id"]
    reader = keyed_client(stack, system_db, tenant, Scope.JOBS_READ)
    before = count_rows(clean_db)

    assert reader.request("GET", "/extraction-jobs").status == 200
    assert reader.request("GET", f"/extraction-jobs/{job_id}").status == 200
    assert_forbidden(reader.submit(invoice_request(text="another invoice"), "k2"), "jobs:write")
    assert_forbidden(reader.request("POST", f"/extraction-jobs/{job_id}/cancel"), "jobs:write")
    assert count_rows(clean_db) == before
    assert tenant.client.request("GET", f"/extraction-jobs/{job_id}").json["state"] == "READY"


def test_a_jobs_key_cannot_manage_webhooks_and_a_webhooks_key_cannot_touch_jobs(
    stack, system_db, tenant, clean_db
):
    jobs = keyed_client(stack, system_db, tenant, Scope.JOBS_WRITE, Scope.JOBS_READ)
    hooks = keyed_client(stack, system_db, tenant, Scope.WEBHOOKS_ADMIN)

    assert_forbidden(
        jobs.request("POST", "/webhook-endpoints", json_body={"url": "https://erp.example/hooks"}),
        "webhooks:admin",
    )
    assert_forbidden(jobs.request("GET", "/webhook-endpoints"), "webhooks:admin")
    assert hooks.request("GET", "/webhook-endpoints").status == 200
    assert_forbidden(hooks.request("GET", "/extraction-jobs"), "jobs:read")
    assert_forbidden(hooks.submit(invoice_request(), "k"), "jobs:write")
    assert jobs.submit(invoice_request(), "k").status == 202


def test_every_route_needs_a_scope(stack, system_db, tenant, clean_db):
    # A key holding only review is refused by every route outside the review routes.
    ops = keyed_client(stack, system_db, tenant, Scope.REVIEW)
    some = uuid4()
    for method, path in [
        ("GET", "/extraction-jobs"),
        ("GET", f"/extraction-jobs/{some}"),
        ("GET", f"/extraction-jobs/{some}/result"),
        ("POST", f"/extraction-jobs/{some}/cancel"),
        ("GET", f"/extraction-jobs/{some}/attempts"),
        ("GET", "/webhook-endpoints"),
        ("GET", f"/webhook-endpoints/{some}"),
        ("DELETE", f"/webhook-endpoints/{some}"),
        ("POST", f"/webhook-endpoints/{some}/rotate-secret"),
        ("GET", f"/webhook-endpoints/{some}/deliveries"),
    ]:
        assert ops.request(method, path).status == 403, (method, path)


# Every operation that takes a request body and needs a scope, as the API's own route table declares them.
SCOPED_WRITES = [o for o in http_surface() if o.scope is not None and o.method in {"POST", "PUT", "PATCH"}]
# Bodies each of which the API would refuse as malformed (400, 415 or 422) from a key holding the scope.
MALFORMED = {
    "not-json": ("application/json", b"{not json"),
    "not-an-object": ("application/json", b"[1, 2]"),
    "wrong-fields": ("application/json", b'{"no": "such field"}'),
    "not-json-media-type": ("text/plain", b"hello"),
}


@pytest.mark.parametrize("body_kind", MALFORMED)
@pytest.mark.parametrize("operation", SCOPED_WRITES, ids=[f"{o.method} {o.path}" for o in SCOPED_WRITES])
def test_a_key_lacking_the_scope_gets_403_before_its_malformed_body_is_read(
    stack, system_db, tenant, clean_db, operation, body_kind
):
    """Given a key holding every scope but the one an operation needs, when it sends that operation a body
    the API would refuse, the answer is the 403 for the scope: what the key may not send is never parsed,
    so its validation errors tell it nothing. Ids in the path are well-formed and unknown."""
    lacking = keyed_client(stack, system_db, tenant, *(ALL_SCOPES - {operation.scope}))
    path = "/".join(str(uuid4()) if part.startswith("{") else part for part in operation.path.split("/"))
    content_type, body = MALFORMED[body_kind]
    before = count_rows(clean_db)

    response = lacking.request(operation.method, path, raw_body=body, headers={"Content-Type": content_type})

    assert_forbidden(response, operation.scope)
    assert response.json["instance"] == path
    assert count_rows(clean_db) == before


def test_every_scoped_write_is_checked_above():
    """The route table holds writes of every kind of scope, so the test above covers more than one."""
    assert {o.scope for o in SCOPED_WRITES} >= {Scope.JOBS_WRITE, Scope.REVIEW, Scope.WEBHOOKS_ADMIN}


def test_a_key_lacking_the_scope_gets_403_before_its_query_is_validated(stack, system_db, tenant, clean_db):
    lacking = keyed_client(stack, system_db, tenant, *(ALL_SCOPES - {Scope.JOBS_READ}))

    assert_forbidden(lacking.request("GET", "/extraction-jobs?limit=0&state=DONE"), "jobs:read")


def test_keys_are_created_listed_and_revoked_and_a_revoked_key_stops_resolving(
    system_db, app_db, tenant, clean_db
):
    resolver = ApiKeyResolver(app_db, SystemClock(), ttl_seconds=0)  # as the authorizer resolves keys
    made = create_key(system_db, tenant.tenant_id, new_id, scopes=frozenset({Scope.REVIEW}))

    assert resolver.resolve(made.api_key).scopes == {Scope.REVIEW}
    assert resolver.resolve(tenant.api_key).scopes == ALL_SCOPES
    listed = {row["key_id"]: row for row in list_keys(system_db, tenant.tenant_id)}
    assert listed[made.key_id]["scopes"] == ["review"]
    assert listed[made.key_id]["revoked_at"] is None
    assert "key_hash" not in listed[made.key_id]

    revoke_key(system_db, SystemClock(), tenant.tenant_id, made.key_id)

    assert resolver.resolve(made.api_key) is None
    assert resolver.resolve(tenant.api_key) is not None
    with pytest.raises(NotFound):
        revoke_key(system_db, SystemClock(), tenant.tenant_id, made.key_id)


def test_the_schema_refuses_a_key_with_no_scope_or_an_unknown_one(tenant, clean_db):
    with psycopg.connect(clean_db) as conn:
        for scopes in ([], ["jobs:admin"]):
            with pytest.raises(psycopg.errors.CheckViolation), conn.transaction():
                conn.execute(
                    "INSERT INTO api_keys (key_id, tenant_id, key_hash, key_prefix, scopes)"
                    " VALUES (%s, %s, %s, 'tg_x', %s)",
                    (uuid4(), tenant.tenant_id, uuid4().bytes * 2, scopes),
                )


def test_an_operator_creates_lists_and_revokes_keys_from_the_cli(system_db, clean_db, monkeypatch, tmp_path):
    from typer.testing import CliRunner

    from tollgate.cli.main import app

    monkeypatch.setenv("DATABASE_URL", clean_db)

    def cli(*args: str):
        return CliRunner().invoke(app, [*args, "--data-dir", str(tmp_path)])

    created = cli("tenants", "create", "acme", "--scope", "jobs:read")
    assert created.exit_code == 0, created.output
    first_key = created.stdout.strip().splitlines()[-1]
    more = cli("tenants", "keys", "create", "acme", "--scope", "review", "--scope", "jobs:read")
    assert more.exit_code == 0, more.output
    assert cli("tenants", "keys", "create", "acme", "--scope", "jobs:admin").exit_code == 2

    listed = cli("tenants", "keys", "list", "acme")
    assert listed.exit_code == 0, listed.output
    lines = listed.stdout.strip().splitlines()
    assert len(lines) == 2
    assert "jobs:read review" in lines[0] and "live" in lines[0]
    assert "jobs:read" in lines[1] and first_key not in listed.stdout  # keys are never shown again

    key_id = lines[0].split()[0]
    assert cli("tenants", "keys", "revoke", "acme", key_id).exit_code == 0
    assert "revoked" in cli("tenants", "keys", "list", "acme").stdout.splitlines()[0]
    assert cli("tenants", "keys", "revoke", "acme", key_id).exit_code == 2
    assert cli("tenants", "keys", "revoke", "acme", "not-an-id").exit_code == 2


def test_attempt_history_needs_ops_read(stack, system_db, tenant, make_tenant, clean_db):
    from tollgate.execution.leasing import claim_next_job

    job_id = tenant.client.submit(invoice_request(), "k").json["job_id"]
    claimed = claim_next_job(system_db, SystemClock(), worker_id="w-1", lease_seconds=60, tenant_cap=10)
    assert claimed is not None and str(claimed.job_id) == job_id
    ops = keyed_client(stack, system_db, tenant, Scope.OPS_READ)
    reader = keyed_client(stack, system_db, tenant, Scope.JOBS_READ)

    history = ops.request("GET", f"/extraction-jobs/{job_id}/attempts")

    assert history.status == 200, history.json
    assert history.json["job_id"] == job_id
    [attempt] = history.json["attempts"]
    assert attempt["attempt"] == 1 and attempt["finished_at"] is None and attempt["outcome"] is None
    assert "worker_id" not in attempt and "fence" not in attempt  # the tenant gets no internals
    assert_forbidden(reader.request("GET", f"/extraction-jobs/{job_id}/attempts"), "ops:read")
    other = make_tenant("other")
    other_ops = keyed_client(stack, system_db, other, Scope.OPS_READ)
    assert other_ops.request("GET", f"/extraction-jobs/{job_id}/attempts").status == 404
