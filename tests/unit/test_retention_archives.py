"""Archive objects: one per tenant and finish day, named by their content, one ArchivedJob per line."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID, uuid4

from tollgate.scheduler.retention import ARCHIVE_PREFIX, ArchivedJob, archive_key, build_archives

FINISHED = datetime(2026, 3, 1, 23, 30, tzinfo=UTC)


def job(
    tenant_id: UUID, finished_at: datetime = FINISHED, state_version: int = 3, **changes: Any
) -> ArchivedJob:
    fields: dict[str, Any] = {
        "job_id": uuid4(),
        "tenant_id": tenant_id,
        "idempotency_key": "invoice-1",
        "request_hash": "0" * 64,
        "job_type": "invoice_extraction",
        "schema_version": "invoice.v1",
        "model_policy": "auto",
        "options": {},
        "metadata": {"filename": "a.pdf"},
        "priority": 5,
        "state": "SUCCEEDED",
        "state_version": state_version,
        "attempt": 1,
        "max_attempts": 5,
        "estimated_tokens": 2000,
        "trace_context": None,
        "last_error": None,
        "created_at": finished_at - timedelta(minutes=5),
        "deadline_at": finished_at + timedelta(hours=1),
        "finished_at": finished_at,
        "document": {"document_id": uuid4(), "sha256": "a" * 64, "size_bytes": 10, "page_count": 1},
        "result": None,
        "attempts": [],
    }
    return ArchivedJob.model_validate({**fields, **changes})


def test_an_archive_key_names_its_jobs_versions_not_their_order() -> None:
    tenant_id = uuid4()
    jobs = [job(tenant_id), job(tenant_id)]
    day = FINISHED.date()

    key = archive_key(tenant_id, day, jobs)

    assert key == archive_key(tenant_id, day, list(reversed(jobs)))
    assert key.startswith(f"{ARCHIVE_PREFIX}{tenant_id}/2026-03-01/") and key.endswith(".jsonl")
    retried = [jobs[0], jobs[1].model_copy(update={"state_version": 7})]
    assert archive_key(tenant_id, day, retried) != key, "a later version of a job is another archive"


def test_archives_are_one_object_per_tenant_and_utc_finish_day_in_finish_order() -> None:
    acme, globex = uuid4(), uuid4()
    late = job(acme, FINISHED)
    early = job(acme, FINISHED - timedelta(hours=2))
    next_day = job(acme, FINISHED + timedelta(hours=1))  # 00:30 UTC the next day
    other = job(globex)

    archives = build_archives([late, next_day, other, early])

    groups = {tuple(j.job_id for j in archive.jobs) for archive in archives}
    assert groups == {(next_day.job_id,), (other.job_id,), (early.job_id, late.job_id)}
    (acme_day,) = [a for a in archives if len(a.jobs) == 2]
    assert f"/{acme}/2026-03-01/" in acme_day.key
    lines = acme_day.body.decode().splitlines()
    assert [ArchivedJob.model_validate_json(line) for line in lines] == [early, late]


def test_each_line_says_its_format() -> None:
    (archive,) = build_archives([job(uuid4())])

    assert b'"archive_format":"tollgate.archived-job.v1"' in archive.body
    assert archive.body.endswith(b"\n")
