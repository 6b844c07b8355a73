"""The worker's ingress: inbox rows exactly once per event, quarantine for reused ids, DLQ for poison."""

from __future__ import annotations

import json
import logging
import secrets
from datetime import timedelta

import boto3
import psycopg
import pytest

from tests.support import invoice_request, job_row, lease_job
from tollgate.core.clock import SystemClock
from tollgate.events import EXTRACTION_REQUESTED
from tollgate.ingress.consumer import IngressDeps, IngressOutcome, ingest_once
from tollgate.outbox.relay import RelayDeps, relay_outbox
from tollgate.outbox.sqs import SqsFifoPublisher
from tollgate_dev.local.aws import create_jobs_queues

pytestmark = pytest.mark.integration


@pytest.fixture
def queues(local_aws):
    return create_jobs_queues(f"ingress-{secrets.token_hex(4)}", max_receive_count=3)


@pytest.fixture
def ingress(system_db, queues):
    return IngressDeps(
        db=system_db,
        sqs=boto3.client("sqs"),
        queue_url=queues.url,
        clock=SystemClock(),
        wait_seconds=0,
        failure_visibility_seconds=0,
    )


def publish_all(system_db, queues):
    publisher = SqsFifoPublisher(boto3.client("sqs"), queues.url)
    relay_outbox(RelayDeps(db=system_db, clock=SystemClock(), routes={EXTRACTION_REQUESTED: publisher}))


def queue_depth(url):
    attributes = boto3.client("sqs").get_queue_attributes(
        QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
    )["Attributes"]
    return int(attributes["ApproximateNumberOfMessages"]) + int(
        attributes["ApproximateNumberOfMessagesNotVisible"]
    )


def inbox_count(url):
    with psycopg.connect(url) as conn:
        return conn.execute("SELECT count(*) FROM execution_inbox").fetchone()[0]


def test_a_message_is_recorded_then_deleted(tenant, system_db, queues, ingress, clean_db):
    job_id = tenant.client.submit(invoice_request(), "k").json["job_id"]
    publish_all(system_db, queues)

    report = ingest_once(ingress)

    assert report.outcomes[IngressOutcome.RECORDED] == 1 and report.deleted == 1
    assert queue_depth(queues.url) == 0
    with psycopg.connect(clean_db) as conn:
        (recorded_job,) = conn.execute("SELECT job_id FROM execution_inbox").fetchone()
    assert str(recorded_job) == job_id


def test_a_redelivery_of_a_running_job_changes_nothing(tenant, system_db, queues, ingress, clean_db):
    job_id = tenant.client.submit(invoice_request(), "k").json["job_id"]
    publish_all(system_db, queues)
    sqs = boto3.client("sqs")
    [message] = sqs.receive_message(QueueUrl=queues.url, VisibilityTimeout=0)["Messages"]
    ingest_once(ingress)
    lease_job(clean_db, job_id, attempt=1, lease_until=SystemClock().now() + timedelta(minutes=5))
    before = job_row(clean_db, job_id)

    # The same message arrives again (SQS delivers at least once).
    sqs.send_message(
        QueueUrl=queues.url,
        MessageBody=message["Body"],
        MessageGroupId="redelivery",
        MessageDeduplicationId=secrets.token_hex(8),
    )
    report = ingest_once(ingress)

    assert report.outcomes[IngressOutcome.DUPLICATE] == 1
    after = job_row(clean_db, job_id)
    assert (after["state"], after["fence"], after["attempt"], after["state_version"]) == (
        "RUNNING",
        before["fence"],
        1,
        before["state_version"],
    )
    assert inbox_count(clean_db) == 1


def test_a_redelivery_of_a_finished_job_changes_nothing(tenant, system_db, queues, ingress, clean_db):
    job_id = tenant.client.submit(invoice_request(), "k").json["job_id"]
    publish_all(system_db, queues)
    sqs = boto3.client("sqs")
    [message] = sqs.receive_message(QueueUrl=queues.url, VisibilityTimeout=0)["Messages"]
    ingest_once(ingress)
    tenant.client.request("POST", f"/extraction-jobs/{job_id}/cancel")

    sqs.send_message(
        QueueUrl=queues.url, MessageBody=message["Body"], MessageGroupId="g", MessageDeduplicationId="again"
    )
    ingest_once(ingress)

    assert job_row(clean_db, job_id)["state"] == "CANCELLED"
    assert inbox_count(clean_db) == 1


def test_a_reused_event_id_with_another_payload_is_quarantined_and_alerted(
    tenant, system_db, queues, ingress, clean_db, caplog
):
    tenant.client.submit(invoice_request(), "k")
    publish_all(system_db, queues)
    sqs = boto3.client("sqs")
    [message] = sqs.receive_message(QueueUrl=queues.url, VisibilityTimeout=0)["Messages"]
    ingest_once(ingress)
    tampered = json.loads(message["Body"])
    tampered["payload"]["state_version"] = 99
    sqs.send_message(
        QueueUrl=queues.url, MessageBody=json.dumps(tampered), MessageGroupId="g", MessageDeduplicationId="t"
    )

    with caplog.at_level(logging.ERROR):
        report = ingest_once(ingress)

    assert report.outcomes[IngressOutcome.QUARANTINED] == 1
    assert report.deleted == 1
    assert inbox_count(clean_db) == 1
    with psycopg.connect(clean_db) as conn:
        assert conn.execute("SELECT count(*) FROM inbox_quarantine").fetchone()[0] == 1
    assert any("quarantined" in record.getMessage() for record in caplog.records)


@pytest.mark.parametrize(
    "body",
    ["not json at all", json.dumps({"event_id": "x"}), None],
    ids=["garbage", "wrong-shape", "unknown-job"],
)
def test_a_poison_message_reaches_the_dlq_after_max_receive_count(tenant, ingress, queues, clean_db, body):
    if body is None:  # a well-formed event for a job that does not exist: the inbox's foreign key refuses it
        body = json.dumps(
            {
                "event_id": "6f1e7a7e-0000-4000-8000-000000000001",
                "event_type": EXTRACTION_REQUESTED,
                "tenant_id": str(tenant.tenant_id),
                "aggregate_id": "6f1e7a7e-0000-4000-8000-000000000002",
                "payload": {"job_id": "6f1e7a7e-0000-4000-8000-000000000002"},
                "created_at": "2026-01-01T00:00:00Z",
            }
        )
    sqs = boto3.client("sqs")
    sqs.send_message(QueueUrl=queues.url, MessageBody=body, MessageGroupId="g", MessageDeduplicationId="p")

    failures = 0
    for _ in range(6):  # bounded: maxReceiveCount is 3
        failures += ingest_once(ingress).failed
        if queue_depth(queues.dlq_url):
            break

    assert failures == 3
    assert queue_depth(queues.url) == 0
    [dead] = sqs.receive_message(QueueUrl=queues.dlq_url)["Messages"]
    assert dead["Body"] == body
    assert inbox_count(clean_db) == 0
