"""The outbox relay against real PostgreSQL and moto SQS FIFO over HTTP."""

from __future__ import annotations

import json
import secrets
import threading
import uuid

import boto3
import psycopg
import pytest
from psycopg.types.json import Jsonb

from tests.support import invoice_request
from tollgate.core.clock import FakeClock, SystemClock, new_id
from tollgate.events import EXTRACTION_REQUESTED
from tollgate.ingress.consumer import IngressDeps, IngressOutcome, ingest_once
from tollgate.outbox.relay import OutboxEvent, RelayDeps, relay_batch, relay_outbox
from tollgate.outbox.sqs import SqsFifoPublisher
from tollgate_dev.local.aws import create_jobs_queues

pytestmark = pytest.mark.integration


@pytest.fixture
def queues(local_aws):
    return create_jobs_queues(f"relay-{secrets.token_hex(4)}", max_receive_count=3)


@pytest.fixture
def sqs(local_aws):
    return boto3.client("sqs")


def relay_deps(system_db, queues, *, clock=None, routes=None, batch_size=100, claim_seconds=60):
    publisher = SqsFifoPublisher(boto3.client("sqs"), queues.url)
    return RelayDeps(
        db=system_db,
        clock=clock or SystemClock(),
        routes=routes or {EXTRACTION_REQUESTED: publisher},
        batch_size=batch_size,
        claim_seconds=claim_seconds,
    )


def ingress_deps(system_db, queues, clock=None):
    return IngressDeps(
        db=system_db,
        sqs=boto3.client("sqs"),
        queue_url=queues.url,
        clock=clock or SystemClock(),
        wait_seconds=0,
        failure_visibility_seconds=0,
    )


def receive_all(sqs, url, attempts=5):
    messages = []
    for _ in range(attempts):
        batch = sqs.receive_message(
            QueueUrl=url,
            MaxNumberOfMessages=10,
            WaitTimeSeconds=0,
            MessageAttributeNames=["All"],
            MessageSystemAttributeNames=["All"],
        ).get("Messages", [])
        if not batch:
            break
        messages += batch
    return messages


def follow_requested_events_only(url):
    """Drops the trigger's job.state_changed.v1 rows (test_job_state_events.py relays those): these tests
    follow each job's requested event through the relay, as they did before the trigger wrote a second row."""
    with psycopg.connect(url) as conn:
        conn.execute("DELETE FROM outbox_events WHERE event_type = 'job.state_changed.v1'")


def unpublished(url):
    with psycopg.connect(url) as conn:
        return conn.execute("SELECT count(*) FROM outbox_events WHERE published_at IS NULL").fetchone()[0]


def test_an_accepted_job_is_published_to_the_fifo_queue_once_confirmed(
    tenant, system_db, queues, sqs, clean_db
):
    job = tenant.client.submit(invoice_request(), "k").json
    follow_requested_events_only(clean_db)

    report = relay_outbox(relay_deps(system_db, queues))

    assert (report.claimed, report.published, report.failed) == (1, 1, 0)
    [message] = receive_all(sqs, queues.url)
    body = json.loads(message["Body"])
    assert body["event_type"] == EXTRACTION_REQUESTED
    assert body["payload"]["job_id"] == job["job_id"]
    assert message["Attributes"]["MessageDeduplicationId"] == body["event_id"]
    assert message["Attributes"]["MessageGroupId"].startswith(f"{tenant.tenant_id}.")
    assert message["MessageAttributes"]["tenant_id"]["StringValue"] == str(tenant.tenant_id)
    assert unpublished(clean_db) == 0


def test_a_crash_between_publish_and_mark_republishes_and_the_inbox_records_one_row(
    tenant, system_db, queues, sqs, clean_db
):
    tenant.client.submit(invoice_request(), "k")
    follow_requested_events_only(clean_db)
    clock = FakeClock(SystemClock().now())
    real = SqsFifoPublisher(boto3.client("sqs"), queues.url)

    class CrashAfterSend:
        def publish(self, events):
            real.publish(events)
            raise SystemExit("relay process killed after SQS confirmed, before the database was marked")

    with pytest.raises(SystemExit):
        relay_batch(
            relay_deps(system_db, queues, clock=clock, routes={EXTRACTION_REQUESTED: CrashAfterSend()})
        )
    assert unpublished(clean_db) == 1

    first = ingest_once(ingress_deps(system_db, queues))
    clock.advance(61)  # the crashed relay's claim lease runs out
    again = relay_batch(relay_deps(system_db, queues, clock=clock))
    second = ingest_once(ingress_deps(system_db, queues))

    assert again.published == 1
    assert first.outcomes[IngressOutcome.RECORDED] == 1
    assert second.outcomes[IngressOutcome.DUPLICATE] == 1
    with psycopg.connect(clean_db) as conn:
        assert conn.execute("SELECT count(*) FROM execution_inbox").fetchone()[0] == 1
    assert unpublished(clean_db) == 0


def test_two_relays_at_once_never_publish_the_same_row_in_one_claim_window(
    tenant, system_db, queues, clean_db
):
    for i in range(20):
        tenant.client.submit(invoice_request(text=f"invoice {i}"), f"k{i}")
    follow_requested_events_only(clean_db)
    both_claimed = threading.Barrier(2, timeout=30)
    published: dict[str, list[uuid.UUID]] = {}

    class Recording:
        def publish(self, events):
            published[threading.current_thread().name] = [e.event_id for e in events]
            both_claimed.wait()  # neither publishes until both have claimed: the windows overlap
            return dict.fromkeys((e.event_id for e in events), None)

    deps = relay_deps(system_db, queues, routes={EXTRACTION_REQUESTED: Recording()}, batch_size=10)
    threads = [threading.Thread(target=relay_batch, args=(deps,), name=f"relay-{i}") for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    first, second = published.values()
    assert len(first) == len(second) == 10
    assert set(first).isdisjoint(second)
    assert unpublished(clean_db) == 0


def test_a_row_committed_out_of_id_and_time_order_is_still_published(
    tenant, system_db, queues, sqs, clean_db
):
    tenant.client.submit(invoice_request(), "k")  # makes the tenant's job to hang events on
    follow_requested_events_only(clean_db)
    with psycopg.connect(clean_db) as conn:
        job_id = conn.execute("SELECT job_id FROM extraction_jobs").fetchone()[0]
    relay_outbox(relay_deps(system_db, queues))
    receive_all(sqs, queues.url)

    def insert(conn, event_id):
        conn.execute(
            "INSERT INTO outbox_events (event_id, tenant_id, aggregate_id, event_type, payload)"
            " VALUES (%s, %s, %s, %s, %s)",
            (event_id, tenant.tenant_id, job_id, EXTRACTION_REQUESTED, Jsonb({"job_id": str(job_id)})),
        )

    early_id, late_id = uuid.UUID(int=1), uuid.UUID(int=2**128 - 1)
    slow = psycopg.connect(clean_db)
    insert(slow, early_id)  # started first (earlier created_at, smaller id), commits last
    with psycopg.connect(clean_db) as fast:
        insert(fast, late_id)
    first_run = relay_outbox(relay_deps(system_db, queues))
    slow.commit()
    slow.close()
    second_run = relay_outbox(relay_deps(system_db, queues))

    assert (first_run.published, second_run.published) == (1, 1)
    assert unpublished(clean_db) == 0


def test_a_failed_entry_stays_unpublished_with_its_error_and_goes_out_on_the_next_run(
    tenant, system_db, queues, clean_db
):
    for i in range(3):
        tenant.client.submit(invoice_request(text=f"invoice {i}"), f"k{i}")
    follow_requested_events_only(clean_db)
    real = SqsFifoPublisher(boto3.client("sqs"), queues.url)
    refused: list[uuid.UUID] = []

    class RefusesOneEntryOnce:
        def publish(self, events):
            outcome = real.publish(events[1:]) if not refused else real.publish(events)
            if not refused:
                refused.append(events[0].event_id)
                outcome[events[0].event_id] = "InternalError: simulated per-entry failure"
            return outcome

    deps = relay_deps(system_db, queues, routes={EXTRACTION_REQUESTED: RefusesOneEntryOnce()})
    first = relay_batch(deps)
    with psycopg.connect(clean_db) as conn:
        error, published_at, attempts = conn.execute(
            "SELECT last_error, published_at, publish_attempts FROM outbox_events WHERE event_id = %s",
            (refused[0],),
        ).fetchone()
    second = relay_batch(deps)

    assert (first.published, first.failed) == (2, 1)
    assert "simulated per-entry failure" in error and published_at is None and attempts == 1
    assert (second.claimed, second.published) == (1, 1)
    assert unpublished(clean_db) == 0


def test_sqs_per_entry_failures_map_to_their_events(local_aws):
    from botocore.stub import Stubber

    client = boto3.client("sqs")
    events = [
        OutboxEvent(
            event_id=new_id(),
            event_type=EXTRACTION_REQUESTED,
            tenant_id=new_id(),
            aggregate_id=new_id(),
            payload={},
            created_at=SystemClock().now(),
        )
        for _ in range(12)
    ]
    with Stubber(client) as stub:
        stub.add_response(
            "send_message_batch",
            {
                "Successful": [
                    {"Id": str(i), "MessageId": "m", "MD5OfMessageBody": "x"} for i in range(1, 10)
                ],
                "Failed": [
                    {"Id": "0", "SenderFault": False, "Code": "InternalError", "Message": "try again"}
                ],
            },
        )
        stub.add_client_error("send_message_batch", service_error_code="ServiceUnavailable")
        outcome = SqsFifoPublisher(client, "https://sqs.example/q.fifo").publish(events)

    assert outcome[events[0].event_id] == "InternalError: try again"
    assert all(outcome[e.event_id] is None for e in events[1:10])
    assert all("ServiceUnavailable" in outcome[e.event_id] for e in events[10:])


def test_one_tenants_events_spread_over_its_own_groups_only(
    tenant, make_tenant, system_db, queues, sqs, clean_db
):
    other = make_tenant("other")
    for i in range(16):
        tenant.client.submit(invoice_request(text=f"heavy {i}"), f"h{i}")
    other.client.submit(invoice_request(text="light"), "l")
    relay_outbox(relay_deps(system_db, queues))

    groups = {m["Attributes"]["MessageGroupId"] for m in receive_all(sqs, queues.url, attempts=20)}
    heavy = {g for g in groups if g.startswith(str(tenant.tenant_id))}
    light = {g for g in groups if g.startswith(str(other.tenant_id))}
    assert len(heavy) > 1
    assert len(light) == 1
    assert heavy.isdisjoint(light)


def test_claims_expire_so_a_crashed_relays_rows_are_not_stuck(tenant, system_db, queues, clean_db):
    tenant.client.submit(invoice_request(), "k")
    follow_requested_events_only(clean_db)
    clock = FakeClock(SystemClock().now())

    class Dies:
        def publish(self, events):
            raise SystemExit("killed mid-batch")

    with pytest.raises(SystemExit):
        relay_batch(relay_deps(system_db, queues, clock=clock, routes={EXTRACTION_REQUESTED: Dies()}))
    clock.advance(30)
    within_lease = relay_batch(relay_deps(system_db, queues, clock=clock))
    clock.advance(31)
    after_lease = relay_batch(relay_deps(system_db, queues, clock=clock))

    assert within_lease.claimed == 0
    assert after_lease.published == 1
