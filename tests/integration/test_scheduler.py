"""The scheduler's tick against real PostgreSQL with a controlled clock and jitter."""

from __future__ import annotations

import re
import threading
from datetime import timedelta

import psycopg
import pytest

from tests.support import invoice_request, job_row, lease_job, plan_queries, query_plan
from tollgate.core.clock import FakeClock, SystemClock, new_id
from tollgate.core.metrics import RecordedMetrics
from tollgate.core.retry import RetryPolicy
from tollgate.events import ExtractionFailed
from tollgate.scheduler.tick import SchedulerDeps, run_scheduler

pytestmark = pytest.mark.integration

POLICY = RetryPolicy(base_seconds=2, cap_seconds=300, attempt_timeout_seconds=120)


def scheduler(system_db, clock, metrics=None):
    return SchedulerDeps(
        db=system_db,
        clock=clock,
        new_id=new_id,
        metrics=metrics or RecordedMetrics(),
        retry_policy=POLICY,
        jitter=lambda low, high: high,  # the longest wait full jitter could pick
    )


@pytest.fixture
def clock():
    return FakeClock(SystemClock().now())


def submit(tenant, text="invoice", deadline_seconds=3600, key=None):
    body = invoice_request(text=text, deadline_seconds=deadline_seconds)
    return tenant.client.submit(body, key or text.replace(" ", "-")).json["job_id"]


def failed_events(url):
    with psycopg.connect(url) as conn:
        return conn.execute(
            "SELECT aggregate_id::text, payload->>'reason' FROM outbox_events"
            " WHERE event_type = 'extraction.failed.v1'"
        ).fetchall()


def test_an_expired_lease_is_retried_with_the_fence_moved_and_the_attempt_kept(
    tenant, system_db, clock, clean_db
):
    job_id = submit(tenant)
    fence = lease_job(clean_db, job_id, attempt=2, lease_until=clock.now() + timedelta(seconds=30))
    clock.advance(31)

    report = run_scheduler(scheduler(system_db, clock))

    job = job_row(clean_db, job_id)
    assert report.reaped_to_retry == 1
    assert job["state"] == "RETRY_SCHEDULED"
    assert job["fence"] == fence + 1
    assert job["attempt"] == 2, "a restart never gives a job its attempts back"
    assert job["lease_until"] is None and job["lease_owner"] is None
    assert job["next_attempt_at"] == clock.now() + timedelta(seconds=POLICY.backoff_ceiling(2))
    with psycopg.connect(clean_db) as conn:
        outcome = conn.execute("SELECT outcome FROM job_attempts WHERE job_id = %s", (job_id,)).fetchone()[0]
    assert outcome == "lease_expired"


def test_a_lease_not_yet_expired_is_left_alone(tenant, system_db, clock, clean_db):
    job_id = submit(tenant)
    lease_job(clean_db, job_id, attempt=1, lease_until=clock.now() + timedelta(seconds=30))
    clock.advance(29)

    run_scheduler(scheduler(system_db, clock))

    assert job_row(clean_db, job_id)["state"] == "RUNNING"


def test_an_expired_lease_with_no_attempts_left_fails_terminally_with_an_event(
    tenant, system_db, clock, clean_db
):
    job_id = submit(tenant)
    lease_job(clean_db, job_id, attempt=5, lease_until=clock.now())  # max_attempts is 5
    clock.advance(1)

    report = run_scheduler(scheduler(system_db, clock))

    job = job_row(clean_db, job_id)
    assert report.reaped_to_failed == 1
    assert (job["state"], job["last_error"]["reason"]) == ("FAILED_TERMINAL", "attempts_exhausted")
    assert job["finished_at"] is not None and job["lease_until"] is None
    assert failed_events(clean_db) == [(job_id, "attempts_exhausted")]


def failed_payloads(url):
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT payload FROM outbox_events WHERE event_type = 'extraction.failed.v1'")
        return [row[0] for row in rows.fetchall()]


def test_the_schedulers_failed_event_has_the_workers_shape(tenant, system_db, clock, clean_db):
    """Tenants once got two shapes of extraction.failed.v1: the scheduler's had no attempt, no review_reasons."""
    reaped = submit(tenant, text="reaped")
    lease_job(clean_db, reaped, attempt=5, lease_until=clock.now())
    never_ran = submit(tenant, text="never ran", deadline_seconds=60)
    clock.advance(61)

    run_scheduler(scheduler(system_db, clock))

    by_job = {payload["job_id"]: payload for payload in failed_payloads(clean_db)}
    worker_fields = set(ExtractionFailed.model_fields)  # what the worker's event carries: the same model
    assert {job: set(payload) for job, payload in by_job.items()} == {
        reaped: worker_fields,
        never_ran: worker_fields,
    }
    assert ExtractionFailed.parse(by_job[reaped]).attempt == 5
    assert ExtractionFailed.parse(by_job[never_ran]).attempt == 0
    assert by_job[reaped]["review_reasons"] == by_job[never_ran]["review_reasons"] == []
    assert by_job[reaped]["state_version"] == job_row(clean_db, reaped)["state_version"]


def test_an_expired_lease_whose_retry_could_not_finish_by_the_deadline_fails(
    tenant, system_db, clock, clean_db
):
    job_id = submit(tenant, deadline_seconds=120)  # a retry needs 2 s of backoff + 120 s to run
    lease_job(clean_db, job_id, attempt=1, lease_until=clock.now())
    clock.advance(1)

    run_scheduler(scheduler(system_db, clock))

    job = job_row(clean_db, job_id)
    assert (job["state"], job["last_error"]["reason"]) == ("FAILED_TERMINAL", "deadline_exceeded")


def test_jobs_waiting_past_their_deadline_are_failed(tenant, system_db, clock, clean_db):
    ready = submit(tenant, text="ready", deadline_seconds=60)
    waiting = submit(tenant, text="waiting", deadline_seconds=60)
    running = submit(tenant, text="running", deadline_seconds=600)
    with psycopg.connect(clean_db) as conn:
        conn.execute(
            "UPDATE extraction_jobs SET state = 'RETRY_SCHEDULED', attempt = 1, next_attempt_at = now()"
            " WHERE job_id = %s",
            (waiting,),
        )
    lease_job(clean_db, running, attempt=1, lease_until=clock.now() + timedelta(minutes=30))
    clock.advance(61)

    report = run_scheduler(scheduler(system_db, clock))

    assert report.expired == 2
    assert job_row(clean_db, ready)["state"] == "FAILED_TERMINAL"
    assert job_row(clean_db, waiting)["state"] == "FAILED_TERMINAL"
    assert job_row(clean_db, running)["state"] == "RUNNING"
    assert sorted(failed_events(clean_db)) == sorted(
        [(ready, "deadline_exceeded"), (waiting, "deadline_exceeded")]
    )


def test_a_terminal_job_is_never_touched(tenant, system_db, clock, clean_db):
    job_id = submit(tenant, deadline_seconds=60)
    tenant.client.request("POST", f"/extraction-jobs/{job_id}/cancel")
    before = job_row(clean_db, job_id)
    clock.advance(3600)

    run_scheduler(scheduler(system_db, clock))

    assert job_row(clean_db, job_id) == before


def test_two_schedulers_at_once_reap_each_job_once(tenant, system_db, clock, clean_db):
    jobs = [submit(tenant, text=f"job {i}") for i in range(20)]
    for job_id in jobs:
        lease_job(clean_db, job_id, attempt=5, lease_until=clock.now())
    clock.advance(1)
    reports = []
    threads = [
        threading.Thread(target=lambda: reports.append(run_scheduler(scheduler(system_db, clock))))
        for _ in range(2)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sum(r.reaped_to_failed for r in reports) == 20
    assert len(failed_events(clean_db)) == 20


def test_backlog_metrics_report_runnable_work_and_ages(tenant, system_db, clock, clean_db):
    submit(tenant, text="a")
    submit(tenant, text="b")
    with psycopg.connect(clean_db) as conn:
        created = conn.execute("SELECT min(created_at) FROM extraction_jobs").fetchone()[0]
    clock = FakeClock(created + timedelta(seconds=90))
    metrics = RecordedMetrics()

    report = run_scheduler(scheduler(system_db, clock, metrics))

    assert report.runnable == 2
    assert metrics.values["RunnableJobs"] == 2
    assert metrics.values["OldestEligibleJobAge"] == pytest.approx(90, abs=1)
    assert metrics.values["OldestUnpublishedOutboxAge"] == pytest.approx(90, abs=1)
    # Each job's requested event and its state change (READY) for live notifications.
    assert metrics.values["UnpublishedOutboxEvents"] == 4


# --- provider batches ------------------------------------------------------------------------------------


def insert_batch(owner_url, *, created_at, state="submitted", settled_at=None):
    """A provider batch as the worker records it, written as tollgate_system (the role that keeps them)."""
    with psycopg.connect(owner_url) as conn:
        conn.execute("SET ROLE tollgate_system")
        conn.execute(
            "INSERT INTO provider_batches (batch_id, provider_pool, model, state, provider_batch_id,"
            " created_at, submitted_at, ended_at, settled_at)"
            " VALUES (%s, 'default', 'gpt-4.1-mini', %s, %s, %s, %s, %s, %s)",
            (
                new_id(),
                state,
                f"batch_{new_id().hex}",
                created_at,
                created_at,
                settled_at,
                settled_at,
            ),
        )


def test_batch_gauges_report_open_batches_and_the_oldest_ones_age(system_db, clock, clean_db):
    metrics = RecordedMetrics()

    # Given no batch at all, the gauges say so (an absent gauge would read as a silent scheduler).
    run_scheduler(scheduler(system_db, clock, metrics))
    assert (metrics.values["OpenProviderBatches"], metrics.values["OldestOpenBatchAge"]) == (0, 0.0)

    # Given an open batch created 26 hours ago, one created an hour ago, and an older one already settled.
    now = clock.now()
    insert_batch(clean_db, created_at=now - timedelta(hours=26), state="in_progress")
    insert_batch(clean_db, created_at=now - timedelta(hours=1))
    insert_batch(
        clean_db, created_at=now - timedelta(days=3), state="completed", settled_at=now - timedelta(days=2)
    )

    # When the scheduler ticks.
    report = run_scheduler(scheduler(system_db, clock, metrics))

    # Then the two open ones count, and the age is the oldest open one's, not the settled one's.
    assert report.open_batches == metrics.values["OpenProviderBatches"] == 2
    assert metrics.values["OldestOpenBatchAge"] == report.oldest_open_batch_age_seconds
    assert report.oldest_open_batch_age_seconds == pytest.approx(26 * 3600, abs=1)


def test_the_batch_gauges_read_only_the_index_of_open_batches(clean_db):
    """With sequential scans priced out, the gauges read provider_batches only through its partial index of
    open batches by age: their cost follows the open batches, not every batch retention still keeps."""
    from tollgate.db import load_queries

    with psycopg.connect(clean_db) as conn:
        # Retention keeps settled batches for days: many settled, a few open.
        conn.execute(
            plan_queries().seed_plan_batches, {"before": SystemClock().now(), "count": 2000, "open": 5}
        )
    plan = query_plan(clean_db, load_queries().open_batch_gauges)

    indexes = set(re.findall(r"using (\w+) on provider_batches", plan))
    assert "Seq Scan" not in plan, plan
    # The oldest from the age index; the count from either partial index of open batches.
    assert "provider_batches_open_by_age" in indexes, plan
    assert indexes <= {"provider_batches_open_by_age", "provider_batches_open"}, plan
