"""A support action and its audit row commit or roll back together, against real PostgreSQL and moto SQS.

Failures are planted in the database with triggers: an audit insert that fails, an action's statement that
fails, and a commit that fails after every statement ran (a deferred trigger, as a crash at commit leaves
it). Whichever it is, neither the action nor its audit row may be left. Failures after the commit (an SQS
call that does not happen) must leave a state the next run finishes.
"""

from __future__ import annotations

import dataclasses
import secrets
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any
from uuid import UUID

import boto3
import psycopg
import pytest
from botocore.stub import Stubber
from psycopg import sql

from tests.integration.test_execution import TEXT
from tests.integration.test_support import audit, depth, exhaust, kill_into_dlq, publish
from tests.integration.test_webhook_endpoints import RecordingStarter, event
from tests.support import invoice_request, job_row
from tollgate.core.clock import SystemClock, new_id
from tollgate.core.errors import InvalidRequest
from tollgate.delivery.deliveries import ReplayDeps, WebhookDispatcher, delivery_id_for
from tollgate.events import EXTRACTION_REQUESTED
from tollgate.ingress.consumer import IngressDeps, IngressOutcome, ingest_once
from tollgate.support.service import (
    Decision,
    SupportDeps,
    TypeQueues,
    move_all_dead_letters,
    redrive_dead_letters,
    replay_delivery_audited,
    retry_job,
)
from tollgate_dev.local.aws import create_job_type_queues

pytestmark = pytest.mark.integration

REASON = "provider outage is over"
PLANTED = "planted failure"


@pytest.fixture
def all_queues(local_aws):
    return create_job_type_queues(f"audit-{secrets.token_hex(4)}", max_receive_count=2)


@pytest.fixture
def queues(all_queues):
    return all_queues["invoice_extraction"]


@pytest.fixture
def support(system_db, all_queues):
    return SupportDeps(
        db=system_db,
        sqs=boto3.client("sqs"),
        type_queues={name: TypeQueues(pair.url, pair.dlq_url) for name, pair in all_queues.items()},
        clock=SystemClock(),
        new_id=new_id,
        sleep=lambda seconds: None,
        actor="oncall@example.com",
    )


@pytest.fixture
def fail_writes(clean_db) -> Iterator[Callable[..., None]]:
    """Makes every row written to a table fail: at once, or (``at_commit``) when the transaction commits,
    after all of its statements ran. The triggers go when the test ends; the database is shared."""
    installed: list[str] = []

    def fail(table: str, operation: str = "INSERT", *, at_commit: bool = False) -> None:
        timing = (
            "CONSTRAINT TRIGGER test_planted_failure AFTER {operation} ON {table} DEFERRABLE INITIALLY DEFERRED"
            if at_commit
            else "TRIGGER test_planted_failure BEFORE {operation} ON {table}"
        )
        statement = sql.SQL("CREATE " + timing + " FOR EACH ROW EXECUTE FUNCTION test_planted_failure()")
        with psycopg.connect(clean_db, autocommit=True) as conn:
            conn.execute(
                "CREATE OR REPLACE FUNCTION test_planted_failure() RETURNS trigger LANGUAGE plpgsql AS "
                f"$$ BEGIN RAISE EXCEPTION '{PLANTED} on %', TG_TABLE_NAME; END $$"
            )
            conn.execute(statement.format(operation=sql.SQL(operation), table=sql.Identifier(table)))
        installed.append(table)

    yield fail
    with psycopg.connect(clean_db, autocommit=True) as conn:
        for table in installed:
            conn.execute(
                sql.SQL("DROP TRIGGER IF EXISTS test_planted_failure ON {}").format(sql.Identifier(table))
            )
        conn.execute("DROP FUNCTION IF EXISTS test_planted_failure()")


class FailingOnce:
    """The SQS client, except that one named call fails the first time, as a crash just before it would."""

    def __init__(self, client: Any, call: str) -> None:
        self._client = client
        self._call = call
        self.failed = False

    def __getattr__(self, name: str) -> Any:
        if name != self._call or self.failed:
            return getattr(self._client, name)

        def fail(**_: Any) -> None:
            self.failed = True
            raise ConnectionError(f"{PLANTED}: {name} never happened")

        return fail


def requested_events(url, job_id) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM outbox_events WHERE aggregate_id = %s AND event_type = %s",
            (job_id, EXTRACTION_REQUESTED),
        ).fetchone()
    assert row is not None
    return int(row[0])


def visible(url) -> int:
    attributes = boto3.client("sqs").get_queue_attributes(
        QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"]
    )["Attributes"]
    return int(attributes["ApproximateNumberOfMessages"])


@pytest.fixture
def failed_job(tenant, system_db, clean_db):
    job_id = tenant.client.submit(invoice_request(TEXT), "k").json["job_id"]
    exhaust(system_db, job_id)
    return job_id, job_row(clean_db, job_id)


@pytest.mark.parametrize(
    ("table", "operation", "at_commit"),
    [
        ("support_audit", "INSERT", False),  # the audit row cannot be written
        ("extraction_jobs", "UPDATE", False),  # the reset cannot be written
        ("outbox_events", "INSERT", False),  # the workers' signal cannot be written
        ("extraction_jobs", "UPDATE", True),  # every statement ran, the commit fails
    ],
)
def test_a_retry_that_fails_anywhere_leaves_neither_the_reset_nor_its_audit_row(
    failed_job, support, clean_db, fail_writes, table, operation, at_commit
):
    job_id, before = failed_job
    fail_writes(table, operation, at_commit=at_commit)

    with pytest.raises(psycopg.Error, match=PLANTED):
        retry_job(support, UUID(job_id), REASON)

    after = job_row(clean_db, job_id)
    assert (after["state"], after["state_version"], after["max_attempts"]) == (
        "FAILED_TERMINAL",
        before["state_version"],
        before["max_attempts"],
    )
    assert requested_events(clean_db, job_id) == 1, "only the acceptance's event"
    assert audit(clean_db) == []


@pytest.mark.parametrize(
    ("actor", "reason"), [("oncall@example.com", "x" * 1001), ("x" * 201, REASON), ("", REASON)]
)
def test_an_audit_row_the_table_would_refuse_is_refused_before_the_action(
    failed_job, support, clean_db, actor, reason
):
    job_id, _ = failed_job

    with pytest.raises(InvalidRequest):
        retry_job(dataclasses.replace(support, actor=actor), UUID(job_id), reason)

    assert job_row(clean_db, job_id)["state"] == "FAILED_TERMINAL"
    assert audit(clean_db) == []


@pytest.fixture
def dead_failed_job(tenant, system_db, queues, clean_db):
    """A job that ran out of attempts while its message went to the DLQ: a redrive resets it."""
    job_id = tenant.client.submit(invoice_request(TEXT), "k").json["job_id"]
    publish(system_db, queues)
    kill_into_dlq(queues)
    exhaust(system_db, job_id)
    return job_id, job_row(clean_db, job_id)


@pytest.mark.parametrize(
    ("table", "operation", "at_commit"),
    [
        ("support_audit", "INSERT", False),
        ("extraction_jobs", "UPDATE", False),
        ("support_audit", "INSERT", True),  # the reset and the audit insert ran, the commit fails
    ],
)
def test_a_redrive_that_fails_in_the_database_resets_nothing_audits_nothing_and_sends_nothing(
    dead_failed_job, support, queues, clean_db, fail_writes, table, operation, at_commit
):
    job_id, before = dead_failed_job
    fail_writes(table, operation, at_commit=at_commit)

    with pytest.raises(psycopg.Error, match=PLANTED):
        redrive_dead_letters(support, reason=REASON)

    after = job_row(clean_db, job_id)
    assert (after["state"], after["state_version"]) == ("FAILED_TERMINAL", before["state_version"])
    assert audit(clean_db) == []
    assert depth(queues.url) == 0, "nothing was resent"
    assert visible(queues.dlq_url) == 1, "the letter is back in the DLQ, visible to the next run at once"


def test_a_redrive_of_a_waiting_job_whose_audit_fails_sends_nothing(
    tenant, system_db, queues, support, clean_db, fail_writes
):
    job_id = tenant.client.submit(invoice_request(TEXT), "k").json["job_id"]
    publish(system_db, queues)
    kill_into_dlq(queues)
    fail_writes("support_audit")

    with pytest.raises(psycopg.Error, match=PLANTED):
        redrive_dead_letters(support, reason=REASON)

    assert audit(clean_db) == []
    assert (depth(queues.url), visible(queues.dlq_url)) == (0, 1)
    assert job_row(clean_db, job_id)["state"] == "READY"


def test_a_redrive_cut_off_before_its_resend_is_finished_by_the_next_run(
    dead_failed_job, support, queues, clean_db
):
    job_id, _ = dead_failed_job
    cut = dataclasses.replace(support, sqs=FailingOnce(support.sqs, "send_message"))

    with pytest.raises(ConnectionError):
        redrive_dead_letters(cut, reason=REASON)

    # Committed: the job has its new budget and the audit row says so; the letter waits in the DLQ.
    assert job_row(clean_db, job_id)["state"] == "READY"
    assert [row[4] for row in audit(clean_db)] == ["reset_and_redrive"]
    assert (depth(queues.url), visible(queues.dlq_url)) == (0, 1)

    report = redrive_dead_letters(support, reason=REASON)

    assert [item.decision for item in report.items] == [Decision.REDRIVE]
    assert [row[4] for row in audit(clean_db)] == ["reset_and_redrive", "redrive"]
    assert (depth(queues.url), depth(queues.dlq_url)) == (1, 0)


def test_a_redrive_cut_off_before_its_delete_sends_a_repeat_the_worker_absorbs(
    dead_failed_job, system_db, support, queues, clean_db
):
    job_id, _ = dead_failed_job
    cut = dataclasses.replace(support, sqs=FailingOnce(support.sqs, "delete_message"))

    with pytest.raises(ConnectionError):
        redrive_dead_letters(cut, reason=REASON)
    redrive_dead_letters(support, reason=REASON)

    assert [row[4] for row in audit(clean_db)] == ["reset_and_redrive", "redrive"]
    assert (depth(queues.url), depth(queues.dlq_url)) == (2, 0)
    ingress = IngressDeps(system_db, boto3.client("sqs"), queues.url, SystemClock(), wait_seconds=0)
    outcomes: Counter[IngressOutcome] = Counter()
    for _ in range(2):  # one FIFO group: the repeat may come in a second receive
        outcomes.update(ingest_once(ingress).outcomes)
    assert (outcomes[IngressOutcome.RECORDED], outcomes[IngressOutcome.DUPLICATE]) == (1, 1)
    assert job_row(clean_db, job_id)["state"] == "READY"


def test_a_job_that_finishes_while_the_redrive_paces_itself_is_judged_as_it_is_now(
    tenant, system_db, queues, support, clean_db
):
    jobs = [tenant.client.submit(invoice_request(f"{TEXT}\n{i}"), f"k{i}").json["job_id"] for i in range(2)]
    publish(system_db, queues)
    kill_into_dlq(queues, expected=2)
    cancelled: list[str] = []

    def meanwhile(seconds: float) -> None:
        """While the redrive waits between letters, the tenant cancels the job not yet redriven."""
        audited = {row[3] for row in audit(clean_db)}
        [waiting] = [job for job in jobs if job not in audited]
        tenant.client.request("POST", f"/extraction-jobs/{waiting}/cancel")
        cancelled.append(waiting)

    report = redrive_dead_letters(dataclasses.replace(support, sleep=meanwhile), reason=REASON)

    decisions = {str(item.letter.job_id): item.decision for item in report.items}
    [late] = cancelled
    assert decisions[late] is Decision.DISCARD, "planned as a redrive, decided again on the job as it is"
    assert sorted((row[3], row[4]) for row in audit(clean_db)) == sorted(
        [(late, "discard"), (next(j for j in jobs if j != late), "redrive")]
    )
    assert (depth(queues.url), depth(queues.dlq_url)) == (1, 0), "only the waiting job was signalled"


@pytest.fixture
def delivery(tenant, system_db):
    endpoint_id = UUID(
        tenant.client.request(
            "POST", "/webhook-endpoints", json_body={"url": "https://erp.example.com/hooks"}
        ).json["endpoint_id"]
    )
    completed = event(tenant.tenant_id)
    WebhookDispatcher(system_db, RecordingStarter()).publish([completed])
    return endpoint_id, delivery_id_for(completed.event_id, endpoint_id)


def replays(url, delivery_id) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT replays FROM webhook_deliveries WHERE delivery_id = %s", (delivery_id,)
        ).fetchone()
    assert row is not None
    return int(row[0])


def test_a_replay_reopens_and_audits_in_one_transaction_then_starts(support, delivery, clean_db):
    endpoint_id, delivery_id = delivery
    starter = RecordingStarter()
    deps = dataclasses.replace(support, replays=ReplayDeps(support.db, support.clock, starter))

    result, audit_id = replay_delivery_audited(deps, "acme", endpoint_id, delivery_id, REASON)

    assert result.replayed == [delivery_id] and audit_id > 0
    assert replays(clean_db, delivery_id) == 1
    assert starter.started == [(str(delivery_id), f"{delivery_id}-replay-1")]
    assert audit(clean_db) == [
        ("oncall@example.com", REASON, "delivery_replay", str(delivery_id), "reopened")
    ]


@pytest.mark.parametrize("at_commit", [False, True])
def test_a_replay_whose_audit_fails_reopens_nothing_and_starts_nothing(
    support, delivery, clean_db, fail_writes, at_commit
):
    endpoint_id, delivery_id = delivery
    starter = RecordingStarter()
    deps = dataclasses.replace(support, replays=ReplayDeps(support.db, support.clock, starter))
    fail_writes("support_audit", at_commit=at_commit)

    with pytest.raises(psycopg.Error, match=PLANTED):
        replay_delivery_audited(deps, "acme", endpoint_id, delivery_id, REASON)

    assert replays(clean_db, delivery_id) == 0
    assert starter.started == []
    assert audit(clean_db) == []


DLQ_ARN = "arn:aws:sqs:eu-west-1:123456789012:jobs-dlq.fifo"
QUEUE_ARN = "arn:aws:sqs:eu-west-1:123456789012:jobs.fifo"


def stubbed_queues(support, job_type="invoice_extraction") -> tuple[SupportDeps, Stubber]:
    """moto has no StartMessageMoveTask: the SQS side of the bulk move is stubbed, the audit trail is real."""
    client = boto3.client("sqs", region_name="eu-west-1")
    stub = Stubber(client)
    pair = support.type_queues[job_type]
    for url, arn in ((pair.dlq_url, DLQ_ARN), (pair.url, QUEUE_ARN)):
        stub.add_response(
            "get_queue_attributes",
            {"Attributes": {"QueueArn": arn}},
            {"QueueUrl": url, "AttributeNames": ["QueueArn"]},
        )
    return dataclasses.replace(support, sqs=client), stub


def test_a_bulk_move_is_recorded_before_it_starts_and_then_its_outcome(support, clean_db):
    deps, stub = stubbed_queues(support)
    stub.add_response("start_message_move_task", {"TaskHandle": "handle-1"})

    with stub:
        [move] = move_all_dead_letters(deps, REASON, 10, job_type="invoice_extraction")

    assert (move.job_type, move.task_handle) == ("invoice_extraction", "handle-1") and move.audit_id > 0
    assert [(row[2], row[3], row[4]) for row in audit(clean_db)] == [
        ("dlq_move_all", DLQ_ARN, "requested"),
        ("dlq_move_all", DLQ_ARN, "started"),
    ]


def test_a_bulk_move_that_sqs_refuses_is_recorded_as_failed(support, clean_db):
    deps, stub = stubbed_queues(support)
    stub.add_client_error("start_message_move_task", "AccessDenied", "not allowed")

    with stub, pytest.raises(Exception, match="not allowed"):
        move_all_dead_letters(deps, REASON, 10, job_type="invoice_extraction")

    assert [row[4] for row in audit(clean_db)] == ["requested", "failed"]


def test_a_bulk_move_whose_request_cannot_be_recorded_never_starts(support, clean_db, fail_writes):
    deps, stub = stubbed_queues(support)  # no response for start_message_move_task: a call would fail
    fail_writes("support_audit")

    with stub, pytest.raises(psycopg.Error, match=PLANTED):
        move_all_dead_letters(deps, REASON, 10, job_type="invoice_extraction")

    stub.assert_no_pending_responses()
    assert audit(clean_db) == []


def test_a_bulk_move_without_a_job_type_moves_each_types_dlq_to_its_own_queue(support, clean_db):
    client = boto3.client("sqs", region_name="eu-west-1")
    stub = Stubber(client)
    arns = {}
    for name, pair in support.type_queues.items():
        arns[name] = (
            f"arn:aws:sqs:eu-west-1:123456789012:{name}-dlq.fifo",
            f"arn:aws:sqs:eu-west-1:1:{name}",
        )
        for url, arn in zip((pair.dlq_url, pair.url), arns[name], strict=True):
            stub.add_response(
                "get_queue_attributes",
                {"Attributes": {"QueueArn": arn}},
                {"QueueUrl": url, "AttributeNames": ["QueueArn"]},
            )
        stub.add_response(
            "start_message_move_task",
            {"TaskHandle": f"handle-{name}"},
            {"SourceArn": arns[name][0], "DestinationArn": arns[name][1], "MaxNumberOfMessagesPerSecond": 10},
        )

    with stub:
        moves = move_all_dead_letters(dataclasses.replace(support, sqs=client), REASON, 10)

    assert [(m.job_type, m.task_handle) for m in moves] == [(n, f"handle-{n}") for n in support.type_queues]
    started = [(row[3], row[4]) for row in audit(clean_db) if row[4] == "started"]
    assert started == [(dlq, "started") for dlq, _ in arns.values()], "one audited move per type's DLQ"


def test_an_unknown_job_type_is_refused_before_anything_is_looked_at(support, clean_db):
    with pytest.raises(InvalidRequest, match="no job type 'invoices'; the job types are"):
        redrive_dead_letters(support, reason=REASON, job_type="invoices")
    with pytest.raises(InvalidRequest, match="no job type 'invoices'"):
        move_all_dead_letters(support, REASON, 10, job_type="invoices")
    assert audit(clean_db) == []
