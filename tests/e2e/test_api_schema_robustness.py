"""Schemathesis against the API as it is served: the stack's own /openapi.json over a real socket on
127.0.0.1, a real tenant's key, a fixed seed and a fixed number of examples per operation. No 5xx, and
every response (status, content type, headers, body; problem+json for errors) as the document says."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from uuid import UUID

import boto3
import psycopg
import pytest

from tests.support import PUBLIC_V4, FakeResolver, invoice_request, outbox_event
from tollgate.core.clock import new_id
from tollgate.delivery.deliveries import WebhookDispatcher, delivery_id_for
from tollgate.events import ExtractionCompleted
from tollgate.tenants.keys import create_tenant
from tollgate_dev.local.aws import LocalAws
from tollgate_dev.local.client import ApiClient
from tollgate_dev.local.runtime import LocalStack

pytestmark = pytest.mark.e2e

SEED = 20261129
EXAMPLES_PER_OPERATION = 30
# Replays only need a state machine to start; what it then does is the dispatcher's own tests' business.
DISPATCHER_DEFINITION = {"StartAt": "Delivered", "States": {"Delivered": {"Type": "Succeed"}}}


@pytest.fixture(scope="module")
def stack(fresh_database, tmp_path_factory) -> Iterator[LocalStack]:
    # LocalAws puts the process's AWS settings back when it stops, for the tests after this module.
    yield from _stack(fresh_database(), tmp_path_factory.mktemp("stack"))


def _stack(database_url: str, data_dir: Path) -> Iterator[LocalStack]:
    aws = LocalAws()
    aws.start()
    try:
        role = boto3.client("iam").create_role(
            RoleName="robustness-dispatcher", AssumeRolePolicyDocument="{}"
        )
        dispatcher = boto3.client("stepfunctions").create_state_machine(
            name="robustness-dispatcher",
            definition=json.dumps(DISPATCHER_DEFINITION),
            roleArn=role["Role"]["Arn"],
        )["stateMachineArn"]
        local = LocalStack(
            port=0,
            pipeline=False,
            database_url=database_url,
            data_dir=data_dir,
            aws=aws,
            # As deployed: https endpoints only (the local default lets the demo's receiver use http).
            api_overrides={"webhook_state_machine_arn": dispatcher, "webhooks_allow_private_targets": False},
            # Registration resolves names: every name is one public address here, and no query leaves.
            webhook_resolver=FakeResolver(default=[PUBLIC_V4]),
        ).start()
        yield local
        local.stop()
    finally:
        aws.stop()


@dataclass(frozen=True)
class Account:
    api_key: str
    job_ids: list[str]
    endpoint_ids: list[str]
    delivery_ids: list[str]


class NoExecutions:
    """Deliveries are seeded in the database; no dispatcher execution is wanted for them."""

    def start(self, delivery_id: UUID, name: str) -> None:
        pass


def open_account(stack: LocalStack) -> Account:
    """A tenant with jobs in several states, two webhook endpoints and a delivery to each, so that the
    operations on one job, endpoint or delivery reach past their 404."""
    assert stack.system_db is not None
    tenant = create_tenant(stack.system_db, "robustness", new_id)
    client = ApiClient(stack.api_url, tenant.api_key)
    ready, cancelled, succeeded = (
        client.submit(invoice_request(f"Invoice {n}"), f"seed-{n}").json["job_id"] for n in range(3)
    )
    assert client.request("POST", f"/extraction-jobs/{cancelled}/cancel").status == 200
    with psycopg.connect(stack.database_url) as conn:  # a finished job with its result, as a worker leaves it
        conn.execute(
            "UPDATE extraction_jobs SET state = 'SUCCEEDED', attempt = 1, state_version = 3, finished_at = now()"
            " WHERE job_id = %s",
            (succeeded,),
        )
        conn.execute(
            "INSERT INTO extraction_results (job_id, tenant_id, attempt, policy_version, result)"
            " SELECT job_id, tenant_id, 1, 'validation.v1', '{\"total\": \"119.00\"}' FROM extraction_jobs"
            " WHERE job_id = %s",
            (succeeded,),
        )
    endpoint_ids = [
        client.request(
            "POST", "/webhook-endpoints", json_body={"url": f"https://erp{n}.example.com/hooks"}
        ).json["endpoint_id"]
        for n in range(2)
    ]
    completed = outbox_event(
        ExtractionCompleted(job_id=UUID(succeeded), tenant_id=tenant.tenant_id, state_version=3, attempt=1)
    )
    WebhookDispatcher(stack.system_db, NoExecutions()).publish([completed])
    deliveries = [delivery_id_for(completed.event_id, UUID(e)) for e in endpoint_ids]
    return Account(tenant.api_key, [ready, cancelled, succeeded], endpoint_ids, [str(d) for d in deliveries])


def config_file(folder: Path, account: Account) -> Path:
    """schemathesis.toml for this run; the key goes in here rather than on a command line."""
    path = folder / "schemathesis.toml"
    path.write_text(
        f"""
seed = {SEED}

[cache]
enabled = false

[headers]
Authorization = "Bearer {account.api_key}"

[generation]
max-examples = {EXAMPLES_PER_OPERATION}
database = "none"

# Six ids in ten are the tenant's own (the deep paths); the rest are generated (404s, malformed ids).
[dictionaries.jobs]
values = {json.dumps(account.job_ids)}

[dictionaries.endpoints]
values = {json.dumps(account.endpoint_ids)}

[dictionaries.deliveries]
values = {json.dumps(account.delivery_ids)}

[parameters]
"path.job_id" = {{ dictionary = "jobs", probability = 0.6 }}
"path.endpoint_id" = {{ dictionary = "endpoints", probability = 0.6 }}
"path.delivery_id" = {{ dictionary = "deliveries", probability = 0.6 }}

[checks.negative_data_rejection]
# Refusals of invalid input; 413 too, as a body over the size limit is refused before its shape is read.
expected-statuses = ["400", "401", "403", "404", "405", "409", "413", "415", "422", "429"]

[phases.coverage]
# A method that no resource declares is answered by API Gateway before any of our code runs, and by the local
# gateway alike: 404 not-found ("No such resource or method."), not the 405 this check asks for;
# tests/e2e/test_deployed_routing_on_local_stack.py holds the gateway to that answer.
unexpected-methods = []

# Schema-valid requests that the API refuses by rules a schema cannot state; each refusal is documented.
[[operations]]
include-name = "GET /extraction-jobs"
# A cursor is opaque: only the ones the API handed out are valid (400 invalid-request otherwise).
checks.positive_data_acceptance.expected-statuses = ["2xx", "400", "401", "429"]

[[operations]]
include-name = "POST /extraction-jobs"
# A document reference must lie under the tenant's own prefix and name an object version that exists, and a
# deadline must be within the deployment's maximum (422).
checks.positive_data_acceptance.expected-statuses = ["2xx", "401", "409", "422", "429"]

[[operations]]
include-name = "GET /reviews"
# The review queue's cursor is opaque too.
checks.positive_data_acceptance.expected-statuses = ["2xx", "400", "401", "429"]

[[operations]]
include-name = "POST /extraction-jobs/{{job_id}}/review"
# A decision needs If-Match with the state_version read (428 without, 400 when malformed, 412 when stale),
# a job waiting for review (409), corrections only with correct and a correction that passes the policy (422).
checks.positive_data_acceptance.expected-statuses = ["2xx", "400", "401", "404", "409", "412", "422", "428", "429"]

[[operations]]
include-name = "GET /usage"
# A day must exist (2026-02-30 does not) and a range be at most 366 days, in order (422).
checks.positive_data_acceptance.expected-statuses = ["2xx", "401", "422", "429"]

[[operations]]
include-name = ["POST /webhook-endpoints", "PATCH /webhook-endpoints/{{endpoint_id}}"]
# An endpoint's URL must be https with a host and without credentials or a fragment (422).
checks.positive_data_acceptance.expected-statuses = ["2xx", "401", "404", "422", "429"]
""",
        encoding="utf-8",
    )
    return path


def test_every_operation_answers_as_documented(stack: LocalStack, tmp_path: Path) -> None:
    command = [
        sys.executable,
        "-m",
        "schemathesis.cli",
        "--no-color",
        "--config-file",
        str(config_file(tmp_path, open_account(stack))),
        "run",
        f"{stack.api_url}/openapi.json",
        "--checks",
        "all",
        # See unexpected-methods above.
        "--exclude-checks",
        "unsupported_method",
        "--workers",
        "1",
    ]

    # Run from the test's own folder: schemathesis keeps files in its working directory.
    run = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False)

    # Generated bodies can be megabytes long: keep each line of the report short.
    report = "\n".join(line[:400] for line in (run.stdout + run.stderr).splitlines())
    assert run.returncode == 0, report[-30_000:]
