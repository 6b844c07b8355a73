"""Acceptance use cases: accept_job, get_job, list_jobs, get_job_result, list_job_attempts, cancel_job.

accept_job writes the job and its ``extraction.requested.v1`` outbox event in one transaction, after the
idempotency lookup and the admission checks, all under a per-tenant transaction lock. A replay of a
committed job is answered before the lock is taken.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any
from uuid import UUID

from psycopg.types.json import Jsonb

from tollgate.accept.models import (
    Accepted,
    AttemptList,
    AttemptView,
    CreateJobRequest,
    DocumentView,
    JobLinks,
    JobPage,
    JobResultView,
    JobUsage,
    JobView,
    ResultReview,
)
from tollgate.core.clock import Clock, IdFactory, new_id
from tollgate.core.documents import (
    DOCUMENT_FORMAT,
    CanonicalDocument,
    DocumentStore,
    InlineDocument,
    document_from_inline,
    document_from_reference,
    document_key,
)
from tollgate.core.errors import (
    IdempotencyConflict,
    InvalidRequest,
    InvalidState,
    NotFound,
    SpendBudgetExhausted,
    SystemOverloaded,
    TenantOverQuota,
    Unauthorized,
    ValidationFailed,
)
from tollgate.core.job_states import CANCELLABLE_STATES, JobState, checked_transition
from tollgate.db import Database
from tollgate.db.database import Conn
from tollgate.events import ExtractionCancelled, ExtractionRequested, outbox_row
from tollgate.outbox.nudge import NoNudge, Nudger
from tollgate.outbox.outcomes import insert_outcome_event
from tollgate.usage.spend import MonthSpend, estimated_cost, month_of, seconds_until_next_month

# Instructions, schema and delimiters around the OCR text, in tokens; the text itself is ~4 chars a token.
PROMPT_OVERHEAD_TOKENS = 800
CHARS_PER_TOKEN = 4


@dataclass(frozen=True)
class AcceptanceLimits:
    """What acceptance enforces; wiring fills it from the API's settings (``acceptance_limits``)."""

    default_deadline_seconds: int
    max_deadline_seconds: int
    max_document_bytes: int
    document_row_max_bytes: int
    max_output_tokens: int
    default_max_attempts: int
    tenant_max_pending_jobs: int
    tenant_max_pending_bytes: int
    tenant_max_pending_tokens: int
    system_max_backlog: int
    admission_retry_after_seconds: int
    # USD per million input and output tokens per model, the worker's table; a job's spend estimate is its
    # token estimate at the dearest of them.
    model_prices: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    system_monthly_budget_usd: float | None = None


@dataclass(frozen=True)
class AcceptanceDeps:
    db: Database
    documents: DocumentStore
    limits: AcceptanceLimits
    clock: Clock
    new_id: IdFactory
    nudger: Nudger = field(default_factory=NoNudge)


def request_hash(request: CreateJobRequest, document: CanonicalDocument) -> str:
    """Identity of a request: everything that changes the result, nothing that does not.

    Priority, service tier, deadline and metadata (a filename, say) are left out: they say when and where
    the job runs, not what its result is; defaults are written out, so sending a
    default explicitly is the same request as leaving it out.
    """
    identity = {
        "job_type": request.job_type,
        "document": {"format": DOCUMENT_FORMAT, "sha256": document.sha256},
        "schema_version": request.schema_version,
        "model_policy": request.model_policy.value,
        "options": request.options.model_dump(mode="json"),
    }
    canonical = json.dumps(identity, sort_keys=True, separators=(",", ":")).encode("utf-8")
    return hashlib.sha256(canonical).hexdigest()


def estimate_tokens(document: CanonicalDocument, max_output_tokens: int) -> int:
    return PROMPT_OVERHEAD_TOKENS + math.ceil(document.char_count / CHARS_PER_TOKEN) + max_output_tokens


def accept_job(
    deps: AcceptanceDeps,
    tenant_id: UUID,
    idempotency_key: str,
    request: CreateJobRequest,
    trace_context: str | None = None,
) -> Accepted:
    settings = deps.limits
    deadline_seconds = request.deadline_seconds or settings.default_deadline_seconds
    if deadline_seconds > settings.max_deadline_seconds:
        raise ValidationFailed(
            f"deadline_seconds must be at most {settings.max_deadline_seconds}",
            errors=[{"loc": ["body", "deadline_seconds"], "msg": "too large"}],
        )
    # Reading a referenced object writes nothing, so it happens before the transaction opens.
    if isinstance(request.document, InlineDocument):
        document = document_from_inline(request.document, settings.max_document_bytes)
    else:
        document = document_from_reference(
            request.document, tenant_id, deps.documents, settings.max_document_bytes
        )
    fingerprint = request_hash(request, document)
    # The type's own output cap, within the system's: a classification reserves far less than an invoice.
    estimated = estimate_tokens(document, min(settings.max_output_tokens, request.kind.max_output_tokens))
    cost_estimate = estimated_cost(settings.model_prices, estimated)
    q = deps.db.q
    by_key = {"tenant_id": tenant_id, "idempotency_key": idempotency_key}
    by_digest = {"tenant_id": tenant_id, "sha256": document.sha256}
    # One connection in pipeline mode: each step below costs a round trip or two to the database, however
    # many statements it sends (BENCHMARKS.md's acceptance section splits the cost).
    with deps.db.pipelined() as session:
        # Before the tenant's lock, from what is committed: a replay is answered here, and a document
        # already stored needs no S3 put.
        with session.transaction(tenant_id) as conn:
            earlier = conn.execute(q.find_job_by_idempotency_key, by_key)
            known = conn.execute(q.find_document_by_digest, by_digest)
        replay = _replay(earlier.fetchone(), fingerprint)
        if replay is not None:
            return replay
        # The put happens before the lock is taken, so a slow put never holds back the tenant's other
        # requests. The object is content-addressed: if this request is then refused (a conflict, a full
        # quota), the next request with this content reuses it.
        in_row = document.size_bytes <= settings.document_row_max_bytes
        upload = None if in_row or known.fetchone() else _upload(deps, tenant_id, document)

        with session.transaction(tenant_id) as conn:
            # Under the lock, the lookup, the counts and the inserts see one consistent picture.
            conn.execute(q.lock_tenant_acceptance, {"tenant_id": tenant_id})
            earlier = conn.execute(q.find_job_by_idempotency_key, by_key)
            admission = conn.execute(q.tenant_admission, {"tenant_id": tenant_id})
            # The month of the application's clock: the reservation is released from the row it goes to.
            now = deps.clock.now()
            month = month_of(now)
            spend = conn.execute(q.tenant_month_spend, {"tenant_id": tenant_id, "month": month})
            stored = conn.execute(q.find_document_by_digest, by_digest)
            replay = _replay(earlier.fetchone(), fingerprint)  # also a concurrent twin that committed first
            if replay is not None:
                return replay
            _admit(deps.limits, admission.fetchone(), document.size_bytes, estimated)
            _admit_spend(deps.limits, spend.fetchone(), cost_estimate, now)
            document_id = _store_document(
                conn, deps, tenant_id, document, stored=stored.fetchone(), upload=upload, in_row=in_row
            )

            job_id = deps.new_id()
            created = conn.execute(
                q.insert_job,
                {
                    "job_id": job_id,
                    "tenant_id": tenant_id,
                    "idempotency_key": idempotency_key,
                    "request_hash": fingerprint,
                    "job_type": request.job_type,
                    "document_id": document_id,
                    "schema_version": request.schema_version,
                    "model_policy": request.model_policy.value,
                    "options": Jsonb(request.options.model_dump(mode="json")),
                    "metadata": Jsonb(request.metadata),
                    "priority": request.priority,
                    "service_tier": request.service_tier,
                    "max_attempts": settings.default_max_attempts,
                    "estimated_tokens": estimated,
                    "document_bytes": document.size_bytes,
                    "deadline_at": now + timedelta(seconds=deadline_seconds),
                    "trace_context": trace_context,
                    "reserved_usd": cost_estimate,
                    "spend_month": month,
                },
            )
            conn.execute(
                q.insert_outbox_event,
                outbox_row(
                    ExtractionRequested(
                        job_id=job_id, tenant_id=tenant_id, state_version=1, job_type=request.job_type
                    ),
                    event_id=deps.new_id(),
                    trace_context=trace_context,
                ),
            )
        row = created.fetchone()
    assert row is not None
    # The job's document is this content, so its fields are known here; nothing needs reading back.
    row |= {
        "content_sha256": document.sha256,
        "size_bytes": document.size_bytes,
        "page_count": len(document.pages),
    }
    # After the commit, never before: the relay must find the event when it wakes.
    deps.nudger.nudge()
    return Accepted(job=job_view(row), replayed=False)


def _replay(existing: dict[str, Any] | None, fingerprint: str) -> Accepted | None:
    """The answer to a key used before: the same job for the same request, a conflict for another."""
    if existing is None:
        return None
    if existing["request_hash"] != fingerprint:
        raise IdempotencyConflict(
            "this Idempotency-Key was first used with a different document or options; "
            "use a new key for a new request",
            job_id=str(existing["job_id"]),
        )
    return Accepted(job=job_view(existing), replayed=True)


def _admit(settings: AcceptanceLimits, state: dict[str, Any] | None, size_bytes: int, tokens: int) -> None:
    """Refuses work the system cannot take now, before anything is written; reads counters, never counts."""
    if state is None:
        raise Unauthorized("the API key's tenant no longer exists")
    checks = (
        ("jobs", state["jobs"] + 1, state["max_pending_jobs"] or settings.tenant_max_pending_jobs),
        (
            "bytes",
            state["bytes"] + size_bytes,
            state["max_pending_bytes"] or settings.tenant_max_pending_bytes,
        ),
        (
            "tokens",
            state["tokens"] + tokens,
            state["max_pending_tokens"] or settings.tenant_max_pending_tokens,
        ),
    )
    for dimension, wanted, limit in checks:
        if wanted > limit:
            raise TenantOverQuota(
                f"accepting this job would take the tenant's unfinished {dimension} to {wanted}, "
                f"over its limit of {limit}; retry when earlier jobs finish",
                retry_after=settings.admission_retry_after_seconds,
                limit_dimension=dimension,
            )
    if state["backlog"] >= settings.system_max_backlog:
        raise SystemOverloaded(
            "the system is at its backlog capacity; nothing was accepted",
            retry_after=settings.admission_retry_after_seconds,
        )


def _admit_spend(
    settings: AcceptanceLimits, row: dict[str, Any] | None, estimate: Decimal, now: datetime
) -> None:
    """Refuses a job whose estimated cost, with the month's spent and reserved cost, would pass the tenant's
    (or the system's) monthly budget. Read and reserved under the tenant's acceptance lock, so concurrent
    accepts of one tenant never admit past its budget; the system budget is not under one lock, so accepts
    of different tenants at the same moment may pass it by at most one estimate each."""
    if row is None:
        return  # the tenant is gone; _admit already refused
    refusal = MonthSpend.of(row, settings.system_monthly_budget_usd).admission_refusal(estimate)
    if refusal is not None:
        raise SpendBudgetExhausted(
            f"{refusal}; nothing was accepted. Budgets open again at the start of the next UTC month",
            retry_after=seconds_until_next_month(now),
        )


def _upload(deps: AcceptanceDeps, tenant_id: UUID, document: CanonicalDocument) -> tuple[str, str]:
    """Stores the canonical copy, which workers read whether the document came inline or by reference,
    so a tenant changing its own object later changes nothing here. Returns the key and version."""
    s3_key = document_key(tenant_id, document.sha256)
    return s3_key, deps.documents.put(s3_key, document.body)


def _store_document(
    conn: Conn,
    deps: AcceptanceDeps,
    tenant_id: UUID,
    document: CanonicalDocument,
    *,
    stored: dict[str, Any] | None,
    upload: tuple[str, str] | None,
    in_row: bool,
) -> UUID:
    """The document's id: the row already stored for this content, or a new row holding the document
    itself (``in_row``: committed with the job) or the key and version of its S3 object."""
    if stored is not None:  # also when a concurrent request with the same content stored it first
        document_id: UUID = stored["document_id"]
        return document_id
    s3_key = version_id = None
    if not in_row:
        # No upload yet when the row seen before the lock has gone since (retention deleted it).
        s3_key, version_id = upload or _upload(deps, tenant_id, document)
    document_id = deps.new_id()
    conn.execute(
        deps.db.q.insert_document,
        {
            "document_id": document_id,
            "tenant_id": tenant_id,
            "sha256": document.sha256,
            "s3_key": s3_key,
            "s3_version_id": version_id,
            "body": document.body if in_row else None,
            "size_bytes": document.size_bytes,
            "page_count": len(document.pages),
        },
    )
    return document_id


def job_view(row: dict[str, Any]) -> JobView:
    path = f"/extraction-jobs/{row['job_id']}"
    return JobView(
        job_id=row["job_id"],
        job_type=row["job_type"],
        state=JobState(row["state"]),
        state_version=row["state_version"],
        schema_version=row["schema_version"],
        model_policy=row["model_policy"],
        priority=row["priority"],
        service_tier=row["service_tier"],
        attempt=row["attempt"],
        max_attempts=row["max_attempts"],
        document=DocumentView(
            document_id=row["document_id"],
            sha256=row["content_sha256"],
            size_bytes=row["size_bytes"],
            page_count=row["page_count"],
        ),
        metadata=row["metadata"],
        deadline_at=row["deadline_at"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        finished_at=row["finished_at"],
        last_error=row["last_error"],
        usage=JobUsage.of(row),
        links=JobLinks(self=path, result=f"{path}/result", cancel=f"{path}/cancel"),
    )


def get_job(db: Database, tenant_id: UUID, job_id: UUID) -> JobView:
    with db.transaction(tenant_id) as conn:
        row = conn.execute(db.q.get_job, {"tenant_id": tenant_id, "job_id": job_id}).fetchone()
    if row is None:
        raise NotFound(f"no extraction job {job_id}")
    return job_view(row)


def encode_cursor(created_at: datetime, job_id: UUID) -> str:
    raw = json.dumps({"c": created_at.isoformat(), "i": str(job_id)}).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, UUID]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        data = json.loads(raw)
        return datetime.fromisoformat(data["c"]), UUID(data["i"])
    except (binascii.Error, ValueError, KeyError, TypeError):
        raise InvalidRequest("the cursor is not one this API handed out") from None


def list_jobs(
    db: Database,
    tenant_id: UUID,
    *,
    state: JobState | None,
    limit: int,
    cursor: str | None,
    job_type: str | None = None,
) -> JobPage:
    after_created_at, after_job_id = decode_cursor(cursor) if cursor else (None, None)
    with db.transaction(tenant_id) as conn:
        rows = conn.execute(
            db.q.list_jobs,
            {
                "tenant_id": tenant_id,
                "state": state.value if state else None,
                "job_type": job_type,
                "after_created_at": after_created_at,
                "after_job_id": after_job_id,
                "limit": limit + 1,
            },
        ).fetchall()
    items = [job_view(row) for row in rows[:limit]]
    next_cursor = encode_cursor(items[-1].created_at, items[-1].job_id) if len(rows) > limit else None
    return JobPage(items=items, next_cursor=next_cursor)


def get_job_result(db: Database, tenant_id: UUID, job_id: UUID) -> JobResultView:
    """A SUCCEEDED job's accepted result. A result waiting for review, or rejected, is not accepted data: 409
    with a link to the review, never the data itself."""
    with db.transaction(tenant_id) as conn:
        row = conn.execute(db.q.get_job_result, {"tenant_id": tenant_id, "job_id": job_id}).fetchone()
        job = (
            None if row else conn.execute(db.q.get_job, {"tenant_id": tenant_id, "job_id": job_id}).fetchone()
        )
    if row is not None and row["state"] == JobState.SUCCEEDED:
        review = None
        if row["decision"] is not None:
            review = ResultReview.model_validate(row)
        return JobResultView.model_validate(
            {**row, "review": review, "evidence": row["located_evidence"], "usage": JobUsage.of(row)}
        )
    found = row if row is not None else job
    if found is None:
        raise NotFound(f"no extraction job {job_id}")
    state = JobState(found["state"])
    review_link = f"/extraction-jobs/{job_id}/review"
    if state is JobState.REVIEW_REQUIRED:
        raise InvalidState(
            "the job's result failed validation and waits for a reviewer; it is not accepted data",
            state=state.value,
            review=review_link,
        )
    if state is JobState.REJECTED:
        raise InvalidState(
            "a reviewer rejected the job's result; there is none to fetch",
            state=state.value,
            review=review_link,
        )
    if state.is_finished:
        raise InvalidState(f"the job ended {state.value} and has no result", state=state.value)
    raise InvalidState(f"the job is {state.value}; its result is not ready yet", state=state.value)


def list_job_attempts(db: Database, tenant_id: UUID, job_id: UUID) -> AttemptList:
    with db.transaction(tenant_id) as conn:
        job = conn.execute(db.q.get_job, {"tenant_id": tenant_id, "job_id": job_id}).fetchone()
        rows = conn.execute(db.q.list_job_attempts, {"tenant_id": tenant_id, "job_id": job_id}).fetchall()
    if job is None:
        raise NotFound(f"no extraction job {job_id}")
    return AttemptList(job_id=job_id, attempts=[AttemptView.model_validate(row) for row in rows])


def cancel_job(
    db: Database,
    tenant_id: UUID,
    job_id: UUID,
    *,
    new_id: IdFactory = new_id,
    nudger: Nudger | None = None,
) -> JobView:
    """Cancels a job that is not running, or one waiting in a provider batch (the batch path; its answer is
    discarded when it comes); its ``extraction.cancelled.v1`` event commits with the change. A repeated cancel
    answers the cancelled job and writes nothing."""
    checked_transition(CANCELLABLE_STATES, JobState.CANCELLED)
    with db.transaction(tenant_id) as conn:
        cancelled = conn.execute(db.q.cancel_job, {"tenant_id": tenant_id, "job_id": job_id}).fetchone()
        if cancelled is not None:
            insert_outcome_event(
                conn,
                db,
                ExtractionCancelled,
                event_id=new_id(),
                trace_context=cancelled["trace_context"],
                job_id=job_id,
                tenant_id=tenant_id,
                state_version=cancelled["state_version"],
                attempt=cancelled["attempt"],
            )
        row = conn.execute(db.q.get_job, {"tenant_id": tenant_id, "job_id": job_id}).fetchone()
    if cancelled is not None and nudger is not None:
        nudger.nudge()  # after the commit, so the relay finds the event
    if row is None:
        raise NotFound(f"no extraction job {job_id}")
    if cancelled is None and row["state"] != JobState.CANCELLED:
        raise InvalidState(
            f"a {row['state']} job cannot be cancelled; only READY or RETRY_SCHEDULED jobs, or jobs waiting "
            "in a provider batch, can",
            state=row["state"],
        )
    return job_view(row)
