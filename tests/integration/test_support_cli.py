"""The support CLI as support staff run it, in this process against real PostgreSQL and moto: whole ids in a
narrow or piped terminal, JSON for scripts, clear errors for bad input with nothing written, read-only
commands that need only the database, and a process environment left as it was."""

from __future__ import annotations

import ast
import asyncio
import json
import os
import secrets
from pathlib import Path

import boto3
import pytest
from typer.testing import CliRunner

from tests.integration.test_execution import (
    MISPRINTED,
    TEXT,
    ScriptedLlm,
    claim,
    make_deps,
    misprinted_extraction,
    ok,
)
from tests.integration.test_support import audit, exhaust
from tests.support import invoice_request, job_row
from tollgate.cli import connect
from tollgate.cli import support as support_cli
from tollgate.cli.main import app
from tollgate.core.clock import new_id
from tollgate.execution.attempt import AttemptEnd, run_attempt
from tollgate.support.configuration import LOCAL_AWS_KEY, LOCAL_AWS_REGION, LOCAL_AWS_SECRET
from tollgate.tenants.suppliers import add_supplier
from tollgate_dev.local.aws import FAKE_AWS_ENV, create_job_type_queues, dlq_urls, queue_urls

pytestmark = pytest.mark.integration

SETTINGS = (
    "DATABASE_URL",
    "DATABASE_SECRET_ARN",
    "JOB_QUEUE_URLS",
    "JOB_DLQ_URLS",
    "WEBHOOK_STATE_MACHINE_ARN",
)


@pytest.fixture
def only_database(monkeypatch, stack, clean_db, tmp_path):
    """The environment of someone with database access only: no queues, no dispatcher, no AWS at all.
    (The API stack under test is started first: it needs its moto.)"""
    for name in (*SETTINGS, *FAKE_AWS_ENV, "AWS_ENDPOINT_URL", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DATABASE_URL", clean_db)
    return tmp_path  # a data folder without a running local system in it


@pytest.fixture
def local_system(monkeypatch, stack, clean_db, local_aws, tmp_path):
    """What `tollgate local up` leaves for the CLI: its facts in local.json, nothing in the environment."""
    all_queues = create_job_type_queues(f"cli-{secrets.token_hex(4)}", max_receive_count=2)
    (tmp_path / "local.json").write_text(
        json.dumps(
            {
                "aws_endpoint_url": local_aws.endpoint_url,
                "job_queue_urls": queue_urls(all_queues),
                "job_dlq_urls": dlq_urls(all_queues),
                "webhook_state_machine_arn": None,
                "database_url": clean_db,
            }
        ),
        encoding="utf-8",
    )
    # The queues are made; from here on only local.json says where things are.
    for name in (*SETTINGS, *FAKE_AWS_ENV, "AWS_ENDPOINT_URL", "MOTO_PORT"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path, all_queues


def cli(data_dir, *args, columns=80):
    """Runs a command in this process as a pipe of `columns` width sees it (no terminal: CliRunner)."""
    env = {"COLUMNS": str(columns)}
    return CliRunner().invoke(app, [*args, "--data-dir", str(data_dir)], env=env, catch_exceptions=False)


@pytest.fixture
def review_job(tenant, system_db):
    """A job whose extraction failed validation: REVIEW_REQUIRED with a total_mismatch reason. Ask for it
    before `only_database`: the worker here reads the document from moto."""
    add_supplier(system_db, tenant.tenant_id, "Nordwind Logistik GmbH", "DE89370400440532013000", new_id)
    job_id = tenant.client.submit(invoice_request(MISPRINTED), "review").json["job_id"]
    deps = make_deps(system_db, ScriptedLlm(ok(misprinted_extraction())))
    assert asyncio.run(run_attempt(deps, claim(deps))).end is AttemptEnd.REVIEW_REQUIRED
    return job_id


def test_jobs_list_and_show_need_only_the_database(only_database, tenant):
    job_id = tenant.client.submit(invoice_request(TEXT), "k").json["job_id"]

    listed = cli(only_database, "jobs", "list")
    shown = cli(only_database, "jobs", "show", job_id)

    assert listed.exit_code == 0, listed.output
    assert job_id in listed.stdout and "acme" in listed.stdout
    assert shown.exit_code == 0, shown.output
    assert job_id in shown.stdout and "READY" in shown.stdout


def test_ids_are_whole_in_an_80_column_pipe(only_database, make_tenant):
    tenant = make_tenant("a-tenant-with-a-rather-long-name")
    jobs = [tenant.client.submit(invoice_request(f"{TEXT}\n{i}"), f"k{i}").json["job_id"] for i in range(3)]

    for columns in (80, 60):
        listed = cli(only_database, "jobs", "list", columns=columns)

        assert listed.exit_code == 0, listed.output
        assert all(job_id in listed.stdout for job_id in jobs), listed.stdout
        assert "…" not in listed.stdout
        assert "a-tenant-with-a-rather-long-name" in listed.stdout


def test_jobs_show_says_whose_job_it_is_and_why_it_needs_review(review_job, only_database):
    shown = cli(only_database, "jobs", "show", review_job)

    assert shown.exit_code == 0, shown.output
    assert "acme" in shown.stdout, "the tenant's name"
    assert "REVIEW_REQUIRED" in shown.stdout
    assert "total_mismatch" in shown.stdout, "the review reason"


def test_json_output_parses_and_carries_the_fields(review_job, only_database, tenant):
    listed = cli(only_database, "jobs", "list", "--output", "json")
    shown = cli(only_database, "jobs", "show", review_job, "-o", "json")

    [job] = json.loads(listed.stdout)
    assert (job["job_id"], job["tenant"], job["state"]) == (review_job, "acme", "REVIEW_REQUIRED")
    assert job["tenant_id"] == str(tenant.tenant_id) and job["attempt"] == 1
    detail = json.loads(shown.stdout)
    assert (detail["job_id"], detail["tenant"], detail["state"]) == (review_job, "acme", "REVIEW_REQUIRED")
    assert [r["code"] for r in detail["review_reasons"]] == ["total_mismatch"]
    [attempt] = detail["attempts"]
    assert attempt["provider_request_id"] == "req_123" and attempt["outcome"] == "ok"
    assert detail["audit"] == []


@pytest.mark.parametrize(
    "args",
    [
        ("jobs", "list", "--tenant", "nosuch"),
        ("deliveries", "list", "--tenant", "nosuch", "--endpoint", "00000000-0000-0000-0000-000000000000"),
    ],
)
def test_an_unknown_tenant_is_an_error_not_an_empty_list(only_database, tenant, args):
    result = cli(only_database, *args)

    assert result.exit_code == 2
    assert "no tenant named 'nosuch'" in result.stderr
    assert result.stdout == ""


SUMMARY = {"job_type": "document_summary", "document": {"pages": [{"text": "Minutes of the board, 3 May."}]}}


def test_jobs_list_shows_each_jobs_type_and_filters_by_it(only_database, tenant):
    invoice = tenant.client.submit(invoice_request(TEXT), "invoice").json["job_id"]
    summary = tenant.client.submit(SUMMARY, "summary").json["job_id"]

    table = cli(only_database, "jobs", "list", columns=200)
    summaries = cli(only_database, "jobs", "list", "--type", "document_summary", "-o", "json")

    assert table.exit_code == 0, table.output
    [invoice_line] = [line for line in table.stdout.splitlines() if invoice in line]
    [summary_line] = [line for line in table.stdout.splitlines() if summary in line]
    assert "invoice_extraction" in invoice_line and "document_summary" in summary_line
    assert [(j["job_id"], j["job_type"]) for j in json.loads(summaries.stdout)] == [
        (summary, "document_summary")
    ]


def test_an_unknown_job_type_is_an_error_that_names_the_types(only_database, tenant):
    tenant.client.submit(invoice_request(TEXT), "k")

    result = cli(only_database, "jobs", "list", "--type", "invoice")

    assert result.exit_code == 2
    assert "'invoice' is not a job type" in result.stderr
    assert all(name in result.stderr for name in ("invoice_extraction", "document_summary"))
    assert result.stdout == ""


def test_a_tenants_webhook_endpoints_give_the_ids_deliveries_list_takes(only_database, tenant):
    created = tenant.client.request(
        "POST", "/webhook-endpoints", json_body={"url": "https://erp.example.com/hooks"}
    )
    assert created.status == 201, created.body
    endpoint_id = created.json["endpoint_id"]

    table = cli(only_database, "deliveries", "endpoints", "--tenant", "acme")
    as_json = cli(only_database, "deliveries", "endpoints", "--tenant", "acme", "-o", "json")
    deliveries = cli(only_database, "deliveries", "list", "--tenant", "acme", "--endpoint", endpoint_id)
    nobody = cli(only_database, "deliveries", "endpoints", "--tenant", "nosuch")

    assert table.exit_code == 0, table.output
    assert endpoint_id in table.stdout and "https://erp.example.com/hooks" in table.stdout
    [endpoint] = json.loads(as_json.stdout)
    assert (endpoint["endpoint_id"], endpoint["enabled"]) == (endpoint_id, True)
    assert "secret" not in endpoint, "the signing secret is shown once, at registration"
    assert deliveries.exit_code == 0, deliveries.output
    assert nobody.exit_code == 2 and "no tenant named 'nosuch'" in nobody.stderr


def test_an_unknown_state_is_an_error_that_names_the_states(only_database, tenant):
    result = cli(only_database, "jobs", "list", "--state", "BOGUS")

    assert result.exit_code == 2
    assert "BOGUS" in result.stderr and "failed_terminal" in result.stderr.lower()
    assert result.stdout == ""


def test_a_state_is_accepted_in_any_case(only_database, tenant):
    job_id = tenant.client.submit(invoice_request(TEXT), "k").json["job_id"]

    ready = cli(only_database, "jobs", "list", "--state", "ready", "-o", "json")
    failed = cli(only_database, "jobs", "list", "--state", "FAILED_TERMINAL", "-o", "json")

    assert [j["job_id"] for j in json.loads(ready.stdout)] == [job_id]
    assert json.loads(failed.stdout) == []


def test_an_unknown_job_is_an_error(only_database):
    result = cli(only_database, "jobs", "show", "70892ccd-bb00-4000-8000-000000000000")

    assert result.exit_code == 2
    assert "no job 70892ccd-bb00-4000-8000-000000000000" in result.stderr


def test_a_retry_without_a_real_reason_is_refused_and_writes_nothing(
    only_database, tenant, system_db, clean_db
):
    job_id = tenant.client.submit(invoice_request(TEXT), "k").json["job_id"]
    exhaust(system_db, job_id)

    refused = cli(only_database, "jobs", "retry", job_id, "--reason", "  x ")

    assert refused.exit_code == 2
    assert "at least 3 characters" in refused.stderr
    assert job_row(clean_db, job_id)["state"] == "FAILED_TERMINAL" and audit(clean_db) == []


def test_a_retry_needs_only_the_database_and_leaves_an_audit_row(
    only_database, tenant, system_db, clean_db, monkeypatch
):
    job_id = tenant.client.submit(invoice_request(TEXT), "k").json["job_id"]
    exhaust(system_db, job_id)
    monkeypatch.setenv("TOLLGATE_ACTOR", "oncall@example.com")

    retried = cli(only_database, "jobs", "retry", job_id, "--reason", "provider fixed")

    assert retried.exit_code == 0, retried.output
    assert job_row(clean_db, job_id)["state"] == "READY"
    assert audit(clean_db) == [("oncall@example.com", "provider fixed", "job_retry", job_id, "reset")]
    shown = json.loads(cli(only_database, "jobs", "show", job_id, "-o", "json").stdout)
    assert [(a["actor"], a["action"], a["reason"]) for a in shown["audit"]] == [
        ("oncall@example.com", "job_retry", "provider fixed")
    ]


def test_dlq_commands_say_which_settings_they_miss(only_database):
    result = cli(only_database, "dlq", "list")

    assert result.exit_code == 2
    assert "JOB_QUEUE_URLS is not set" in result.stderr and "tollgate local up" in result.stderr


def test_a_replay_without_a_dispatcher_is_refused_and_writes_nothing(only_database, tenant, clean_db):
    delivery = "00000000-0000-0000-0000-000000000001"
    result = cli(
        only_database,
        "deliveries",
        "replay",
        "--tenant",
        "acme",
        "--endpoint",
        "00000000-0000-0000-0000-000000000000",
        "--delivery",
        delivery,
        "--reason",
        "tenant asked",
    )

    assert result.exit_code == 2
    assert "WEBHOOK_STATE_MACHINE_ARN" in result.stderr
    assert audit(clean_db) == []


def test_against_the_local_system_the_cli_leaves_the_environment_as_it_was(local_system, tenant, system_db):
    data_dir, all_queues = local_system
    job_id = tenant.client.submit(invoice_request(TEXT), "k").json["job_id"]
    # The test stack runs no relay: publish and fail the message into the DLQ with a client of our own.
    _into_dlq(system_db, _local_sqs(data_dir), all_queues["invoice_extraction"])
    os_environ_before = dict(os.environ)

    listed = cli(data_dir, "dlq", "list")
    as_json = cli(data_dir, "dlq", "list", "-o", "json")
    jobs = cli(data_dir, "jobs", "list", "-o", "json")

    assert dict(os.environ) == os_environ_before, "the CLI changed the process environment"
    assert listed.exit_code == 0, listed.output
    assert job_id in listed.stdout
    [letter] = json.loads(as_json.stdout)
    assert (letter["job_type"], letter["job_id"], letter["job_state"], letter["decision"]) == (
        "invoice_extraction",
        job_id,
        "READY",
        "redrive",
    )
    assert letter["message_id"] in listed.stdout, "the message id is whole too, at 80 columns"
    assert [j["job_id"] for j in json.loads(jobs.stdout)] == [job_id]
    shown = cli(data_dir, "dlq", "show", letter["message_id"], "-o", "json")
    assert json.loads(shown.stdout)["body"]["payload"]["job_id"] == job_id


@pytest.fixture
def no_database_named(monkeypatch, stack, clean_db, tmp_path):
    """A shell that names no database, and a fallback (as the development package's embedded server is)
    that records each time a command asks it for one."""
    for name in (*SETTINGS, *FAKE_AWS_ENV, "AWS_ENDPOINT_URL", "MOTO_PORT"):
        monkeypatch.delenv(name, raising=False)
    asked: list[Path] = []

    def embedded(data_dir: Path) -> str:
        asked.append(data_dir)
        return clean_db

    monkeypatch.setattr(connect, "database_fallbacks", [embedded])
    monkeypatch.setattr(connect, "plugin_loader", [])
    return tmp_path, asked


# One read command of each way commands used to find their database: the support commands (which needed
# a running `local up`) and the tenants, keys and usage commands (which started the embedded server).
EVERY_KIND = [
    ("jobs", "list", "-o", "json"),
    ("reviews", "list", "-o", "json"),
    ("tenants", "keys", "list", "acme", "-o", "json"),
    ("tenants", "list", "-o", "json"),
    ("usage", "-o", "json"),
]


@pytest.mark.parametrize("args", EVERY_KIND, ids=lambda args: " ".join(args[:2]))
def test_without_local_up_every_command_uses_the_database_the_fallback_offers(
    no_database_named, tenant, args
):
    data_dir, asked = no_database_named

    result = cli(data_dir, *args)

    assert result.exit_code == 0, result.output
    json.loads(result.stdout)
    assert asked == [data_dir]


@pytest.mark.parametrize("args", EVERY_KIND, ids=lambda args: " ".join(args[:2]))
def test_with_local_up_running_every_command_uses_its_database_and_starts_none(
    no_database_named, tenant, clean_db, args
):
    data_dir, asked = no_database_named
    (data_dir / "local.json").write_text(json.dumps({"database_url": clean_db}), encoding="utf-8")

    result = cli(data_dir, *args)

    assert result.exit_code == 0, result.output
    json.loads(result.stdout)
    assert asked == [], "a running local up's database is used, not a second one started"


def test_a_command_that_needs_queues_starts_no_database_to_say_what_it_misses(no_database_named):
    data_dir, asked = no_database_named

    result = cli(data_dir, "dlq", "list")

    assert result.exit_code == 2
    assert "JOB_QUEUE_URLS is not set" in result.stderr and "tollgate local up" in result.stderr
    assert asked == []


def test_the_local_credentials_are_the_ones_the_local_system_uses():
    assert (
        FAKE_AWS_ENV["AWS_ACCESS_KEY_ID"],
        FAKE_AWS_ENV["AWS_SECRET_ACCESS_KEY"],
        FAKE_AWS_ENV["AWS_DEFAULT_REGION"],
    ) == (LOCAL_AWS_KEY, LOCAL_AWS_SECRET, LOCAL_AWS_REGION)


def test_a_dry_run_redrive_from_the_cli_changes_nothing_and_reports_json(
    local_system, tenant, system_db, clean_db
):
    data_dir, all_queues = local_system
    job_id = tenant.client.submit(invoice_request(TEXT), "k").json["job_id"]
    _into_dlq(system_db, _local_sqs(data_dir), all_queues["invoice_extraction"])

    planned = cli(data_dir, "dlq", "redrive", "--reason", "looking first", "--dry-run", "-o", "json")

    assert planned.exit_code == 0, planned.output
    report = json.loads(planned.stdout)
    assert report["dry_run"] is True
    assert [(i["job_id"], i["decision"], i["done"]) for i in report["items"]] == [(job_id, "redrive", False)]
    assert audit(clean_db) == []


def _local_sqs(data_dir):
    facts = json.loads((data_dir / "local.json").read_text())
    return boto3.client(
        "sqs",
        endpoint_url=facts["aws_endpoint_url"],
        aws_access_key_id=FAKE_AWS_ENV["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=FAKE_AWS_ENV["AWS_SECRET_ACCESS_KEY"],
        region_name=FAKE_AWS_ENV["AWS_DEFAULT_REGION"],
    )


def _into_dlq(system_db, sqs, queues):
    """Relays the outbox to the jobs queue, then receives without deleting until SQS moves it to the DLQ."""
    from tollgate.core.clock import SystemClock
    from tollgate.events import EXTRACTION_REQUESTED
    from tollgate.outbox.relay import RelayDeps, relay_outbox
    from tollgate.outbox.sqs import SqsFifoPublisher

    relay_outbox(
        RelayDeps(
            db=system_db,
            clock=SystemClock(),
            routes={EXTRACTION_REQUESTED: SqsFifoPublisher(sqs, queues.url)},
        )
    )
    for _ in range(6):
        sqs.receive_message(QueueUrl=queues.url, MaxNumberOfMessages=10, VisibilityTimeout=0)
    depth = sqs.get_queue_attributes(QueueUrl=queues.dlq_url, AttributeNames=["ApproximateNumberOfMessages"])
    assert int(depth["Attributes"]["ApproximateNumberOfMessages"]) == 1


def test_the_commands_take_clients_and_settings_from_wiring_not_from_boto3_or_the_environment():
    """Like every entrypoint: the CLI module parses, calls and prints; wiring makes the clients."""
    source = Path(support_cli.__file__).read_text(encoding="utf-8")
    tree = ast.parse(source)
    imported = {
        name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for name in (
            [alias.name for alias in node.names] if isinstance(node, ast.Import) else [node.module or ""]
        )
    }
    assert not imported & {"boto3", "os", "getpass"}, imported
    names = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)} | {
        node.id for node in ast.walk(tree) if isinstance(node, ast.Name)
    }
    used = names & {"environ", "getenv", "Session", "client"}
    assert not used, f"the CLI reaches for the environment or makes clients itself: {used}"
