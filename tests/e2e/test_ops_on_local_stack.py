"""Issue-level story of a deployed stage's operations path, on the whole local system: the CLI in stage mode
has no database and no queue in reach, only the operations function's URL (the local stand-in, which checks
SigV4 as Lambda does) and AWS credentials. Through it an operator creates a tenant whose key works at the
API, revokes a key, and redrives a dead letter back to a completed job; every audit row names the IAM
identity the signature proved, not anything the CLI said."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import psycopg
import pytest

from tests.e2e.test_support_on_local_stack import PATIENCE_SECONDS, dlq_depth, state
from tollgate_dev.local.client import ApiClient
from tollgate_dev.local.ops import LOCAL_OPERATOR_ARN
from tollgate_dev.samples import SUPPLIERS, generate_invoices, request_body
from tollgate_dev.simulator.server import Fault

pytestmark = pytest.mark.e2e


@pytest.fixture
def stack(local_stack):
    return local_stack(
        storm_retry_after_seconds=0.05,
        worker_overrides={
            "retry_base_seconds": 0.05,
            "retry_cap_seconds": 0.1,
            "ingress_failure_visibility_seconds": 0,
        },
    )


def operator(stack, *args, secret="testing"):
    """The CLI as an operator's machine runs it against a stage: AWS credentials and the function's URL, no
    database, no queues, no local system's data folder, and a login name the audit must not use."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"JOB_QUEUE_URLS", "JOB_DLQ_URLS", "DATABASE_URL", "MOTO_PORT"}
        and not k.startswith(("AWS_", "TOLLGATE_"))
    }
    env |= {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": secret,
        "AWS_DEFAULT_REGION": "eu-west-1",
        "TOLLGATE_OPS_URL": stack.ops.url,
        "TOLLGATE_ACTOR": "someone-claiming-to-be-root",
        "COLUMNS": "200",
    }
    return subprocess.run(
        [sys.executable, "-m", "tollgate.cli.main", "--stage", "dev", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        cwd=str(stack.data_dir),
    )


def trail(url):
    with psycopg.connect(url) as conn:
        return conn.execute(
            "SELECT actor, action, outcome, target FROM support_audit ORDER BY audit_id"
        ).fetchall()


def test_operator_creates_a_tenant_revokes_a_key_and_redrives_a_dead_letter_through_the_ops_url(stack):
    url = stack.database_url

    created = operator(stack, "tenants", "create", "acme")
    assert created.returncode == 0, created.stderr
    api_key = created.stdout.strip()
    assert api_key.startswith("tg_") and "\n" not in api_key, "the key alone on stdout"
    assert "tenant acme (" in created.stderr
    client = ApiClient(stack.api_url, api_key)
    assert client.request("GET", "/extraction-jobs").status == 200, "the new tenant's key works at the API"
    for supplier in SUPPLIERS:
        added = operator(stack, "tenants", "add-supplier", "acme", supplier.name, "--iban", supplier.iban)
        assert added.returncode == 0, added.stderr

    spare = operator(stack, "tenants", "keys", "create", "acme", "--scope", "jobs:read")
    assert spare.returncode == 0, spare.stderr
    listed = operator(stack, "tenants", "keys", "list", "acme")
    spare_id = next(line.split()[0] for line in listed.stdout.splitlines() if "jobs:read  created" in line)
    revoked = operator(stack, "tenants", "keys", "revoke", "acme", spare_id)
    assert revoked.returncode == 0, revoked.stderr
    assert "revoked" in operator(stack, "tenants", "keys", "list", "acme").stdout

    # A message the worker could not record lands in the DLQ while its job runs out of attempts.
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("REVOKE INSERT ON execution_inbox FROM tollgate_system")
    stack.simulator.queue_fault(Fault.RATE_LIMIT, count=5)
    (invoice,) = generate_invoices(1, seed=1, kinds=["clean"])  # in EUR: a default currency
    stuck = client.submit(request_body(invoice), "stuck").json["job_id"]
    assert stack.wait_for(
        lambda: state(url, stuck) == "FAILED_TERMINAL" and dlq_depth(stack) == 1, timeout=PATIENCE_SECONDS
    ), "the throttled job did not fail terminally with its message in the DLQ"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("GRANT INSERT ON execution_inbox TO tollgate_system")

    planned = operator(stack, "dlq", "list", "--output", "json")
    assert planned.returncode == 0, planned.stderr
    assert [(i["job_id"], i["decision"]) for i in json.loads(planned.stdout)] == [
        (stuck, "reset_and_redrive")
    ]
    redriven = operator(stack, "dlq", "redrive", "--reason", "database grant restored")
    assert redriven.returncode == 0, redriven.stderr
    assert stack.wait_for(lambda: state(url, stuck) == "SUCCEEDED", timeout=PATIENCE_SECONDS), (
        "the redriven job never succeeded"
    )
    assert dlq_depth(stack) == 0

    audit = trail(url)
    assert {actor for actor, *_ in audit} == {LOCAL_OPERATOR_ARN}, "only the verified identity is recorded"
    assert ("tenant_create", "done", "acme") in {(a, o, t) for _, a, o, t in audit}
    assert ("key_revoke", "done", spare_id) in {(a, o, t) for _, a, o, t in audit}
    assert ("dlq_redrive", "reset_and_redrive", stuck) in {(a, o, t) for _, a, o, t in audit}
    assert api_key not in json.dumps(audit, default=str)


def test_a_forged_signature_changes_nothing(stack):
    url = stack.database_url

    forged = operator(stack, "tenants", "create", "mallory", secret="not-the-secret")

    assert forged.returncode == 1
    assert "HTTP 403" in forged.stderr
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT count(*) FROM tenants").fetchone()[0] == 0
    assert trail(url) == []
