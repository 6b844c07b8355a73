"""Retention: the scheduler deletes what jobs leave behind once its rule says so (DESIGN §4, "Storage is
bounded"), in bounded batches of short transactions, and archives each finished job to S3 first.

- finished jobs, with their result, a reviewer's decision, attempts and inbox rows: archived, then deleted,
  after the tenant's retention (counted from the finish; a decided review's from the decision). A job
  waiting for a reviewer is kept until it is decided;
- documents: with the last job that uses them, their S3 object version after them;
- settled webhook deliveries and their attempts: after the tenant's retention since their last change;
- published outbox events: ``outbox_days`` after publishing;
- execution inbox and quarantine rows: ``inbox_days`` after receipt;
- live notifications' job state events: ``state_event_hours`` after they happened (the replay window and
  some margin; a cursor older than what is kept gets a resync);
- provider batches and their lines: ``default_days`` (the deployment's retention of attempts) after the batch
  settled, lines first; a deleted job's lines go with it. A tenant's own retention does not keep them: they
  are the system's record of its batches, and each attempt keeps its batch id and discount.

Unfinished jobs, unpublished events, PENDING deliveries, unsettled batches and jobs with an unsettled line
in a batch are never candidates. ``support_audit`` is kept:
it grows with people's actions, not with jobs, and the trail of who changed what outlives the data.

An archive is one JSON Lines object per tenant, finish day and batch
(``archive/results/<tenant>/<yyyy-mm-dd>/<batch>.jsonl``), one ``ArchivedJob`` per line. Rows are deleted
only after every object of their batch is stored. A crash (or a failed delete) in between archives the same
jobs again later: under the same key when the batch is the same, so the object is replaced, and under
another key when the batch differs. Readers keep one line per ``(job_id, state_version)``.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Literal, LiteralString, Protocol
from uuid import UUID

from aws_lambda_powertools import Logger
from pydantic import BaseModel, ConfigDict

from tollgate.core import checkpoints
from tollgate.core.checkpoints import RETENTION_AFTER_ARCHIVE
from tollgate.core.clock import Clock
from tollgate.db import Database
from tollgate.db.database import Conn

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

logger = Logger(service="tollgate-scheduler", child=True)

ARCHIVE_PREFIX = "archive/results/"
ARCHIVE_FORMAT: Literal["tollgate.archived-job.v1"] = "tollgate.archived-job.v1"
# S3's DeleteObjects takes at most this many versions per call.
S3_DELETE_LIMIT = 1000
# A document object S3 would not delete is tried again this much later, behind the rest of the queue.
OBJECT_DELETE_RETRY = timedelta(minutes=15)

ObjectVersion = tuple[str, str]


@dataclass(frozen=True)
class RetentionPolicy:
    default_days: int = 30
    outbox_days: int = 7
    inbox_days: int = 21
    state_event_hours: int = 48
    batch_size: int = 500
    max_batches: int = 10


class RetentionStore(Protocol):
    """Where archives go and document objects leave: the documents bucket."""

    def put_archive(self, key: str, body: bytes) -> None: ...

    def delete_versions(self, objects: Sequence[ObjectVersion]) -> dict[ObjectVersion, str]:
        """Deletes each object version; returns the ones S3 did not delete, with its reason."""


class S3RetentionStore:
    def __init__(self, client: S3Client, bucket: str) -> None:
        self._s3 = client
        self._bucket = bucket

    def put_archive(self, key: str, body: bytes) -> None:
        self._s3.put_object(
            Bucket=self._bucket,
            Key=key,
            Body=body,
            ContentType="application/x-ndjson",
            ChecksumAlgorithm="SHA256",
        )

    def delete_versions(self, objects: Sequence[ObjectVersion]) -> dict[ObjectVersion, str]:
        failed: dict[ObjectVersion, str] = {}
        for start in range(0, len(objects), S3_DELETE_LIMIT):
            chunk = objects[start : start + S3_DELETE_LIMIT]
            # A version id names exactly the bytes a document row pointed at: a newer upload of the same
            # content (a later job after this row went) is another version and stays.
            response = self._s3.delete_objects(
                Bucket=self._bucket,
                Delete={
                    "Objects": [{"Key": key, "VersionId": version} for key, version in chunk],
                    "Quiet": True,
                },
            )
            for error in response.get("Errors", []):
                version = (error.get("Key", ""), error.get("VersionId", ""))
                failed[version] = f"{error.get('Code', 'Error')}: {error.get('Message', '')}"
        return failed


class ArchivedDocument(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    document_id: UUID
    sha256: str
    size_bytes: int
    page_count: int


class ArchivedResult(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    attempt: int
    policy_version: str
    result: dict[str, Any]
    review_reasons: list[Any]
    created_at: datetime
    # Where the policy found each value (validation.v3 and later); absent for earlier policies' results.
    located_evidence: list[Any] | None = None


class ArchivedReview(BaseModel):
    """A reviewer's decision, with the accepted result (version 2) of an approval or a correction."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    decision: str
    note: str
    reviewer: str
    reviewer_key_id: UUID | None
    state_version: int
    reasons: list[Any]
    review_requested_at: datetime
    decided_at: datetime
    result_version: int | None
    result: dict[str, Any] | None
    policy_version: str | None
    corrections: dict[str, Any] | None
    located_evidence: list[Any] | None = None


class ArchivedAttempt(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    attempt: int
    fence: int
    worker_id: str
    started_at: datetime
    finished_at: datetime | None
    outcome: str | None
    model: str | None
    input_tokens: int | None
    output_tokens: int | None
    cost_usd: Decimal | None
    latency_ms: int | None
    provider_request_id: str | None
    error: dict[str, Any] | None
    # An attempt made through a provider batch: the batch, and what its price saved against the list price.
    batch_id: UUID | None = None
    discount_usd: Decimal | None = None


class ArchivedJob(BaseModel):
    """One line of an archive: a finished job as it was when deleted, with its result and attempts."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    archive_format: Literal["tollgate.archived-job.v1"] = ARCHIVE_FORMAT
    job_id: UUID
    tenant_id: UUID
    idempotency_key: str
    request_hash: str
    job_type: str
    schema_version: str
    model_policy: str
    options: dict[str, Any]
    metadata: dict[str, Any]
    priority: int
    state: str
    state_version: int
    attempt: int
    max_attempts: int
    estimated_tokens: int
    trace_context: str | None
    last_error: dict[str, Any] | None
    created_at: datetime
    deadline_at: datetime
    finished_at: datetime
    document: ArchivedDocument
    result: ArchivedResult | None
    review: ArchivedReview | None = None
    attempts: list[ArchivedAttempt]

    @classmethod
    def from_rows(cls, job: Mapping[str, Any], attempts: Iterable[Mapping[str, Any]]) -> ArchivedJob:
        result = None
        if job["result_attempt"] is not None:
            result = ArchivedResult(
                attempt=job["result_attempt"],
                policy_version=job["policy_version"],
                result=job["result"],
                review_reasons=job["review_reasons"],
                created_at=job["result_created_at"],
                located_evidence=job["located_evidence"],
            )
        return cls(
            **{name: job[name] for name in _JOB_COLUMNS},
            document=ArchivedDocument(
                document_id=job["document_id"],
                sha256=job["content_sha256"],
                size_bytes=job["size_bytes"],
                page_count=job["page_count"],
            ),
            result=result,
            review=ArchivedReview.model_validate(job["review"]) if job.get("review") else None,
            attempts=[ArchivedAttempt(**{k: v for k, v in a.items() if k != "job_id"}) for a in attempts],
        )


_JOB_COLUMNS = tuple(
    name
    for name in ArchivedJob.model_fields
    if name not in {"archive_format", "document", "result", "review", "attempts"}
)


@dataclass(frozen=True)
class Archive:
    key: str
    body: bytes
    jobs: tuple[ArchivedJob, ...]


def archive_key(tenant_id: UUID, day: date, jobs: Iterable[ArchivedJob]) -> str:
    """Named by its content: the same jobs in the same versions always land under the same key."""
    versions = sorted(f"{job.job_id}:{job.state_version}" for job in jobs)
    batch = hashlib.sha256("\n".join(versions).encode()).hexdigest()[:32]
    return f"{ARCHIVE_PREFIX}{tenant_id}/{day.isoformat()}/{batch}.jsonl"


def build_archives(jobs: Iterable[ArchivedJob]) -> list[Archive]:
    """One object per tenant and (UTC) finish day, lines in finish order."""
    groups: dict[tuple[UUID, date], list[ArchivedJob]] = defaultdict(list)
    for job in jobs:
        groups[(job.tenant_id, job.finished_at.date())].append(job)
    archives = []
    for (tenant_id, day), members in sorted(groups.items(), key=lambda item: (str(item[0][0]), item[0][1])):
        members.sort(key=lambda job: (job.finished_at, str(job.job_id)))
        body = "".join(job.model_dump_json() + "\n" for job in members).encode("utf-8")
        archives.append(Archive(archive_key(tenant_id, day, members), body, tuple(members)))
    return archives


@dataclass
class RetentionReport:
    deleted: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    archived_jobs: int = 0
    archive_objects: int = 0
    document_objects: int = 0
    rules_failed: list[str] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        """Flat numbers for the tick's report and log line: rows deleted per table, then the S3 side."""
        return {
            **dict(sorted(self.deleted.items())),
            "archived_jobs": self.archived_jobs,
            "archive_objects": self.archive_objects,
            "document_objects_deleted": self.document_objects,
            "rules_failed": len(self.rules_failed),
        }


@dataclass(frozen=True)
class _Run:
    db: Database
    clock: Clock
    store: RetentionStore
    policy: RetentionPolicy
    report: RetentionReport


def apply_retention(
    db: Database, clock: Clock, store: RetentionStore, policy: RetentionPolicy
) -> RetentionReport:
    """Every rule, each in at most ``policy.max_batches`` batches; a rule stops early once a batch comes back
    short. A rule that fails (S3 unreachable, say) is logged and left for the next tick; the others run."""
    run = _Run(db, clock, store, policy, RetentionReport())
    rules: tuple[tuple[str, Callable[[_Run], int]], ...] = (
        ("outbox_events", _delete_published_outbox_events),
        ("execution_inbox", _delete_old_inbox_rows),
        ("inbox_quarantine", _delete_old_quarantine_rows),
        ("job_state_events", _delete_old_state_events),
        ("webhook_deliveries", _delete_expired_deliveries),
        ("provider_batch_jobs", _delete_settled_batch_members),
        ("provider_batches", _delete_settled_provider_batches),
        ("extraction_jobs", _archive_and_delete_jobs),
        ("document_objects", _delete_document_objects),
    )
    for name, batch in rules:
        try:
            for _ in range(policy.max_batches):
                if batch(run) < policy.batch_size:
                    break
        except Exception:
            run.report.rules_failed.append(name)
            logger.exception("retention rule failed; the next tick tries again", extra={"rule": name})
    return run.report


def _cutoff(run: _Run, days: int) -> datetime:
    return run.clock.now() - timedelta(days=days)


def _count(conn: Conn, query: LiteralString, params: Mapping[str, Any]) -> int:
    row = conn.execute(query, params).fetchone()
    assert row is not None
    return int(row["deleted"])


def _delete_published_outbox_events(run: _Run) -> int:
    params = {"before": _cutoff(run, run.policy.outbox_days), "limit": run.policy.batch_size}
    with run.db.transaction() as conn:
        deleted = _count(conn, run.db.q.delete_published_outbox_events, params)
    run.report.deleted["outbox_events"] += deleted
    return deleted


def _delete_old_inbox_rows(run: _Run) -> int:
    params = {"before": _cutoff(run, run.policy.inbox_days), "limit": run.policy.batch_size}
    with run.db.transaction() as conn:
        deleted = _count(conn, run.db.q.delete_old_inbox_rows, params)
    run.report.deleted["execution_inbox"] += deleted
    return deleted


def _delete_old_quarantine_rows(run: _Run) -> int:
    params = {"before": _cutoff(run, run.policy.inbox_days), "limit": run.policy.batch_size}
    with run.db.transaction() as conn:
        deleted = _count(conn, run.db.q.delete_old_quarantine_rows, params)
    run.report.deleted["inbox_quarantine"] += deleted
    return deleted


def _delete_old_state_events(run: _Run) -> int:
    params = {
        "before": run.clock.now() - timedelta(hours=run.policy.state_event_hours),
        "limit": run.policy.batch_size,
    }
    with run.db.transaction() as conn:
        deleted = _count(conn, run.db.q.delete_old_state_events, params)
    run.report.deleted["job_state_events"] += deleted
    return deleted


def _delete_settled_batch_members(run: _Run) -> int:
    params = {"before": _cutoff(run, run.policy.default_days), "limit": run.policy.batch_size}
    with run.db.transaction() as conn:
        deleted = _count(conn, run.db.q.delete_settled_batch_members, params)
    run.report.deleted["provider_batch_jobs"] += deleted
    return deleted


def _delete_settled_provider_batches(run: _Run) -> int:
    params = {"before": _cutoff(run, run.policy.default_days), "limit": run.policy.batch_size}
    with run.db.transaction() as conn:
        deleted = _count(conn, run.db.q.delete_settled_provider_batches, params)
    run.report.deleted["provider_batches"] += deleted
    return deleted


def _delete_expired_deliveries(run: _Run) -> int:
    params = {
        "now": run.clock.now(),
        "default_days": run.policy.default_days,
        "limit": run.policy.batch_size,
    }
    with run.db.transaction() as conn:
        row = conn.execute(run.db.q.delete_expired_deliveries, params).fetchone()
    assert row is not None
    run.report.deleted["webhook_deliveries"] += row["deliveries"]
    run.report.deleted["webhook_delivery_attempts"] += row["attempts"]
    deliveries: int = row["deliveries"]
    return deliveries


def _archive_and_delete_jobs(run: _Run) -> int:
    """Read a batch (one short transaction), store its archives (no transaction open), then delete exactly
    what was archived (a second short transaction). Returns the batch's size."""
    q = run.db.q
    params = {
        "now": run.clock.now(),
        "default_days": run.policy.default_days,
        "limit": run.policy.batch_size,
    }
    with run.db.transaction() as conn:
        rows = conn.execute(q.expired_jobs, params).fetchall()
        if not rows:
            return 0
        attempts = conn.execute(q.attempts_of_jobs, {"job_ids": [row["job_id"] for row in rows]}).fetchall()
    attempts_by_job: dict[UUID, list[Mapping[str, Any]]] = defaultdict(list)
    for attempt in attempts:
        attempts_by_job[attempt["job_id"]].append(attempt)
    jobs = [ArchivedJob.from_rows(row, attempts_by_job[row["job_id"]]) for row in rows]

    archives = build_archives(jobs)
    for archive in archives:
        run.store.put_archive(archive.key, archive.body)
    run.report.archive_objects += len(archives)
    run.report.archived_jobs += len(jobs)
    # Archived, not yet deleted: a crash here archives these jobs again on a later tick.
    checkpoints.reached(RETENTION_AFTER_ARCHIVE)
    _delete_archived_jobs(run, jobs)
    return len(rows)


def _delete_archived_jobs(run: _Run, jobs: Sequence[ArchivedJob]) -> None:
    q, deleted = run.db.q, run.report.deleted
    with run.db.transaction() as conn:
        locked = conn.execute(
            q.lock_archived_jobs,
            {
                "job_ids": [job.job_id for job in jobs],
                "state_versions": [job.state_version for job in jobs],
            },
        ).fetchall()
        if not locked:
            return
        ids = {"job_ids": [row["job_id"] for row in locked]}
        # Children first: each references its job.
        deleted["job_attempts"] += conn.execute(q.delete_job_attempts, ids).rowcount
        deleted["provider_batch_jobs"] += conn.execute(q.delete_job_batch_members, ids).rowcount
        deleted["extraction_results"] += conn.execute(q.delete_job_results, ids).rowcount
        deleted["execution_inbox"] += conn.execute(q.delete_job_inbox_rows, ids).rowcount
        deleted["extraction_jobs"] += conn.execute(q.delete_finished_jobs, ids).rowcount
        # Sorted, so retention runs take tenants' acceptance locks in one order; acceptance takes one only.
        for tenant_id in sorted({row["tenant_id"] for row in locked}, key=str):
            conn.execute(q.lock_tenant_acceptance, {"tenant_id": tenant_id})
        deleted["documents"] += _count(
            conn,
            q.delete_unreferenced_documents,
            {"document_ids": list({row["document_id"] for row in locked}), "now": run.clock.now()},
        )


def _delete_document_objects(run: _Run) -> int:
    q, now = run.db.q, run.clock.now()
    limit = min(run.policy.batch_size, S3_DELETE_LIMIT)
    with run.db.transaction() as conn:
        due = conn.execute(q.due_document_object_deletions, {"now": now, "limit": limit}).fetchall()
    if not due:
        return 0
    objects = [(row["s3_key"], row["s3_version_id"]) for row in due]
    failed = run.store.delete_versions(objects)
    done = [version for version in objects if version not in failed]
    with run.db.transaction() as conn:
        if done:
            conn.execute(
                q.forget_document_object_deletions,
                {"s3_keys": [key for key, _ in done], "s3_version_ids": [version for _, version in done]},
            )
        for (key, version), error in failed.items():
            conn.execute(
                q.postpone_document_object_deletion,
                {
                    "s3_key": key,
                    "s3_version_id": version,
                    "error": error,
                    "retry_at": now + OBJECT_DELETE_RETRY,
                },
            )
    for (key, version), error in failed.items():
        logger.warning(
            "S3 did not delete a document object; retried later",
            extra={"s3_key": key, "version_id": version, "error": error},
        )
    run.report.document_objects += len(done)
    return len(due)
