"""Retention against real PostgreSQL and moto S3, with simulated days: every per-job table holds at most its
retention's worth of rows, the archives hold the rest, and nothing unfinished or still used is touched."""

from __future__ import annotations

import hashlib
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any
from uuid import UUID, uuid4

import boto3
import psycopg
import pytest
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from typer.testing import CliRunner

from tests.support import invoice_request, plan_queries, query_plan
from tollgate.cli.main import app
from tollgate.core import checkpoints
from tollgate.core.checkpoints import RETENTION_AFTER_ARCHIVE
from tollgate.core.clock import FakeClock, SystemClock, new_id
from tollgate.core.documents import canonicalize, document_key
from tollgate.core.metrics import RecordedMetrics
from tollgate.core.retry import RetryPolicy
from tollgate.db import load_queries
from tollgate.scheduler.retention import (
    ARCHIVE_PREFIX,
    ArchivedJob,
    ObjectVersion,
    RetentionPolicy,
    S3RetentionStore,
    apply_retention,
)
from tollgate.scheduler.tick import SchedulerDeps, run_scheduler
from tollgate.settings import SchedulerSettings
from tollgate.tenants.keys import create_tenant
from tollgate.tenants.retention import set_tenant_retention
from tollgate.wiring import build_scheduler
from tollgate_dev.local.aws import create_documents_bucket
from tollgate_dev.local.runtime import LOCAL_BUCKET

pytestmark = pytest.mark.integration

BUCKET = "tollgate-retention-test"
DAY = timedelta(days=1)
START = datetime(2026, 3, 1, tzinfo=UTC)
PER_JOB_TABLES = (
    "extraction_jobs",
    "job_attempts",
    "extraction_results",
    "outbox_events",
    "execution_inbox",
    "webhook_deliveries",
    "webhook_delivery_attempts",
    "documents",
)


@pytest.fixture
def s3(local_aws: Any) -> Iterator[Any]:
    create_documents_bucket(BUCKET)
    client = boto3.client("s3")
    yield client
    versions = client.list_object_versions(Bucket=BUCKET).get("Versions", [])
    for start in range(0, len(versions), 1000):
        chunk = versions[start : start + 1000]
        client.delete_objects(
            Bucket=BUCKET,
            Delete={"Objects": [{"Key": v["Key"], "VersionId": v["VersionId"]} for v in chunk]},
        )


@pytest.fixture
def store(s3: Any) -> S3RetentionStore:
    return S3RetentionStore(s3, BUCKET)


# A seeded document whose text starts with this is kept in its row rather than in the bucket.
IN_ROW = "[in row]"


@dataclass
class Seeder:
    """Writes what finished (or unfinished) jobs leave in every table, at the times a simulated day says."""

    url: str
    s3: Any
    endpoints: dict[UUID, UUID] = field(default_factory=dict)
    documents: dict[tuple[UUID, str], UUID] = field(default_factory=dict)

    def tenant(self, system_db: Any, name: str, retention_days: int | None = None) -> UUID:
        tenant_id = create_tenant(system_db, name, new_id).tenant_id
        if retention_days is not None:
            set_tenant_retention(system_db, tenant_id, retention_days)
        endpoint_id = uuid4()
        with psycopg.connect(self.url) as conn:
            conn.execute(
                "INSERT INTO webhook_endpoints (endpoint_id, tenant_id, url, event_types, secret)"
                " VALUES (%s, %s, 'https://erp.example/hook', ARRAY['extraction.completed.v1'], 'whsec_x')",
                (endpoint_id, tenant_id),
            )
        self.endpoints[tenant_id] = endpoint_id
        return tenant_id

    def document(self, conn: psycopg.Connection[Any], tenant_id: UUID, text: str, at: datetime) -> UUID:
        """A stored document, shared by every job with the same text (as acceptance shares by digest)."""
        if (tenant_id, text) in self.documents:
            return self.documents[(tenant_id, text)]
        canonical = canonicalize([text])
        document_id = uuid4()
        if text.startswith(IN_ROW):  # kept in its row, as acceptance keeps a small document
            conn.execute(
                "INSERT INTO documents (document_id, tenant_id, content_sha256, body, size_bytes, page_count,"
                " created_at) VALUES (%s, %s, %s, %s, %s, 1, %s)",
                (document_id, tenant_id, canonical.sha256, canonical.body, canonical.size_bytes, at),
            )
            self.documents[(tenant_id, text)] = document_id
            return document_id
        key = document_key(tenant_id, canonical.sha256)
        version = self.s3.put_object(Bucket=BUCKET, Key=key, Body=canonical.body)["VersionId"]
        conn.execute(
            "INSERT INTO documents (document_id, tenant_id, content_sha256, s3_key, s3_version_id, size_bytes,"
            " page_count, created_at) VALUES (%s, %s, %s, %s, %s, %s, 1, %s)",
            (document_id, tenant_id, canonical.sha256, key, version, canonical.size_bytes, at),
        )
        self.documents[(tenant_id, text)] = document_id
        return document_id

    def finished_job(
        self, tenant_id: UUID, key: str, at: datetime, *, text: str | None = None, state: str = "SUCCEEDED"
    ) -> UUID:
        """A job accepted an hour before ``at`` and finished at ``at``, with one attempt, a result, its two
        events published, its inbox row and one delivered webhook."""
        job_id = uuid4()
        accepted = at - timedelta(hours=1)
        with psycopg.connect(self.url) as conn:
            document_id = self.document(conn, tenant_id, text or f"invoice {key}", accepted)
            self._job(conn, job_id, tenant_id, key, document_id, accepted, state=state, finished_at=at)
            conn.execute(
                "INSERT INTO job_attempts (job_id, attempt, tenant_id, fence, worker_id, started_at,"
                " finished_at, outcome, model, input_tokens, output_tokens, cost_usd, latency_ms)"
                " VALUES (%s, 1, %s, 1, 'w-1', %s, %s, 'ok', 'gpt-4.1-mini', 900, 300, 0.000840, 2100)",
                (job_id, tenant_id, at - timedelta(seconds=3), at),
            )
            if state in ("SUCCEEDED", "REVIEW_REQUIRED"):
                conn.execute(
                    "INSERT INTO extraction_results (job_id, tenant_id, attempt, policy_version, result,"
                    " created_at) VALUES (%s, %s, 1, 'validation.v1', %s, %s)",
                    (job_id, tenant_id, Jsonb({"total": "119.00", "key": key}), at),
                )
            requested = self._event(conn, tenant_id, job_id, "extraction.requested.v1", accepted, accepted)
            self._event(conn, tenant_id, job_id, "extraction.completed.v1", at, at)
            conn.execute(
                "INSERT INTO execution_inbox (event_id, tenant_id, job_id, event_type, payload_sha256,"
                " message_id, received_at) VALUES (%s, %s, %s, 'extraction.requested.v1', %s, 'm', %s)",
                (requested, tenant_id, job_id, "0" * 64, accepted),
            )
            delivery_id = uuid4()
            conn.execute(
                "INSERT INTO webhook_deliveries (delivery_id, tenant_id, endpoint_id, event_id, event_type,"
                " body, state, attempts, created_at, updated_at, delivered_at)"
                " VALUES (%s, %s, %s, %s, 'extraction.completed.v1', '{}', 'DELIVERED', 1, %s, %s, %s)",
                (delivery_id, tenant_id, self.endpoints[tenant_id], uuid4(), at, at, at),
            )
            conn.execute(
                "INSERT INTO webhook_delivery_attempts (delivery_id, attempt, tenant_id, started_at, status)"
                " VALUES (%s, 1, %s, %s, 200)",
                (delivery_id, tenant_id, at),
            )
        return job_id

    def unfinished_job(self, tenant_id: UUID, key: str, at: datetime, state: str, *, text: str) -> UUID:
        """A job that has not finished, with the rows it already has: an attempt when it ran, its inbox row,
        its requested event (published) and a webhook delivery still PENDING."""
        job_id = uuid4()
        with psycopg.connect(self.url) as conn:
            document_id = self.document(conn, tenant_id, text, at)
            self._job(conn, job_id, tenant_id, key, document_id, at, state=state, finished_at=None)
            if state in ("RUNNING", "RETRY_SCHEDULED"):
                conn.execute(
                    "INSERT INTO job_attempts (job_id, attempt, tenant_id, fence, worker_id, started_at)"
                    " VALUES (%s, 1, %s, 1, 'w-1', %s)",
                    (job_id, tenant_id, at),
                )
            requested = self._event(conn, tenant_id, job_id, "extraction.requested.v1", at, at)
            self._event(conn, tenant_id, job_id, "extraction.failed.v1", at, None)  # never published
            conn.execute(
                "INSERT INTO execution_inbox (event_id, tenant_id, job_id, event_type, payload_sha256,"
                " message_id, received_at) VALUES (%s, %s, %s, 'extraction.requested.v1', %s, 'm', %s)",
                (requested, tenant_id, job_id, "0" * 64, at),
            )
            conn.execute(
                "INSERT INTO webhook_deliveries (delivery_id, tenant_id, endpoint_id, event_id, event_type,"
                " body, state, created_at, updated_at)"
                " VALUES (%s, %s, %s, %s, 'extraction.completed.v1', '{}', 'PENDING', %s, %s)",
                (uuid4(), tenant_id, self.endpoints[tenant_id], uuid4(), at, at),
            )
        return job_id

    def batch(self, lines: list[tuple[UUID, UUID]], at: datetime, *, settled: bool = True) -> UUID:
        """A provider batch created an hour before ``at`` carrying these (job, tenant) lines, whose attempts
        name it: settled (completed, every line settled) at ``at``, or still in progress with its lines open."""
        batch_id = uuid4()
        with psycopg.connect(self.url) as conn:
            conn.execute(
                "INSERT INTO provider_batches (batch_id, provider_pool, model, state, request_count,"
                " provider_batch_id, created_at, submitted_at, ended_at, settled_at)"
                " VALUES (%s, 'openai', 'gpt-4.1-mini', %s, %s, %s, %s, %s, %s, %s)",
                (
                    batch_id,
                    "completed" if settled else "in_progress",
                    len(lines),
                    f"batch_{batch_id.hex}",
                    at - timedelta(hours=1),
                    at - timedelta(hours=1),
                    at if settled else None,
                    at if settled else None,
                ),
            )
            for job_id, tenant_id in lines:
                conn.execute(
                    "INSERT INTO provider_batch_jobs (batch_id, job_id, tenant_id, attempt, fence, settled_at,"
                    " outcome) VALUES (%s, %s, %s, 1, 1, %s, %s)",
                    (batch_id, job_id, tenant_id, at if settled else None, "ok" if settled else None),
                )
                conn.execute(
                    "UPDATE job_attempts SET batch_id = %s, discount_usd = 0.000840 WHERE job_id = %s",
                    (batch_id, job_id),
                )
        return batch_id

    def _job(
        self,
        conn: psycopg.Connection[Any],
        job_id: UUID,
        tenant_id: UUID,
        key: str,
        document_id: UUID,
        accepted: datetime,
        *,
        state: str,
        finished_at: datetime | None,
    ) -> None:
        running = state == "RUNNING"
        conn.execute(
            "INSERT INTO extraction_jobs (job_id, tenant_id, idempotency_key, request_hash, job_type,"
            " document_id, schema_version, model_policy, max_attempts, estimated_tokens, document_bytes,"
            " deadline_at, state, state_version, attempt, fence, lease_owner, lease_until, next_attempt_at,"
            " created_at, updated_at, finished_at)"
            " VALUES (%s, %s, %s, %s, 'invoice_extraction', %s, 'invoice.v1', 'auto', 5, 2000, 100, %s, %s,"
            " %s, %s, %s, %s, %s, %s, %s, %s, %s)",
            (
                job_id,
                tenant_id,
                key,
                hashlib.sha256(key.encode()).hexdigest(),
                document_id,
                accepted + timedelta(days=7),
                state,
                1 if state == "READY" else 3,
                0 if state == "READY" else 1,
                0 if state == "READY" else 1,
                "w-1" if running else None,
                accepted + timedelta(minutes=1) if running else None,
                accepted if state == "RETRY_SCHEDULED" else None,
                accepted,
                finished_at or accepted,
                finished_at,
            ),
        )
        # The job state event trigger (migration 0021) wrote its live-notification rows as of now: the event
        # goes to the job's own time, and its outbox row away, since this seeder writes the job's outbox rows
        # itself (test_job_state_events.py covers the trigger's, and their retention).
        conn.execute(
            "UPDATE job_state_events SET occurred_at = %s WHERE job_id = %s",
            (finished_at or accepted, job_id),
        )
        conn.execute(
            "DELETE FROM outbox_events WHERE aggregate_id = %s AND event_type = 'job.state_changed.v1'",
            (job_id,),
        )

    def _event(
        self,
        conn: psycopg.Connection[Any],
        tenant_id: UUID,
        job_id: UUID,
        event_type: str,
        at: datetime,
        published_at: datetime | None,
    ) -> UUID:
        event_id = uuid4()
        conn.execute(
            "INSERT INTO outbox_events (event_id, tenant_id, aggregate_id, event_type, payload, created_at,"
            " published_at) VALUES (%s, %s, %s, %s, '{}', %s, %s)",
            (event_id, tenant_id, job_id, event_type, at, published_at),
        )
        return event_id


@pytest.fixture
def seed(clean_db: str, s3: Any) -> Seeder:
    return Seeder(clean_db, s3)


def table_counts(url: str) -> dict[str, int]:
    with psycopg.connect(url) as conn:
        return {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in PER_JOB_TABLES}


def query(url: str, sql: str, *params: Any) -> list[dict[str, Any]]:
    with psycopg.connect(url, row_factory=dict_row) as conn:
        return conn.execute(sql, params).fetchall()


def archived_lines(s3: Any) -> list[tuple[str, ArchivedJob]]:
    """Every line of every current archive object under the prefix, with the key it came from."""
    lines = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=ARCHIVE_PREFIX):
        for item in page.get("Contents", []):
            body = s3.get_object(Bucket=BUCKET, Key=item["Key"])["Body"].read().decode()
            lines += [(item["Key"], ArchivedJob.model_validate_json(line)) for line in body.splitlines()]
    return lines


def live_versions(s3: Any, key: str) -> list[str]:
    return [v["VersionId"] for v in s3.list_object_versions(Bucket=BUCKET, Prefix=key).get("Versions", [])]


# Small batches, so one tick needs several and the bounds are exercised.
POLICY = RetentionPolicy(default_days=5, outbox_days=2, inbox_days=3, batch_size=7, max_batches=50)


def test_after_n_days_each_table_holds_its_retention_and_the_archives_hold_the_rest(
    seed: Seeder, system_db: Any, store: S3RetentionStore, s3: Any, clean_db: str
) -> None:
    """Two tenants, one on the default retention (5 days) and one on its own (3 days); every simulated day
    each finishes four jobs (one of them on a document it uses every day) and retention runs at midnight."""
    default_tenant = seed.tenant(system_db, "default-retention")
    short_tenant = seed.tenant(system_db, "short-retention", retention_days=3)
    retention = {default_tenant: 5, short_tenant: 3}
    days, per_day = 12, 4
    finished: dict[UUID, tuple[UUID, datetime]] = {}
    sizes: list[dict[str, int]] = []
    clock = FakeClock(START)

    for day in range(days):
        for tenant_id in retention:
            for n in range(per_day):
                at = START + day * DAY + timedelta(hours=9, minutes=n)
                text = "the monthly statement" if n == 0 else None
                job = seed.finished_job(tenant_id, f"d{day}-{n}", at, text=text)
                finished[job] = (tenant_id, at)
        clock = FakeClock(START + (day + 1) * DAY)

        report = apply_retention(system_db, clock, store, POLICY)

        assert report.rules_failed == []
        now = clock.now()
        for tenant_id, keep in retention.items():
            oldest = query(
                clean_db,
                "SELECT min(finished_at) AS oldest FROM extraction_jobs WHERE tenant_id = %s",
                tenant_id,
            )[0]["oldest"]
            assert oldest >= now - keep * DAY, "a finished job outlived its tenant's retention"
        (outbox,) = query(clean_db, "SELECT min(published_at) AS oldest FROM outbox_events")
        assert outbox["oldest"] >= now - POLICY.outbox_days * DAY
        (inbox,) = query(clean_db, "SELECT min(received_at) AS oldest FROM execution_inbox")
        assert inbox["oldest"] >= now - POLICY.inbox_days * DAY
        sizes.append(table_counts(clean_db))

    # Steady state: once the longest retention has passed, every table keeps the same size day after day.
    steady = sizes[max(retention.values()) + 1 :]
    assert all(size == steady[0] for size in steady), sizes
    jobs_kept = per_day * sum(retention.values())
    assert steady[0] == {
        "extraction_jobs": jobs_kept,
        "job_attempts": jobs_kept,
        "extraction_results": jobs_kept,
        "webhook_deliveries": jobs_kept,
        "webhook_delivery_attempts": jobs_kept,
        # Each tenant's requested and completed events of the last two days.
        "outbox_events": 2 * POLICY.outbox_days * per_day * len(retention),
        # The last three days' inbox rows, where the job is still there (the short tenant keeps three).
        "execution_inbox": POLICY.inbox_days * per_day * len(retention),
        # Per kept job one document, but the daily statement is one document per tenant.
        "documents": jobs_kept - sum(keep - 1 for keep in retention.values()),
    }

    # The archives hold every job no longer in the database, once each, under its tenant and finish day.
    lines = archived_lines(s3)
    archived = Counter(job.job_id for _, job in lines)
    remaining = {row["job_id"] for row in query(clean_db, "SELECT job_id FROM extraction_jobs")}
    assert set(archived) | remaining == set(finished)
    assert not set(archived) & remaining
    assert max(archived.values()) == 1
    for key, job in lines:
        tenant_id, at = finished[job.job_id]
        assert key.startswith(f"{ARCHIVE_PREFIX}{tenant_id}/{at.date().isoformat()}/")
        assert job.result is not None and job.result.result["key"] == job.idempotency_key
        assert [a.attempt for a in job.attempts] == [1]
    # Document objects went with their rows; the daily statement (still in use) kept its object.
    kept = {row["s3_key"] for row in query(clean_db, "SELECT s3_key FROM documents")}
    stored = {v["Key"] for v in s3.list_object_versions(Bucket=BUCKET, Prefix="tenants/").get("Versions", [])}
    assert stored == kept
    assert query(clean_db, "SELECT count(*) AS n FROM document_object_deletions")[0]["n"] == 0


def batch_table_counts(url: str) -> tuple[int, int]:
    (row,) = query(
        url,
        "SELECT (SELECT count(*) FROM provider_batches) AS batches,"
        " (SELECT count(*) FROM provider_batch_jobs) AS lines",
    )
    return row["batches"], row["lines"]


def test_after_n_days_provider_batches_and_their_lines_hold_their_retention(
    seed: Seeder, system_db: Any, store: S3RetentionStore, s3: Any, clean_db: str
) -> None:
    """Every simulated day one provider batch carries the jobs two tenants finish that day and settles; one
    tenant keeps its jobs longer (8 days) than the deployment's 5, the other shorter (3). A batch and its
    lines go 5 days after it settled, a shorter-lived job's line with its job, and nothing is blocked by the
    lines referencing jobs."""
    long_tenant = seed.tenant(system_db, "long-retention", retention_days=8)
    short_tenant = seed.tenant(system_db, "short-retention", retention_days=3)
    days, per_day = 12, 2
    sizes: list[tuple[int, int]] = []

    for day in range(days):
        lines = []
        for tenant_id in (long_tenant, short_tenant):
            for n in range(per_day):
                at = START + day * DAY + timedelta(hours=9, minutes=n)
                lines.append((seed.finished_job(tenant_id, f"d{day}-{n}", at), tenant_id))
        seed.batch(lines, START + day * DAY + timedelta(hours=10))
        clock = FakeClock(START + (day + 1) * DAY)

        report = apply_retention(system_db, clock, store, POLICY)

        assert report.rules_failed == []
        (oldest,) = query(clean_db, "SELECT min(settled_at) AS at FROM provider_batches")
        assert oldest["at"] >= clock.now() - POLICY.default_days * DAY, "a batch outlived its retention"
        sizes.append(batch_table_counts(clean_db))

    steady = sizes[8 + 1 :]
    assert all(size == steady[0] for size in steady), sizes
    # The last five batches, with the long tenant's lines of five days and the short tenant's of three.
    assert steady[0] == (POLICY.default_days, per_day * (POLICY.default_days + 3))
    # An archived attempt still names the batch it ran in, and what the batch price saved.
    archived = [attempt for _, job in archived_lines(s3) for attempt in job.attempts]
    assert archived and all(
        a.batch_id is not None and a.discount_usd == Decimal("0.000840") for a in archived
    )


def test_an_open_batch_and_a_finished_job_with_an_unsettled_line_are_kept_until_settled(
    seed: Seeder, system_db: Any, store: S3RetentionStore, clean_db: str
) -> None:
    """A job cancelled while its line waits in a batch the provider is still running: the poller has yet to
    discard that line, so neither the job nor the batch goes, however old."""
    tenant_id = seed.tenant(system_db, "acme")
    long_ago = START - timedelta(days=400)
    cancelled = seed.finished_job(tenant_id, "cancelled", long_ago, state="CANCELLED")
    running = seed.batch([(cancelled, tenant_id)], long_ago, settled=False)

    report = apply_retention(system_db, FakeClock(START), store, POLICY)

    assert report.rules_failed == [], "kept because it is no candidate, not because a delete failed"
    assert report.deleted["extraction_jobs"] == 0
    assert table_counts(clean_db)["extraction_jobs"] == 1
    assert batch_table_counts(clean_db) == (1, 1)

    # when the poller settles the line and the batch
    with psycopg.connect(clean_db) as conn:
        conn.execute(
            "UPDATE provider_batch_jobs SET settled_at = %s, outcome = 'discarded' WHERE batch_id = %s",
            (long_ago, running),
        )
        conn.execute(
            "UPDATE provider_batches SET state = 'completed', ended_at = %s, settled_at = %s"
            " WHERE batch_id = %s",
            (long_ago, long_ago, running),
        )
    report = apply_retention(system_db, FakeClock(START), store, POLICY)

    assert report.rules_failed == []
    assert report.deleted["extraction_jobs"] == 1
    assert report.deleted["provider_batches"] == 1
    assert batch_table_counts(clean_db) == (0, 0)


def test_batch_retention_deletes_a_big_batch_in_bounded_batches_of_lines(
    seed: Seeder, system_db: Any, store: S3RetentionStore, clean_db: str
) -> None:
    """A batch's lines go at most batch_size at a time: the batch row waits for the last of them."""
    tenant_id = seed.tenant(system_db, "acme", retention_days=3650)
    jobs = [(seed.finished_job(tenant_id, f"k{n}", START), tenant_id) for n in range(12)]
    seed.batch(jobs, START)
    policy = RetentionPolicy(default_days=5, batch_size=5, max_batches=1)
    clock = FakeClock(START + 10 * DAY)

    ticks = [apply_retention(system_db, clock, store, policy) for _ in range(3)]

    assert [t.deleted["provider_batch_jobs"] for t in ticks] == [5, 5, 2]
    assert [t.deleted["provider_batches"] for t in ticks] == [0, 0, 1]
    assert batch_table_counts(clean_db) == (0, 0)
    assert table_counts(clean_db)["extraction_jobs"] == 12, "the tenant keeps its jobs for ten years"


def test_an_unfinished_job_and_a_document_still_in_use_are_never_deleted(
    seed: Seeder, system_db: Any, store: S3RetentionStore, s3: Any, clean_db: str
) -> None:
    tenant_id = seed.tenant(system_db, "acme")
    long_ago = START - timedelta(days=400)
    unfinished = {
        state: seed.unfinished_job(tenant_id, f"open-{state}", long_ago, state, text="shared invoice")
        for state in ("READY", "RUNNING", "RETRY_SCHEDULED")
    }
    done = seed.finished_job(tenant_id, "done", long_ago, text="shared invoice")
    alone = seed.finished_job(tenant_id, "alone", long_ago, text="its own invoice")
    (shared,) = query(
        clean_db,
        "SELECT s3_key, s3_version_id FROM documents WHERE document_id = %s",
        seed.documents[(tenant_id, "shared invoice")],
    )

    report = apply_retention(system_db, FakeClock(START), store, POLICY)

    assert report.deleted["extraction_jobs"] == 2
    jobs = {
        row["job_id"]: row["state"] for row in query(clean_db, "SELECT job_id, state FROM extraction_jobs")
    }
    assert jobs == {job: state for state, job in unfinished.items()}
    assert done not in jobs and alone not in jobs
    # What the unfinished jobs still need stays: attempts, PENDING deliveries, the unpublished events.
    assert query(clean_db, "SELECT count(*) AS n FROM job_attempts")[0]["n"] == 2
    assert (
        query(clean_db, "SELECT count(*) AS n FROM webhook_deliveries WHERE state = 'PENDING'")[0]["n"] == 3
    )
    unpublished = query(clean_db, "SELECT count(*) AS n FROM outbox_events WHERE published_at IS NULL")
    assert unpublished[0]["n"] == 3
    # The shared document stays with its object; the other one is gone from the table and the bucket.
    documents = query(clean_db, "SELECT document_id FROM documents")
    assert [row["document_id"] for row in documents] == [seed.documents[(tenant_id, "shared invoice")]]
    assert live_versions(s3, shared["s3_key"]) == [shared["s3_version_id"]]
    alone_key = document_key(tenant_id, canonicalize(["its own invoice"]).sha256)
    assert live_versions(s3, alone_key) == []


def test_a_document_kept_in_its_row_goes_with_the_row_and_queues_no_s3_deletion(
    seed: Seeder, system_db: Any, store: S3RetentionStore, clean_db: str
) -> None:
    tenant_id = seed.tenant(system_db, "acme")
    seed.finished_job(tenant_id, "in-row", START, text=f"{IN_ROW} invoice")
    seed.finished_job(tenant_id, "in-s3", START, text="an invoice in the bucket")

    report = apply_retention(system_db, FakeClock(START + 40 * DAY), store, POLICY)

    assert report.deleted["extraction_jobs"] == 2
    assert query(clean_db, "SELECT count(*) AS n FROM documents")[0]["n"] == 0
    assert query(clean_db, "SELECT count(*) AS n FROM document_object_deletions")[0]["n"] == 0  # done at once
    assert report.document_objects == 1  # only the one in the bucket


def test_a_crash_between_the_archive_and_the_delete_archives_again_and_loses_nothing(
    seed: Seeder, system_db: Any, store: S3RetentionStore, s3: Any, clean_db: str
) -> None:
    tenant_id = seed.tenant(system_db, "acme")
    jobs = {seed.finished_job(tenant_id, f"k{n}", START + timedelta(minutes=n)) for n in range(5)}
    clock = FakeClock(START + 10 * DAY)

    def crash(name: str) -> None:
        if name == RETENTION_AFTER_ARCHIVE:
            raise RuntimeError("killed after the archive put")

    previous = checkpoints.listen(crash)
    try:
        crashed = apply_retention(system_db, clock, store, POLICY)
    finally:
        checkpoints.listen(previous)

    assert crashed.rules_failed == ["extraction_jobs"]
    assert table_counts(clean_db)["extraction_jobs"] == 5, "nothing is deleted before the delete"
    assert {job.job_id for _, job in archived_lines(s3)} == jobs

    again = apply_retention(system_db, clock, store, POLICY)

    assert again.rules_failed == []
    assert table_counts(clean_db)["extraction_jobs"] == 0
    lines = archived_lines(s3)
    assert sorted(job.job_id for _, job in lines) == sorted(jobs), "the same batch replaced its own object"
    (key,) = {key for key, _ in lines}
    assert len(live_versions(s3, key)) == 2, "written twice: the first copy stays as a noncurrent version"


def test_an_archive_that_cannot_be_stored_deletes_nothing(
    seed: Seeder, system_db: Any, store: S3RetentionStore, clean_db: str
) -> None:
    tenant_id = seed.tenant(system_db, "acme")
    seed.finished_job(tenant_id, "k", START)

    class Unreachable:
        def put_archive(self, key: str, body: bytes) -> None:
            raise ConnectionError("S3 is unreachable")

        def delete_versions(self, objects: list[ObjectVersion]) -> dict[ObjectVersion, str]:
            raise ConnectionError("S3 is unreachable")

    report = apply_retention(system_db, FakeClock(START + 40 * DAY), Unreachable(), POLICY)

    assert report.rules_failed == ["extraction_jobs"]
    assert report.deleted["outbox_events"] == 2, "rules that need no S3 still ran"
    assert table_counts(clean_db)["extraction_jobs"] == 1


def test_a_job_retried_between_its_archive_and_its_delete_is_kept(
    seed: Seeder, system_db: Any, store: S3RetentionStore, clean_db: str
) -> None:
    tenant_id = seed.tenant(system_db, "acme")
    job_id = seed.finished_job(tenant_id, "k", START, state="FAILED_TERMINAL")

    def support_retries(name: str) -> None:
        # What `tollgate jobs retry` does to a failed job: it runs again, under a new state_version.
        with psycopg.connect(clean_db) as conn:
            conn.execute(
                "UPDATE extraction_jobs SET state = 'READY', finished_at = NULL,"
                " state_version = state_version + 1 WHERE job_id = %s",
                (job_id,),
            )

    previous = checkpoints.listen(support_retries)
    try:
        report = apply_retention(system_db, FakeClock(START + 40 * DAY), store, POLICY)
    finally:
        checkpoints.listen(previous)

    assert report.archived_jobs == 1 and report.deleted["extraction_jobs"] == 0
    assert (
        query(clean_db, "SELECT state FROM extraction_jobs WHERE job_id = %s", job_id)[0]["state"] == "READY"
    )


def test_a_document_object_s3_refuses_to_delete_is_tried_again_later(
    seed: Seeder, system_db: Any, store: S3RetentionStore, s3: Any, clean_db: str
) -> None:
    tenant_id = seed.tenant(system_db, "acme")
    seed.finished_job(tenant_id, "k", START, text="an invoice")
    key = document_key(tenant_id, canonicalize(["an invoice"]).sha256)

    class Refusing(S3RetentionStore):
        def delete_versions(self, objects: Any) -> dict[ObjectVersion, str]:
            return dict.fromkeys(objects, "AccessDenied: not now")

    clock = FakeClock(START + 40 * DAY)
    apply_retention(system_db, clock, Refusing(s3, BUCKET), POLICY)

    (queued,) = query(clean_db, "SELECT attempts, last_error FROM document_object_deletions")
    assert queued == {"attempts": 1, "last_error": "AccessDenied: not now"}
    assert len(live_versions(s3, key)) == 1

    apply_retention(system_db, clock, store, POLICY)
    assert len(live_versions(s3, key)) == 1, "postponed: not tried again within the same quarter hour"

    clock.advance(16 * 60)
    report = apply_retention(system_db, clock, store, POLICY)

    assert report.document_objects == 1
    assert live_versions(s3, key) == []
    assert query(clean_db, "SELECT count(*) AS n FROM document_object_deletions")[0]["n"] == 0


def test_document_deletion_waits_for_an_acceptance_of_that_tenant_in_progress(
    seed: Seeder, system_db: Any, store: S3RetentionStore, clean_db: str
) -> None:
    """An acceptance that found the document by its digest holds the tenant's acceptance lock until its job
    commits; retention deletes the document only after that, and then sees the new job using it."""
    tenant_id = seed.tenant(system_db, "acme")
    seed.finished_job(tenant_id, "old", START, text="the same invoice")
    document_id = seed.documents[(tenant_id, "the same invoice")]
    accepting = psycopg.connect(clean_db)
    # The very lock acceptance takes first in its transaction.
    accepting.execute(load_queries().lock_tenant_acceptance, {"tenant_id": tenant_id})
    done = threading.Event()

    def run() -> None:
        apply_retention(system_db, FakeClock(START + 40 * DAY), store, POLICY)
        done.set()

    worker = threading.Thread(target=run)
    worker.start()
    try:
        # Waiting on a condition: retention is blocked on the advisory lock.
        with psycopg.connect(clean_db) as probe:
            for _ in range(600):
                waiting = probe.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                    " AND wait_event = 'advisory' AND datname = current_database()"
                ).fetchone()
                if waiting and waiting[0]:
                    break
                probe.execute("SELECT pg_sleep(0.05)")
            else:
                pytest.fail("retention never waited for the tenant's acceptance lock")
        assert not done.is_set()
        # The acceptance commits a new job that uses the same document.
        seed._job(
            accepting,
            uuid4(),
            tenant_id,
            "new",
            document_id,
            START + 40 * DAY,
            state="READY",
            finished_at=None,
        )
        accepting.commit()
    finally:
        accepting.close()
        worker.join(timeout=60)

    assert done.is_set()
    assert [row["document_id"] for row in query(clean_db, "SELECT document_id FROM documents")] == [
        document_id
    ]


def test_a_replay_of_an_expired_idempotency_key_makes_a_new_job(
    tenant: Any, system_db: Any, clean_db: str, local_aws: Any
) -> None:
    body = invoice_request(text="ACME GmbH\nInvoice 7\nTotal EUR 10.00")
    first = tenant.client.submit(body, "invoice-7")
    assert first.status == 202
    job_id = first.json["job_id"]
    with psycopg.connect(clean_db) as conn:
        conn.execute(
            "UPDATE extraction_jobs SET state = 'CANCELLED', finished_at = now() - interval '31 days'"
            " WHERE job_id = %s",
            (job_id,),
        )
    replay = tenant.client.submit(body, "invoice-7")
    assert (replay.status, replay.json["job_id"]) == (200, job_id), "within retention: the same job"

    clock = SystemClock()
    deps = SchedulerDeps(
        system_db,
        clock,
        new_id,
        RecordedMetrics(),
        RetryPolicy(),
        lambda low, high: high,
        retention_store=S3RetentionStore(boto3.client("s3"), LOCAL_BUCKET),
    )
    report = run_scheduler(deps)

    assert report.retention["extraction_jobs"] == 1 and report.retention["archived_jobs"] == 1
    assert tenant.client.request("GET", f"/extraction-jobs/{job_id}").status == 404
    after = tenant.client.submit(body, "invoice-7")
    assert after.status == 202
    assert after.header("Idempotent-Replayed") != "true"
    assert after.json["job_id"] != job_id
    assert after.json["state"] == "READY"


def test_a_tick_deletes_at_most_its_batches_and_leaves_the_rest_to_the_next(
    seed: Seeder, system_db: Any, store: S3RetentionStore, clean_db: str
) -> None:
    tenant_id = seed.tenant(system_db, "acme")
    for n in range(25):
        seed.finished_job(tenant_id, f"k{n}", START + timedelta(minutes=n))
    policy = RetentionPolicy(default_days=5, batch_size=5, max_batches=2)
    clock = FakeClock(START + 10 * DAY)

    deleted = [apply_retention(system_db, clock, store, policy).deleted["extraction_jobs"] for _ in range(3)]

    assert deleted == [10, 10, 5]


def test_no_transaction_is_open_while_an_archive_is_stored(
    seed: Seeder, system_db: Any, s3: Any, clean_db: str
) -> None:
    tenant_id = seed.tenant(system_db, "acme")
    seed.finished_job(tenant_id, "k", START)
    seen: list[int] = []

    class Watching(S3RetentionStore):
        def put_archive(self, key: str, body: bytes) -> None:
            with psycopg.connect(clean_db) as probe:
                (open_transactions,) = probe.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                    " AND state LIKE 'idle in transaction%%' AND pid <> pg_backend_pid()"
                ).fetchone() or (0,)
            seen.append(open_transactions)
            super().put_archive(key, body)

    apply_retention(system_db, FakeClock(START + 40 * DAY), Watching(s3, BUCKET), POLICY)

    assert seen == [0]


# Each batch's scan, the parameters it runs with, and the index (migration 0011, or 0014 for the jobs: it
# leaves out jobs waiting for a reviewer) it must walk.
BATCH_SCANS = {
    "expired_jobs": ({"now": START, "default_days": 30, "limit": 500}, "extraction_jobs_retention_decided"),
    "delete_expired_deliveries": (
        {"now": START, "default_days": 30, "limit": 500},
        "webhook_deliveries_retention",
    ),
    "delete_published_outbox_events": ({"before": START, "limit": 500}, "outbox_events_retention"),
    "delete_old_inbox_rows": ({"before": START, "limit": 500}, "execution_inbox_retention"),
    "delete_old_quarantine_rows": ({"before": START, "limit": 500}, "inbox_quarantine_retention"),
    "delete_old_state_events": ({"before": START, "limit": 500}, "job_state_events_retention"),
    "delete_job_inbox_rows": ({"job_ids": [uuid4()]}, "execution_inbox_by_job"),
    "delete_job_batch_members": ({"job_ids": [uuid4()]}, "provider_batch_jobs_by_job"),
    "delete_settled_batch_members": ({"before": START, "limit": 500}, "provider_batches_settled"),
    "delete_settled_provider_batches": ({"before": START, "limit": 500}, "provider_batches_settled"),
    "delete_unreferenced_documents": (
        {"document_ids": [uuid4()], "now": START},
        "extraction_jobs_by_document",
    ),
    "due_document_object_deletions": ({"now": START, "limit": 500}, "document_object_deletions_due"),
}


def seed_retention_shape(seed: Seeder, system_db: Any, url: str) -> None:
    """A fixed shape of what retention walks, so each scan is planned on the same statistics every run:
    jobs finished over two months (the older half past a 30-day retention), a few unfinished, a settled
    batch, and rows of the tables jobs do not fill (quarantine, object deletions, the replay log)."""
    tenant_id = seed.tenant(system_db, "acme")
    jobs = [
        seed.finished_job(tenant_id, f"k-{day}", START - day * DAY, text=f"{IN_ROW} invoice {day}")
        for day in range(60)
    ]
    for number, state in enumerate(("READY", "RUNNING", "RETRY_SCHEDULED")):
        seed.unfinished_job(tenant_id, f"u-{number}", START, state, text=f"{IN_ROW} unfinished {number}")
    seed.batch([(job_id, tenant_id) for job_id in jobs[40:50]], START - 45 * DAY)
    q = plan_queries()
    with psycopg.connect(url) as conn:
        conn.execute(q.seed_plan_quarantine, {"before": START, "count": 200})
        conn.execute(q.seed_plan_object_deletions, {"tenant_id": tenant_id, "before": START, "count": 200})
        # Another tenant's log: the jobs above may have numbered events of their own tenant already.
        other = seed.tenant(system_db, "other")
        conn.execute(q.seed_plan_state_events, {"tenant_id": other, "since": START - 60 * DAY, "count": 2000})


@pytest.mark.parametrize("name", BATCH_SCANS)
def test_each_retention_batch_reads_through_its_index_not_a_table_scan(
    name: str, seed: Seeder, system_db: Any, clean_db: str
) -> None:
    """With sequential scans priced out, the plan must walk the batch's own index: another index would read
    more than the batch (all of a tenant's jobs, say), a Seq Scan would mean none serves it. Only tenants
    are walked whole, one probe each."""
    seed_retention_shape(seed, system_db, clean_db)
    params, index = BATCH_SCANS[name]
    plan = query_plan(clean_db, getattr(load_queries(), name), params)

    scanned = {
        line.split("Seq Scan on ")[1].split()[0] for line in plan.splitlines() if "Seq Scan on" in line
    }
    assert scanned <= {"tenants"}, plan
    assert f" {index} " in plan, plan


def test_an_operator_sets_and_resets_a_tenants_retention(
    system_db: Any, clean_db: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    tenant_id = create_tenant(system_db, "acme", new_id).tenant_id
    monkeypatch.setenv("DATABASE_URL", clean_db)

    def set_retention(days: str) -> Any:
        return CliRunner().invoke(
            app, ["tenants", "set-retention", "acme", days, "--data-dir", str(tmp_path)]
        )

    def stored() -> Any:
        return query(clean_db, "SELECT retention_days FROM tenants WHERE tenant_id = %s", tenant_id)[0][
            "retention_days"
        ]

    assert set_retention("90").exit_code == 0
    assert stored() == 90
    assert set_retention("default").exit_code == 0
    assert stored() is None
    for refused in ("0", "3651", "forever"):
        assert set_retention(refused).exit_code == 2, refused
    assert stored() is None


def test_the_schedulers_wiring_applies_the_settings_retention(system_db: Any, clean_db: str) -> None:
    settings = SchedulerSettings(
        database_url=clean_db, documents_bucket=BUCKET, retention_default_days=9, retention_batch_size=50
    )

    deps = build_scheduler(settings, RecordedMetrics(), db=system_db)

    assert isinstance(deps.retention_store, S3RetentionStore)
    assert deps.retention == RetentionPolicy(
        default_days=9, outbox_days=7, inbox_days=21, batch_size=50, max_batches=10
    )
