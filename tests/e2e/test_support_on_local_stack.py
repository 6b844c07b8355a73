"""Issue-level story on the whole local system: a job completes and its webhook is verified by the demo ERP;
a message that kept failing lands in the DLQ while its job runs out of attempts; `tollgate dlq redrive` brings
it back to a completed job with an audit row; a stale dead letter of a finished job is discarded with the
reason."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import boto3
import psycopg
import pytest

from tests.support import valid_webhook
from tollgate.core.clock import new_id
from tollgate.tenants.keys import create_tenant
from tollgate.tenants.suppliers import add_supplier
from tollgate_dev.local.client import ApiClient
from tollgate_dev.samples import SUPPLIERS, generate_invoices, request_body
from tollgate_dev.simulator.server import Fault

pytestmark = pytest.mark.e2e

# How long the local system (workers, relay, scheduler, moto's SQS) may take to get somewhere on a loaded
# machine; it runs out only when the test is failing.
PATIENCE_SECONDS = 240  # a bound for a loaded 2-core machine: a passing run waits far less


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


def state(url, job_id):
    with psycopg.connect(url) as conn:
        return conn.execute("SELECT state FROM extraction_jobs WHERE job_id = %s", (job_id,)).fetchone()[0]


def dlq_depth(stack):
    attributes = boto3.client("sqs").get_queue_attributes(
        QueueUrl=stack.queues["invoice_extraction"].dlq_url, AttributeNames=["ApproximateNumberOfMessages"]
    )["Attributes"]
    return int(attributes["ApproximateNumberOfMessages"])


def cli(stack, *args, columns=80):
    """The CLI as another process on this machine runs it: nothing about the system in its environment (no
    AWS variables either), only the data folder where `local up` wrote its facts; output to a pipe."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"JOB_QUEUE_URLS", "JOB_DLQ_URLS", "DATABASE_URL", "MOTO_PORT"}
        and not k.startswith("AWS_")
    }
    return subprocess.run(
        [sys.executable, "-m", "tollgate.cli.main", *args, "--data-dir", str(stack.data_dir)],
        env={**env, "COLUMNS": str(columns), "TOLLGATE_ACTOR": "oncall"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_webhook_dlq_and_redrive_story(stack):
    db, url = stack.system_db, stack.database_url
    tenant = create_tenant(db, "story", new_id, allowed_currencies=sorted({s.currency for s in SUPPLIERS}))
    for supplier in SUPPLIERS:
        add_supplier(db, tenant.tenant_id, supplier.name, supplier.iban, new_id)
    client = ApiClient(stack.api_url, tenant.api_key)
    # The standing demo ERP of `tollgate local up` verifies with the secret the endpoint was registered with.
    client.request("POST", "/webhook-endpoints", json_body={"url": f"{stack.erp.url}/story"})
    receiver = stack.erp.receiver
    first, second = generate_invoices(2, seed=5, kinds=["clean"])

    # A job runs to its end and its signed webhook is verified by the receiver.
    done = client.submit(request_body(first), "first").json["job_id"]
    assert stack.wait_for(lambda: len(receiver.accepted) == 1, timeout=PATIENCE_SECONDS), (
        "the first job's webhook never reached the demo ERP"
    )
    assert state(url, done) == "SUCCEEDED"

    # The worker cannot record the next job's message (a fault in the database), so SQS retires it to
    # the DLQ; meanwhile the provider throttles every attempt and the job runs out of them.
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("REVOKE INSERT ON execution_inbox FROM tollgate_system")
    stack.simulator.queue_fault(Fault.RATE_LIMIT, count=5)
    stuck = client.submit(request_body(second), "second").json["job_id"]
    assert stack.wait_for(
        lambda: state(url, stuck) == "FAILED_TERMINAL" and dlq_depth(stack) == 1, timeout=PATIENCE_SECONDS
    ), "the throttled job did not fail terminally with its message in the DLQ"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("GRANT INSERT ON execution_inbox TO tollgate_system")
        (event_body,) = conn.execute(
            "SELECT row_to_json(e)::text FROM (SELECT event_id, event_type, tenant_id, aggregate_id, payload,"
            " trace_context, created_at FROM outbox_events WHERE aggregate_id = %s"
            " AND event_type = 'extraction.requested.v1') e",
            (done,),
        ).fetchone()
    # A stale dead letter of the finished job too.
    boto3.client("sqs").send_message(
        QueueUrl=stack.queues["invoice_extraction"].dlq_url,
        MessageBody=event_body,
        MessageGroupId="g",
        MessageDeduplicationId="stale",
    )

    listed = cli(stack, "dlq", "list")
    assert listed.returncode == 0, listed.stderr
    assert "reset_and_redrive" in listed.stdout and "discard" in listed.stdout
    assert stuck in listed.stdout and done in listed.stdout, "whole job ids in an 80-column pipe"
    planned = json.loads(cli(stack, "dlq", "list", "--output", "json").stdout)
    assert sorted((i["job_id"], i["decision"]) for i in planned) == sorted(
        [(stuck, "reset_and_redrive"), (done, "discard")]
    )

    redriven = cli(stack, "dlq", "redrive", "--reason", "database grant restored")
    assert redriven.returncode == 0, redriven.stderr

    assert stack.wait_for(lambda: state(url, stuck) == "SUCCEEDED", timeout=PATIENCE_SECONDS), (
        "the redriven job never succeeded"
    )
    assert "already ended SUCCEEDED" in redriven.stdout
    with psycopg.connect(url) as conn:
        trail = conn.execute(
            "SELECT actor, action, outcome, target FROM support_audit ORDER BY audit_id"
        ).fetchall()
    assert sorted(trail) == sorted(
        [("oncall", "dlq_redrive", "reset_and_redrive", stuck), ("oncall", "dlq_redrive", "discard", done)]
    )
    assert dlq_depth(stack) == 0
    shown = cli(stack, "jobs", "show", stuck)
    assert shown.returncode == 0 and "throttled" in shown.stdout and "database grant restored" in shown.stdout
    detail = json.loads(cli(stack, "jobs", "show", stuck, "--output", "json").stdout)
    assert (detail["tenant"], detail["state"]) == ("story", "SUCCEEDED")
    assert [a["reason"] for a in detail["audit"]] == ["database grant restored"]
    bodies = [valid_webhook(received.body) for received in receiver.accepted]
    assert bodies[0]["data"]["job_id"] == done
