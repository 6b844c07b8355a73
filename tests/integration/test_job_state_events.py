"""The per-tenant event sequence of live notifications (migration 0021) against real PostgreSQL: every state
change of every use case gets exactly one event, numbered gap-free and in commit order per tenant; the
outbox payload is the JobStateChanged model; the relay sends it to the notifications FIFO queue on moto; the
replay window queries and retention."""

from __future__ import annotations

import asyncio
import secrets
import threading
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import boto3
import psycopg
import pytest
from psycopg.rows import dict_row
from pydantic import SecretStr

from tests.integration.test_execution import (
    MISPRINTED,
    TEXT,
    ScriptedLlm,
    claim,
    make_deps,
    misprinted_extraction,
    ok,
)
from tests.integration.test_reviews import decide, review, reviewing  # noqa: F401 (a fixture)
from tests.support import invoice_request, job_row, plan_queries, query_plan
from tollgate.core.clock import FakeClock, SystemClock, new_id
from tollgate.core.metrics import RecordedMetrics
from tollgate.core.retry import RetryPolicy
from tollgate.db.queries import load_queries
from tollgate.events import JOB_STATE_CHANGED, JobStateChanged
from tollgate.execution.attempt import AttemptEnd, run_attempt
from tollgate.execution.leasing import claim_next_job
from tollgate.execution.llm.client import LlmResult, OutcomeClass
from tollgate.outbox.notifications import TenantNews
from tollgate.outbox.relay import relay_outbox
from tollgate.scheduler.retention import RetentionPolicy, apply_retention
from tollgate.scheduler.tick import SchedulerDeps, run_scheduler
from tollgate.settings import RelaySettings
from tollgate.support.service import SupportDeps, retry_job
from tollgate.wiring import build_relay
from tollgate_dev.local.aws import create_job_type_queues, create_jobs_queues, queue_urls

pytestmark = pytest.mark.integration

# Bounds each wait on another connection (a lock, a thread) on a loaded machine; reached only by a failure.
WAIT_SECONDS = 60.0


def query(url: str, sql: str, *args: Any) -> list[dict[str, Any]]:
    with psycopg.connect(url, row_factory=dict_row) as conn:
        return conn.execute(sql, args).fetchall()


def tenant_events(url: str, tenant_id: UUID) -> list[dict[str, Any]]:
    return query(url, "SELECT * FROM job_state_events WHERE tenant_id = %s ORDER BY seq", tenant_id)


def history(url: str, tenant_id: UUID, job_id: str) -> list[tuple[str, int]]:
    return [
        (e["state"], e["state_version"]) for e in tenant_events(url, tenant_id) if str(e["job_id"]) == job_id
    ]


def assert_gap_free(events: list[dict[str, Any]]) -> None:
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))


def test_every_use_case_that_changes_a_jobs_state_writes_exactly_one_numbered_event(
    reviewing,  # noqa: F811
    system_db,
    clean_db,
):
    tenant, reviewer, _ = reviewing
    clock = FakeClock(SystemClock().now())
    scheduler = SchedulerDeps(system_db, clock, new_id, RecordedMetrics(), RetryPolicy(), lambda lo, hi: 0)

    # accept -> READY; claim -> RUNNING; the reaper -> RETRY_SCHEDULED; claim -> RUNNING; finish ->
    # REVIEW_REQUIRED; a reviewer's rejection -> REJECTED.
    reviewed = tenant.client.submit(invoice_request(MISPRINTED), "reviewed").json["job_id"]
    assert claim(make_deps(system_db, ScriptedLlm(), clock=clock)) is not None
    clock.advance(61)
    run_scheduler(scheduler)
    clock.advance(1)
    deps = make_deps(system_db, ScriptedLlm(ok(misprinted_extraction())), clock=clock)
    assert asyncio.run(run_attempt(deps, claim(deps))).end is AttemptEnd.REVIEW_REQUIRED
    version = review(reviewer, reviewed).json["state_version"]
    assert decide(reviewer, reviewed, {"decision": "reject", "note": "no"}, version).status == 200
    # accept -> READY; the tenant cancels -> CANCELLED.
    cancelled = tenant.client.submit(invoice_request(TEXT), "cancelled").json["job_id"]
    assert tenant.client.request("POST", f"/extraction-jobs/{cancelled}/cancel").status == 200
    # accept, claim, a refusal -> FAILED_TERMINAL; support's retry -> READY; claim, finish -> SUCCEEDED.
    redriven = tenant.client.submit(invoice_request(TEXT), "redriven").json["job_id"]
    refused = make_deps(system_db, ScriptedLlm(LlmResult(OutcomeClass.REFUSED, "", error="no")), clock=clock)
    assert asyncio.run(run_attempt(refused, claim(refused))).end is AttemptEnd.FAILED_TERMINAL
    support = SupportDeps(db=system_db, clock=clock, new_id=new_id, sleep=lambda s: None, actor="test")
    retry_job(support, UUID(redriven), "the provider refused by mistake")
    deps = make_deps(system_db, ScriptedLlm(ok()), clock=clock)
    assert asyncio.run(run_attempt(deps, claim(deps))).end is AttemptEnd.SUCCEEDED

    events = tenant_events(clean_db, tenant.tenant_id)
    assert_gap_free(events)
    assert history(clean_db, tenant.tenant_id, reviewed) == [
        ("READY", 1),
        ("RUNNING", 2),
        ("RETRY_SCHEDULED", 3),
        ("RUNNING", 4),
        ("REVIEW_REQUIRED", 5),
        ("REJECTED", 6),
    ]
    assert history(clean_db, tenant.tenant_id, cancelled) == [("READY", 1), ("CANCELLED", 2)]
    assert history(clean_db, tenant.tenant_id, redriven) == [
        ("READY", 1),
        ("RUNNING", 2),
        ("FAILED_TERMINAL", 3),
        ("READY", 4),
        ("RUNNING", 5),
        ("SUCCEEDED", 6),
    ]
    for job_id in (reviewed, cancelled, redriven):
        assert (
            history(clean_db, tenant.tenant_id, job_id)[-1][1] == job_row(clean_db, job_id)["state_version"]
        )
    # The worker's and the scheduler's changes carry their clock's time, not the database's.
    reaped = [e for e in events if e["state"] == "RETRY_SCHEDULED"]
    assert [e["occurred_at"] for e in reaped] == [clock.now() - timedelta(seconds=1)]
    (sequence,) = query(
        clean_db, "SELECT last_seq FROM tenant_event_sequences WHERE tenant_id = %s", tenant.tenant_id
    )
    assert sequence["last_seq"] == len(events) == 14


def test_a_change_that_keeps_the_state_writes_no_event(tenant, system_db, clean_db):
    job_id = tenant.client.submit(invoice_request(TEXT), "k").json["job_id"]
    job = claim_next_job(system_db, SystemClock(), worker_id="w", lease_seconds=60, tenant_cap=8)
    assert job is not None

    with psycopg.connect(clean_db) as conn:  # a heartbeat, and a no-op write of the same state
        conn.execute("UPDATE extraction_jobs SET lease_until = lease_until + interval '1 minute'")
        conn.execute("UPDATE extraction_jobs SET state = state")

    assert history(clean_db, tenant.tenant_id, job_id) == [("READY", 1), ("RUNNING", 2)]


def test_the_outbox_payload_is_the_job_state_changed_model_and_matches_the_event_row(tenant, clean_db):
    job_id = tenant.client.submit(invoice_request(TEXT), "k").json["job_id"]
    assert tenant.client.request("POST", f"/extraction-jobs/{job_id}/cancel").status == 200

    rows = query(
        clean_db,
        "SELECT * FROM outbox_events WHERE event_type = %s ORDER BY payload->'sequence'",
        JOB_STATE_CHANGED,
    )
    events = tenant_events(clean_db, tenant.tenant_id)
    assert len(rows) == len(events) == 2
    for row, event in zip(rows, events, strict=True):
        payload = JobStateChanged.parse(row["payload"])
        assert set(row["payload"]) == set(JobStateChanged.model_fields)
        assert (payload.tenant_id, payload.job_id, row["aggregate_id"]) == (
            tenant.tenant_id,
            event["job_id"],
            event["job_id"],
        )
        assert (payload.sequence, payload.state, payload.state_version, payload.job_type) == (
            event["seq"],
            event["state"],
            event["state_version"],
            event["job_type"],
        )
        assert payload.occurred_at == event["occurred_at"]
        assert row["payload"]["occurred_at"].endswith("Z"), "RFC 3339 in UTC whatever the session's zone"
    # The same event always has the same id: a republish is one message to the queue and to consumers.
    assert len({row["event_id"] for row in rows}) == 2


def test_the_relay_sends_each_tenants_news_as_one_message_naming_its_highest_sequence(
    make_tenant, system_db, database_url, clean_db, local_aws
):
    job_queues = create_job_type_queues(f"notify-{secrets.token_hex(4)}", max_receive_count=2)
    notifications = create_jobs_queues(f"notifications-{secrets.token_hex(4)}", max_receive_count=2)
    settings = RelaySettings(
        database_url=SecretStr(database_url),
        job_queue_urls=queue_urls(job_queues),
        notifications_queue_url=notifications.url,
    )
    acme, globex = make_tenant("acme"), make_tenant("globex")
    for index in range(3):
        acme.client.submit(invoice_request(f"{TEXT}\n#{index}"), f"a{index}")
    globex.client.submit(invoice_request(TEXT), "g")

    report = relay_outbox(build_relay(settings, db=system_db))

    assert report.failed == 0 and report.unroutable == 0
    sqs = boto3.client("sqs")
    received = sqs.receive_message(
        QueueUrl=notifications.url, MaxNumberOfMessages=10, MessageSystemAttributeNames=["All"]
    ).get("Messages", [])
    news = {TenantNews.model_validate_json(m["Body"]): m["Attributes"] for m in received}
    assert set(news) == {
        TenantNews(tenant_id=acme.tenant_id, sequence=3),
        TenantNews(tenant_id=globex.tenant_id, sequence=1),
    }
    for item, attributes in news.items():
        assert attributes["MessageGroupId"] == str(item.tenant_id), "one group per tenant"
        assert attributes["MessageDeduplicationId"] == f"{item.tenant_id}:{item.sequence}"
    assert query(clean_db, "SELECT count(*) AS n FROM outbox_events WHERE published_at IS NULL")[0]["n"] == 0


def test_without_a_notifications_queue_state_changes_are_confirmed_to_nobody(
    tenant, system_db, database_url, clean_db, local_aws
):
    job_queues = create_job_type_queues(f"quiet-{secrets.token_hex(4)}", max_receive_count=2)
    settings = RelaySettings(database_url=SecretStr(database_url), job_queue_urls=queue_urls(job_queues))
    tenant.client.submit(invoice_request(TEXT), "k")

    report = relay_outbox(build_relay(settings, db=system_db))

    assert (report.published, report.failed, report.unroutable) == (2, 0, 0)


def test_a_sequence_number_is_taken_only_after_the_previous_one_committed(tenant, clean_db):
    """Commit order is sequence order: the second writer waits for the first one's commit, so a reader never
    sees a number before every smaller one."""
    first = tenant.client.submit(invoice_request(TEXT), "1").json["job_id"]
    second = tenant.client.submit(invoice_request(TEXT + " "), "2").json["job_id"]
    for job_id in (first, second):  # events 1 to 4
        assert tenant.client.request("POST", f"/extraction-jobs/{job_id}/cancel").status == 200
    # From one finished state to another: no run-queue or spend row of the tenant changes, so the only row
    # the two writers share is the tenant's sequence.
    cancel = "UPDATE extraction_jobs SET state = 'FAILED_TERMINAL', updated_at = now() WHERE job_id = %s"
    holder = psycopg.connect(clean_db)
    waiter = psycopg.connect(clean_db)
    try:
        holder.execute(cancel, (first,))  # number 5, held until commit
        waiter_pid = waiter.info.backend_pid
        done = threading.Event()

        def change_second() -> None:
            waiter.execute(cancel, (second,))
            waiter.commit()
            done.set()

        thread = threading.Thread(target=change_second)
        thread.start()
        try:
            with psycopg.connect(clean_db, autocommit=True) as observer:
                deadline = datetime.now(UTC) + timedelta(seconds=WAIT_SECONDS)
                while True:
                    (waiting,) = observer.execute(
                        "SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = %s", (waiter_pid,)
                    ).fetchone() or (False,)
                    if waiting:
                        break
                    assert datetime.now(UTC) < deadline, "the second writer never waited for the first"
                assert not done.is_set()
                assert [e["seq"] for e in tenant_events(clean_db, tenant.tenant_id)] == [1, 2, 3, 4]
            holder.commit()
            assert done.wait(WAIT_SECONDS), "the second writer did not go on after the first committed"
        finally:
            thread.join(WAIT_SECONDS)
    finally:
        holder.close()
        waiter.close()

    events = tenant_events(clean_db, tenant.tenant_id)
    assert [(e["seq"], str(e["job_id"])) for e in events[4:]] == [(5, first), (6, second)]


def test_concurrent_changes_of_one_tenants_jobs_are_numbered_gap_free_and_another_tenant_counts_apart(
    make_tenant, system_db, clean_db
):
    acme, globex = make_tenant("acme"), make_tenant("globex")
    for index in range(16):
        acme.client.submit(invoice_request(f"{TEXT}\n#{index}"), f"a{index}")
    for index in range(4):
        globex.client.submit(invoice_request(f"{TEXT}\n#{index}"), f"g{index}")
    seen_holes: list[list[int]] = []
    stop = threading.Event()

    def read_while_they_write() -> None:
        # Whatever a reader sees of a tenant's events at any moment is 1..n, whole.
        with psycopg.connect(clean_db, autocommit=True) as conn:
            while not stop.is_set():
                seqs = [
                    row[0]
                    for row in conn.execute(
                        "SELECT seq FROM job_state_events WHERE tenant_id = %s ORDER BY seq",
                        (acme.tenant_id,),
                    )
                ]
                if seqs != list(range(1, len(seqs) + 1)):
                    seen_holes.append(seqs)

    def ready_jobs_left() -> bool:
        with psycopg.connect(clean_db) as conn:
            return (
                conn.execute("SELECT 1 FROM extraction_jobs WHERE state = 'READY' LIMIT 1").fetchone()
                is not None
            )

    def claim_and_cancel(worker: str) -> None:
        # Claims (the use case), then hands its jobs back for tomorrow (a raw write, so that no other worker
        # claims them again), each in its own transaction, at once on several connections.
        # A claim may find nothing while other workers hold the jobs it probes (SKIP LOCKED): it asks again
        # until none is left READY, a bounded number of times.
        for _ in range(1_000):
            claimed = claim_next_job(
                system_db, SystemClock(), worker_id=worker, lease_seconds=60, tenant_cap=64
            )
            if claimed is None and not ready_jobs_left():
                break
        # One transaction per job, as the use cases write: one statement changing several jobs would lock
        # its job rows before its triggers take the queue rows, an order a concurrent claim takes the other
        # way round (a deadlock PostgreSQL breaks by failing one of them).
        with psycopg.connect(clean_db, autocommit=True) as conn:
            mine = conn.execute(
                "SELECT job_id FROM extraction_jobs WHERE state = 'RUNNING' AND lease_owner = %s", (worker,)
            ).fetchall()
            for (job_id,) in mine:
                conn.execute(
                    "UPDATE extraction_jobs SET state = 'RETRY_SCHEDULED',"
                    " next_attempt_at = now() + interval '1 day', lease_owner = NULL, lease_until = NULL,"
                    " fence = fence + 1, updated_at = now(), state_version = state_version + 1"
                    " WHERE job_id = %s",
                    (job_id,),
                )

    reader = threading.Thread(target=read_while_they_write)
    workers = [threading.Thread(target=claim_and_cancel, args=(f"w{n}",)) for n in range(4)]
    reader.start()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(WAIT_SECONDS)
    stop.set()
    reader.join(WAIT_SECONDS)

    assert not any(t.is_alive() for t in (*workers, reader))
    assert seen_holes == []
    acme_events, globex_events = (
        tenant_events(clean_db, acme.tenant_id),
        tenant_events(clean_db, globex.tenant_id),
    )
    assert_gap_free(acme_events)
    assert_gap_free(globex_events)
    # Each job: READY, RUNNING, RETRY_SCHEDULED, each once, in its own state_version order.
    assert len(acme_events) == 16 * 3 and len(globex_events) == 4 * 3
    for events in (acme_events, globex_events):
        by_job: dict[UUID, list[tuple[str, int]]] = {}
        for event in events:
            by_job.setdefault(event["job_id"], []).append((event["state"], event["state_version"]))
        assert set(map(tuple, by_job.values())) == {(("READY", 1), ("RUNNING", 2), ("RETRY_SCHEDULED", 3))}


# --- the replay window and retention --------------------------------------------------------------------

T0 = datetime(2026, 3, 1, 12, tzinfo=UTC)


def events_at(url: str, tenant: Any, hours: list[int]) -> list[str]:
    """One job per hour offset, accepted (its event moved to that time) and cancelled at T0 + that many hours:
    events 2k-1 and 2k for the k-th offset."""
    job_ids = []
    for index, hour in enumerate(hours):
        job_id = tenant.client.submit(invoice_request(f"{TEXT}\n#{index}"), f"w{index}").json["job_id"]
        at = T0 + timedelta(hours=hour)
        with psycopg.connect(url) as conn:
            conn.execute(
                "UPDATE extraction_jobs SET state = 'CANCELLED', finished_at = %s, updated_at = %s"
                " WHERE job_id = %s",
                (at, at, job_id),
            )
            conn.execute("UPDATE job_state_events SET occurred_at = %s WHERE job_id = %s", (at, job_id))
        job_ids.append(job_id)
    return job_ids


def test_the_window_queries_replay_after_a_cursor_and_name_the_oldest_and_latest(tenant, system_db, clean_db):
    events_at(clean_db, tenant, [0, 1, 2, 3])
    q = system_db.q

    with system_db.transaction() as conn:
        after = conn.execute(
            q.job_state_events_after, {"tenant_id": tenant.tenant_id, "after_seq": 3, "limit": 3}
        ).fetchall()
        window = conn.execute(
            q.tenant_event_window, {"tenant_id": tenant.tenant_id, "after_seq": 4}
        ).fetchone()
        caught_up = conn.execute(
            q.tenant_event_window, {"tenant_id": tenant.tenant_id, "after_seq": 8}
        ).fetchone()
        conn.execute("DELETE FROM job_state_events WHERE tenant_id = %s AND seq <= 2", (tenant.tenant_id,))
        trimmed = conn.execute(
            q.tenant_event_window, {"tenant_id": tenant.tenant_id, "after_seq": 0}
        ).fetchone()
        stranger = conn.execute(q.tenant_event_window, {"tenant_id": new_id(), "after_seq": 0}).fetchone()
        empty = conn.execute(
            q.job_state_events_after, {"tenant_id": tenant.tenant_id, "after_seq": 8, "limit": 10}
        ).fetchall()

    assert [(row["seq"], row["state"]) for row in after] == [(4, "CANCELLED"), (5, "READY"), (6, "CANCELLED")]
    assert set(after[0]) == {"seq", "job_id", "job_type", "state", "state_version", "occurred_at"}
    assert (window["latest"], window["oldest"], window["next_at"]) == (8, 1, T0 + timedelta(hours=2))
    assert caught_up["next_at"] is None, "nothing after the latest yet"
    assert (trimmed["oldest"], trimmed["next_at"]) == (3, None), "the first kept, once retention took 1 and 2"
    assert (stranger["latest"], stranger["oldest"], stranger["next_at"]) == (0, 1, None)
    assert empty == []


def test_retention_deletes_old_state_events_in_bounded_batches(tenant, system_db, clean_db):
    events_at(clean_db, tenant, [0, 0, 0, 0, 0, 50])  # ten events at T0, two 50 hours later
    clock = FakeClock(T0 + timedelta(hours=49))  # 48 hours kept: everything at T0 goes, T0+50h stays
    store = None  # no rule that needs S3 has anything to do

    def run(max_batches: int) -> int:
        policy = RetentionPolicy(state_event_hours=48, batch_size=4, max_batches=max_batches)
        report = apply_retention(system_db, clock, store, policy)  # type: ignore[arg-type]
        return report.deleted["job_state_events"]

    assert run(max_batches=1) == 4, "one batch of four"
    assert run(max_batches=10) == 6, "the rest, in batches, stopping at a short one"
    left = tenant_events(clean_db, tenant.tenant_id)
    assert [(e["seq"], e["occurred_at"]) for e in left] == [
        (11, T0 + timedelta(hours=50)),
        (12, T0 + timedelta(hours=50)),
    ]
    (sequence,) = query(
        clean_db, "SELECT last_seq FROM tenant_event_sequences WHERE tenant_id = %s", tenant.tenant_id
    )
    assert sequence["last_seq"] == 12, "the sequence goes on from where it was"


@pytest.mark.parametrize(
    ("name", "index"),
    [
        ("job_state_events_after", "job_state_events_pkey"),
        ("tenant_event_window", "job_state_events_pkey"),
    ],
)
def test_the_replay_queries_read_one_index_range_of_the_tenant(name, index, tenant, clean_db):
    """A subscribe's cost does not grow with the events kept: each query walks its index from the cursor or
    the window's start, never the tenant's whole history or the table."""
    with psycopg.connect(clean_db) as conn:
        conn.execute(
            plan_queries().seed_plan_state_events, {"tenant_id": tenant.tenant_id, "since": T0, "count": 5000}
        )
    params = {"tenant_id": tenant.tenant_id, "after_seq": 4900, "limit": 100, "since": T0}
    plan = query_plan(clean_db, getattr(load_queries(), name), params)

    assert "Seq Scan on job_state_events" not in plan and f" {index} " in plan, plan
