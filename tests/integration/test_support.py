"""Support staff's tools against real PostgreSQL and moto SQS: dead letters are reconciled with the
database before anything is redriven, every action leaves an audit row, and dry runs change nothing."""

from __future__ import annotations

import asyncio
import secrets
from uuid import UUID

import boto3
import psycopg
import pytest
from botocore.stub import Stubber

from tests.integration.test_execution import TEXT, ScriptedLlm, claim, make_deps, ok
from tests.support import invoice_request, job_row
from tollgate.core.clock import FakeClock, SystemClock, new_id
from tollgate.core.errors import InvalidRequest, InvalidState
from tollgate.events import EXTRACTION_REQUESTED
from tollgate.execution.attempt import AttemptEnd, run_attempt
from tollgate.execution.llm.client import LlmResult, OutcomeClass
from tollgate.ingress.consumer import IngressDeps, IngressOutcome, ingest_once
from tollgate.outbox.relay import RelayDeps, relay_outbox
from tollgate.outbox.sqs import SqsFifoPublisher
from tollgate.support.service import (
    Decision,
    SupportDeps,
    TypeQueues,
    redrive_dead_letters,
    retry_job,
    start_bulk_move,
)
from tollgate_dev.local.aws import create_job_type_queues

pytestmark = pytest.mark.integration


@pytest.fixture
def all_queues(local_aws):
    return create_job_type_queues(f"support-{secrets.token_hex(4)}", max_receive_count=2)


@pytest.fixture
def queues(all_queues):
    """The invoice queue and DLQ: the API takes invoice jobs."""
    return all_queues["invoice_extraction"]


@pytest.fixture
def naps():
    return []


@pytest.fixture
def support(system_db, all_queues, naps):
    return SupportDeps(
        db=system_db,
        sqs=boto3.client("sqs"),
        type_queues={name: TypeQueues(pair.url, pair.dlq_url) for name, pair in all_queues.items()},
        clock=SystemClock(),
        new_id=new_id,
        sleep=naps.append,
        actor="oncall@example.com",
    )


def publish(system_db, queues):
    publisher = SqsFifoPublisher(boto3.client("sqs"), queues.url)
    relay_outbox(RelayDeps(db=system_db, clock=SystemClock(), routes={EXTRACTION_REQUESTED: publisher}))


def kill_into_dlq(queues, expected=1):
    """A consumer that keeps failing: receive without deleting until SQS moves the messages to the DLQ."""
    sqs = boto3.client("sqs")
    for _ in range(6):
        sqs.receive_message(QueueUrl=queues.url, MaxNumberOfMessages=10, VisibilityTimeout=0)
    depth = sqs.get_queue_attributes(QueueUrl=queues.dlq_url, AttributeNames=["ApproximateNumberOfMessages"])
    assert int(depth["Attributes"]["ApproximateNumberOfMessages"]) == expected


def depth(url):
    attributes = boto3.client("sqs").get_queue_attributes(
        QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
    )["Attributes"]
    return int(attributes["ApproximateNumberOfMessages"]) + int(
        attributes["ApproximateNumberOfMessagesNotVisible"]
    )


def audit(url):
    with psycopg.connect(url) as conn:
        return conn.execute(
            "SELECT actor, reason, action, target, outcome FROM support_audit ORDER BY audit_id"
        ).fetchall()


def exhaust(system_db, job_id):
    clock = FakeClock(SystemClock().now())
    llm = ScriptedLlm(*[LlmResult(OutcomeClass.TRANSIENT, "", error="503") for _ in range(5)])

    async def five():
        for _ in range(5):
            deps = make_deps(system_db, llm, clock=clock)
            end = (await run_attempt(deps, claim(deps))).end
            clock.advance(120)
        return end

    assert asyncio.run(five()) is AttemptEnd.FAILED_TERMINAL


def test_a_dead_letter_of_an_exhausted_job_is_redriven_to_a_completed_job_with_an_audit_row(
    tenant, system_db, queues, support, clean_db
):
    job_id = tenant.client.submit(invoice_request(TEXT), "k").json["job_id"]
    publish(system_db, queues)
    kill_into_dlq(queues)
    exhaust(system_db, job_id)

    planned = redrive_dead_letters(support, reason="provider outage 2026-11-29", dry_run=True)
    assert [item.decision for item in planned.items] == [Decision.RESET_AND_REDRIVE]
    assert job_row(clean_db, job_id)["state"] == "FAILED_TERMINAL" and audit(clean_db) == []
    assert depth(queues.dlq_url) == 1, "a dry run leaves the message where it was"

    report = redrive_dead_letters(support, reason="provider outage 2026-11-29")

    job = job_row(clean_db, job_id)
    assert (job["state"], job["attempt"], job["max_attempts"]) == ("READY", 5, 8)
    assert (depth(queues.dlq_url), depth(queues.url)) == (0, 1)
    assert audit(clean_db) == [
        ("oncall@example.com", "provider outage 2026-11-29", "dlq_redrive", job_id, "reset_and_redrive")
    ]
    with psycopg.connect(clean_db) as conn:
        (details,) = conn.execute("SELECT details FROM support_audit").fetchone()
    assert details["job_type"] == "invoice_extraction", "the audit row names the DLQ's job type"
    ingress = IngressDeps(system_db, boto3.client("sqs"), queues.url, SystemClock(), wait_seconds=0)
    assert ingest_once(ingress).outcomes[IngressOutcome.RECORDED] == 1
    deps = make_deps(system_db, ScriptedLlm(ok()))
    assert asyncio.run(run_attempt(deps, claim(deps))).end in {
        AttemptEnd.SUCCEEDED,
        AttemptEnd.REVIEW_REQUIRED,
    }
    assert report.items[0].done


def test_a_dead_letter_of_a_finished_job_is_discarded_and_says_why(
    tenant, system_db, queues, support, clean_db
):
    job_id = tenant.client.submit(invoice_request(TEXT), "k").json["job_id"]
    publish(system_db, queues)
    kill_into_dlq(queues)
    tenant.client.request("POST", f"/extraction-jobs/{job_id}/cancel")

    report = redrive_dead_letters(support, reason="cleaning up after the incident")

    [item] = report.items
    assert item.decision is Decision.DISCARD
    assert "already ended CANCELLED" in item.why
    assert (depth(queues.dlq_url), depth(queues.url)) == (0, 0), "nothing is resent for a finished job"
    assert job_row(clean_db, job_id)["state"] == "CANCELLED"
    assert audit(clean_db)[0][4] == "discard"


def test_poison_and_running_jobs_stay_in_the_dlq_untouched(tenant, system_db, queues, support, clean_db):
    job_id = tenant.client.submit(invoice_request(TEXT), "k").json["job_id"]
    publish(system_db, queues)
    boto3.client("sqs").send_message(
        QueueUrl=queues.url, MessageBody="{not json", MessageGroupId="g", MessageDeduplicationId="poison"
    )
    kill_into_dlq(queues, expected=2)
    claim(make_deps(system_db, ScriptedLlm()))  # the job is RUNNING now

    report = redrive_dead_letters(support, reason="look at the poison")

    assert sorted(item.decision.value for item in report.items) == ["leave", "leave"]
    assert any("RUNNING" in item.why for item in report.items)
    assert any("not an outbox event" in item.why for item in report.items)
    assert depth(queues.dlq_url) == 2
    assert audit(clean_db) == []
    assert job_row(clean_db, job_id)["state"] == "RUNNING"


def test_redrive_paces_itself_and_requires_a_reason(tenant, system_db, queues, support, naps, clean_db):
    for i in range(3):
        tenant.client.submit(invoice_request(f"{TEXT}\n{i}"), f"k{i}")
    publish(system_db, queues)
    kill_into_dlq(queues, expected=3)

    with pytest.raises(InvalidRequest):
        redrive_dead_letters(support, reason="")
    report = redrive_dead_letters(support, reason="queue consumer was down", max_per_second=4)

    assert report.count(Decision.REDRIVE) == 3
    assert naps == [0.25, 0.25]
    assert depth(queues.url) == 3


def test_retry_gives_a_failed_job_a_new_budget_and_refuses_a_finished_one(
    tenant, system_db, support, clean_db
):
    failed = tenant.client.submit(invoice_request(TEXT), "failed").json["job_id"]
    exhaust(system_db, failed)
    cancelled = tenant.client.submit(invoice_request(f"{TEXT}\nx"), "cancelled").json["job_id"]
    tenant.client.request("POST", f"/extraction-jobs/{cancelled}/cancel")

    audit_id = retry_job(support, UUID(failed), "customer asked, provider fixed")

    assert job_row(clean_db, failed)["state"] == "READY"
    with psycopg.connect(clean_db) as conn:
        events = conn.execute(
            "SELECT count(*) FROM outbox_events WHERE aggregate_id = %s AND event_type = %s",
            (failed, EXTRACTION_REQUESTED),
        ).fetchone()[0]
    assert events == 2, "the retry signals the workers through the outbox"
    with psycopg.connect(clean_db) as conn:
        types = conn.execute(
            "SELECT DISTINCT payload->>'job_type' FROM outbox_events WHERE aggregate_id = %s AND event_type = %s",
            (failed, EXTRACTION_REQUESTED),
        ).fetchall()
    assert types == [("invoice_extraction",)], "the retry's event names the job's type, for its queue"
    assert audit_id > 0
    with pytest.raises(InvalidState, match="CANCELLED"):
        retry_job(support, UUID(cancelled), "should not work")


def test_the_bulk_move_uses_sqs_start_message_move_task():
    client = boto3.client("sqs", region_name="eu-west-1")
    dlq, queue = (
        "arn:aws:sqs:eu-west-1:123456789012:jobs-dlq.fifo",
        "arn:aws:sqs:eu-west-1:123456789012:jobs.fifo",
    )
    with Stubber(client) as stub:
        stub.add_response(
            "start_message_move_task",
            {"TaskHandle": "handle-1"},
            {"SourceArn": dlq, "DestinationArn": queue, "MaxNumberOfMessagesPerSecond": 10},
        )
        assert start_bulk_move(client, dlq, queue, 10) == "handle-1"
        stub.assert_no_pending_responses()
