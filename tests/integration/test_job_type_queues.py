"""Each job type has its own SQS FIFO queue and dead-letter queue, on real PostgreSQL and moto: the relay
(as wired) sends a requested event to its type's queue, the worker takes in every queue without a quiet one
holding up a busy one, and a dead letter of each type is listed with its type and redriven to that type's
queue by `tollgate dlq redrive --job-type`, after which its job runs."""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from typing import Any
from uuid import UUID

import boto3
import psycopg
import pytest
from pydantic import SecretStr

from tests.integration.test_execution import TEXT, ScriptedLlm, claim, make_deps, ok, within
from tests.integration.test_support_cli import SETTINGS, cli
from tests.support import invoice_request, job_row
from tollgate.core.clock import SystemClock, new_id
from tollgate.events import EXTRACTION_REQUESTED, ExtractionRequested, outbox_row
from tollgate.execution.worker import WorkerConfig, run_worker
from tollgate.ingress.consumer import IngressDeps, IngressOutcome, ingest_once
from tollgate.jobtypes.registry import JOB_TYPES
from tollgate.outbox.job_queues import JobTypeQueues
from tollgate.outbox.relay import RelayDeps, relay_outbox
from tollgate.outbox.sqs import SqsFifoPublisher
from tollgate.settings import RelaySettings, WorkerSettings
from tollgate.wiring import build_ingress, build_relay
from tollgate_dev.local.aws import FAKE_AWS_ENV, JobsQueues, create_job_type_queues, dlq_urls, queue_urls
from tollgate_dev.local.runtime import LOCAL_BUCKET

pytestmark = pytest.mark.integration


@pytest.fixture
def all_queues(local_aws) -> dict[str, JobsQueues]:
    return create_job_type_queues(f"types-{secrets.token_hex(4)}", max_receive_count=2)


def relay(system_db, database_url: str, all_queues: dict[str, JobsQueues]):
    """The relay as its Lambda is wired, pointed at these queues."""
    settings = RelaySettings(database_url=SecretStr(database_url), job_queue_urls=queue_urls(all_queues))
    return build_relay(settings, db=system_db)


def messages(url: str) -> list[dict[str, Any]]:
    """Every message on a queue, looked at and made visible again."""
    sqs = boto3.client("sqs")
    found: list[dict[str, Any]] = []
    while batch := sqs.receive_message(
        QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=30, MessageSystemAttributeNames=["All"]
    ).get("Messages", []):
        found.extend(batch)
    for message in found:
        sqs.change_message_visibility(
            QueueUrl=url, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=0
        )
    return found


def depth(url: str, sqs: Any = None) -> int:
    attributes = (sqs or boto3.client("sqs")).get_queue_attributes(
        QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
    )["Attributes"]
    return sum(int(value) for value in attributes.values())


def test_the_relay_sends_each_types_requested_event_to_that_types_queue_only(
    tenant, system_db, database_url, all_queues, clean_db
):
    # Given a requested event of every registered type, and one of a type nothing registers
    sent: dict[str, UUID] = {}
    with system_db.transaction() as conn:
        for job_type in [*JOB_TYPES, "translation"]:
            job_id = new_id()
            event = ExtractionRequested(
                job_id=job_id, tenant_id=tenant.tenant_id, state_version=1, job_type=job_type
            )
            conn.execute(
                system_db.q.insert_outbox_event, outbox_row(event, event_id=new_id(), trace_context=None)
            )
            sent[job_type] = job_id

    # When the relay runs
    report = relay_outbox(relay(system_db, database_url, all_queues))

    # Then each type's queue holds its own event and nothing else; the stranger waits in the outbox, named
    assert (report.published, report.failed) == (len(JOB_TYPES), 1)
    for job_type, pair in all_queues.items():
        [message] = messages(pair.url)
        body = json.loads(message["Body"])
        assert (body["payload"]["job_type"], body["payload"]["job_id"]) == (job_type, str(sent[job_type]))
        assert message["Attributes"]["MessageGroupId"].startswith(f"{tenant.tenant_id}."), (
            "tenant shards stay"
        )
        assert depth(pair.dlq_url) == 0
    with psycopg.connect(clean_db) as conn:
        unpublished = conn.execute(
            "SELECT aggregate_id, last_error FROM outbox_events WHERE published_at IS NULL"
        ).fetchall()
    assert unpublished == [(sent["translation"], "no queue for job type 'translation'")]


def test_the_worker_takes_a_busy_queues_message_in_while_the_quiet_queues_long_poll(
    tenant, system_db, database_url, all_queues, clean_db
):
    # Given a worker whose every ingress loop long-polls for longer than the message may take to arrive
    wait_seconds = 8
    settings = WorkerSettings(
        database_url=SecretStr(database_url),
        job_queue_urls=queue_urls(all_queues),
        documents_bucket=LOCAL_BUCKET,
        openai_api_key=SecretStr("unused"),
        ingress_wait_seconds=wait_seconds,
    )
    ingress = build_ingress(settings, db=system_db)
    assert sorted(deps.job_type or "" for deps in ingress) == sorted(JOB_TYPES)
    llm = ScriptedLlm(ok())
    # Slots look for work on their own only every minute: the job runs at once only if ingress woke them.
    config = WorkerConfig(slots=1, tenant_cap=8, idle_seconds=60, drain_seconds=5)

    async def scenario() -> float:
        stop = asyncio.Event()
        worker = asyncio.create_task(run_worker(ingress, make_deps(system_db, llm), config, stop))
        # When an invoice job's signal arrives on the invoice queue
        job_id = tenant.client.submit(invoice_request(TEXT), "busy").json["job_id"]
        sent = time.monotonic()
        await asyncio.to_thread(relay_outbox, relay(system_db, database_url, all_queues))
        # Then it is taken in and its job runs before any quiet queue's poll could have ended
        await within(llm.called.wait(), "the job never ran")
        took = time.monotonic() - sent
        stop.set()
        await within(worker, "the worker did not stop")
        assert job_row(clean_db, job_id)["attempt"] == 1
        return took

    took = asyncio.run(scenario())
    assert took < wait_seconds, f"the busy queue waited {took:.1f} s behind the quiet ones"


@pytest.fixture
def local_system(monkeypatch, stack, clean_db, local_aws, tmp_path, all_queues):
    """What `tollgate local up` leaves for the CLI: every type's queues in local.json, nothing in the
    environment."""
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
    for name in (*SETTINGS, *FAKE_AWS_ENV, "AWS_ENDPOINT_URL", "MOTO_PORT"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


def local_sqs(endpoint_url: str):
    return boto3.client(
        "sqs",
        endpoint_url=endpoint_url,
        aws_access_key_id=FAKE_AWS_ENV["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=FAKE_AWS_ENV["AWS_SECRET_ACCESS_KEY"],
        region_name=FAKE_AWS_ENV["AWS_DEFAULT_REGION"],
    )


# What each type needs besides the document (a classification names its labels).
OPTIONS = {"document_classification": {"labels": ["invoice", "receipt"]}}


def submit(tenant, job_type: str) -> str:
    body = {**invoice_request(TEXT), "job_type": job_type}
    if job_type != "invoice_extraction":
        body["options"] = OPTIONS.get(job_type, {})
    response = tenant.client.submit(body, f"dead-{job_type}")
    assert response.status == 202, response.json
    job_id: str = response.json["job_id"]
    return job_id


@pytest.mark.parametrize("job_type", sorted(JOB_TYPES))
def test_a_dead_letter_of_each_type_is_redriven_to_its_own_queue_and_its_job_runs(
    job_type, tenant, system_db, database_url, all_queues, local_aws, local_system, clean_db
):
    # Given a job of this type whose signal kept failing ingress until SQS moved it to the type's DLQ
    job_id = submit(tenant, job_type)
    sqs = local_sqs(local_aws.endpoint_url)
    # (The environment no longer points at moto: the relay gets a client that does.)
    publishers = {name: SqsFifoPublisher(sqs, url) for name, url in queue_urls(all_queues).items()}
    routes = {EXTRACTION_REQUESTED: JobTypeQueues(publishers)}
    published = relay_outbox(RelayDeps(db=system_db, clock=SystemClock(), routes=routes))
    assert published.published == 1
    pair = all_queues[job_type]
    for _ in range(4):
        sqs.receive_message(QueueUrl=pair.url, MaxNumberOfMessages=10, VisibilityTimeout=0)
    assert {name: depth(p.dlq_url, sqs) for name, p in all_queues.items()} == {
        name: int(name == job_type) for name in all_queues
    }, "the letter is in its own type's DLQ only"
    others = [name for name in JOB_TYPES if name != job_type]

    # When support lists every DLQ, redrives another type's, looks with a dry run, then redrives this type's
    listed = cli(local_system, "dlq", "list", "-o", "json")
    elsewhere = cli(
        local_system, "dlq", "redrive", "--job-type", others[0], "--reason", "wrong type", "-o", "json"
    )
    looked = cli(
        local_system, "dlq", "redrive", "--job-type", job_type, "--reason", "look", "--dry-run", "-o", "json"
    )
    assert depth(pair.dlq_url, sqs) == 1, "neither another type's redrive nor a dry run touched it"
    redriven = cli(
        local_system, "dlq", "redrive", "--job-type", job_type, "--reason", "ingress fixed", "-o", "json"
    )

    # Then the letter was listed with its type, went back to its type's queue, and the audit row names the type
    for result in (listed, elsewhere, looked, redriven):
        assert result.exit_code == 0, result.output
    [letter] = json.loads(listed.stdout)
    assert (letter["job_type"], letter["job_id"], letter["decision"]) == (job_type, job_id, "redrive")
    assert json.loads(elsewhere.stdout)["items"] == []
    assert [(i["decision"], i["done"]) for i in json.loads(looked.stdout)["items"]] == [("redrive", False)]
    [item] = json.loads(redriven.stdout)["items"]
    assert (item["job_type"], item["decision"], item["done"]) == (job_type, "redrive", True)
    assert (depth(pair.dlq_url, sqs), depth(pair.url, sqs)) == (0, 1)
    assert all(depth(all_queues[name].url, sqs) == 0 for name in others)
    with psycopg.connect(clean_db) as conn:
        audited = conn.execute("SELECT action, target, details->>'job_type' FROM support_audit").fetchall()
    assert audited == [("dlq_redrive", job_id, job_type)]

    # And the worker takes the signal in from that type's queue and runs the job
    ingress = IngressDeps(system_db, sqs, pair.url, SystemClock(), wait_seconds=0, job_type=job_type)
    assert ingest_once(ingress).outcomes[IngressOutcome.RECORDED] == 1
    claimed = claim(make_deps(system_db, ScriptedLlm()))
    assert claimed is not None and str(claimed.job_id) == job_id
    assert (job_row(clean_db, job_id)["state"], job_row(clean_db, job_id)["attempt"]) == ("RUNNING", 1)


def test_the_dlq_commands_refuse_a_job_type_that_does_not_exist(local_system):
    result = cli(local_system, "dlq", "list", "--job-type", "invoices")

    assert result.exit_code == 2
    assert "no job type 'invoices'" in result.stderr and "invoice_extraction" in result.stderr
