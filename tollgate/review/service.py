"""Review use cases: the queue of results waiting for a reviewer, one job's review, and the decision.

The API (a key with the ``review`` scope) and the CLI (``tollgate reviews``) call these same functions. A
decision is one transaction: the job's fenced move out of REVIEW_REQUIRED (on the state_version the
reviewer read, so of two reviewers exactly one wins), the decision with the accepted result as version 2,
the outbox event the ERP acts on, and for the CLI the support audit row. Everything that can refuse the
decision (the schema, the policy's re-validation of a correction, a document read from S3) runs before
that transaction, with none open.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from psycopg.types.json import Jsonb
from pydantic import BaseModel, ValidationError

from tollgate.accept.service import decode_cursor, encode_cursor
from tollgate.core.clock import Clock, IdFactory
from tollgate.core.documents import DocumentStore, DocumentStoreUnreachable, pages_from_canonical
from tollgate.core.errors import (
    CorrectionFailsValidation,
    DependencyUnavailable,
    InvalidState,
    NotFound,
    PreconditionFailed,
    PreconditionRequired,
    TollgateError,
    ValidationFailed,
)
from tollgate.core.job_states import JobState, checked_transition
from tollgate.db import Database
from tollgate.db.database import Conn
from tollgate.events import ExtractionCompleted, ExtractionRejected, JobOutcome
from tollgate.jobtypes.base import JobType
from tollgate.jobtypes.invoice_extraction.schema import Invoice
from tollgate.jobtypes.registry import INVOICE_EXTRACTION, REVIEW_REASONS
from tollgate.jobtypes.registry import job_type as registered_type
from tollgate.outbox.nudge import NoNudge, Nudger
from tollgate.outbox.outcomes import insert_outcome_event
from tollgate.review.evidence import evidence_views
from tollgate.review.merge_patch import absent_as_null, merge_patch
from tollgate.review.models import (
    Decision,
    DecisionView,
    ReviewDecided,
    ReviewDecisionRequest,
    ReviewPage,
    ReviewQueueItem,
    ReviewReason,
    ReviewView,
    review_links,
)
from tollgate.tenants.suppliers import read_tenant_policy

# As much of a document as the worker would read for the same job.
MAX_DOCUMENT_BYTES = 64 * 1024 * 1024
# The version an approval or a correction writes; version 1 is the model's result (extraction_results).
REVIEWED_RESULT_VERSION = 2


class DocumentsNotReachable(TollgateError):
    problem_type = "documents-not-configured"
    status = 503
    title = "The document's store is not configured here"


@dataclass(frozen=True)
class ReviewDeps:
    db: Database
    # Where documents too large for their row are; None reads only documents kept in their row.
    documents: DocumentStore | None
    clock: Clock
    new_id: IdFactory
    # Wakes the outbox relay after a decision, so the ERP's webhook goes out at once.
    nudger: Nudger = field(default_factory=NoNudge)


@dataclass(frozen=True)
class Reviewer:
    """Who decides: an API key (its id is the name), or a person at the CLI."""

    name: str
    key_id: UUID | None = None

    @classmethod
    def api_key(cls, key_id: UUID) -> Reviewer:
        return cls(f"api-key:{key_id}", key_id)


def check_reason(reason: str | None) -> None:
    """A reason filter names a code some policy gives: an unknown one is an error, never an empty list."""
    if reason is not None and reason not in REVIEW_REASONS:
        raise ValidationFailed(
            f"{reason!r} is not a review reason; one of: {', '.join(REVIEW_REASONS)}",
            errors=[{"loc": ["query", "reason"], "type": "literal_error", "msg": "not a review reason"}],
        )


def list_reviews(
    db: Database, tenant_id: UUID, *, reason: str | None, limit: int, cursor: str | None
) -> ReviewPage:
    """The tenant's waiting reviews, oldest first, only those with ``reason`` among their codes if given."""
    check_reason(reason)
    query = db.q.list_reviews_by_reason if reason else db.q.list_reviews
    return _page(
        db, tenant_id, query, params={"tenant_id": tenant_id, "reason": reason}, limit=limit, cursor=cursor
    )


def list_all_reviews(db: Database, *, reason: str | None, limit: int, cursor: str | None) -> ReviewPage:
    """Every tenant's waiting reviews, oldest first (the CLI, as the system role)."""
    check_reason(reason)
    query = db.q.list_all_reviews_by_reason if reason else db.q.list_all_reviews
    return _page(db, None, query, params={"reason": reason}, limit=limit, cursor=cursor)


def _page(
    db: Database,
    tenant_id: UUID | None,
    query: Any,
    *,
    params: dict[str, Any],
    limit: int,
    cursor: str | None,
) -> ReviewPage:
    after, after_job_id = decode_cursor(cursor) if cursor else (None, None)
    with db.transaction(tenant_id) as conn:
        rows = conn.execute(
            query,
            {**params, "after_waiting_since": after, "after_job_id": after_job_id, "limit": limit + 1},
        ).fetchall()
    items = [
        ReviewQueueItem(
            job_id=row["job_id"],
            tenant=row.get("tenant"),
            state_version=row["state_version"],
            waiting_since=row["waiting_since"],
            policy_version=row["policy_version"],
            reason_codes=sorted({r["code"] for r in row["review_reasons"]}),
            metadata=row["metadata"],
            links=review_links(row["job_id"]),
        )
        for row in rows[:limit]
    ]
    last = items[-1] if items else None
    next_cursor = encode_cursor(last.waiting_since, last.job_id) if last and len(rows) > limit else None
    return ReviewPage(items=items, next_cursor=next_cursor)


def find_review_tenant(db: Database, job_id: UUID) -> UUID:
    """The tenant of a job named by id alone (the CLI, as the system role)."""
    with db.transaction() as conn:
        row = conn.execute(db.q.find_review_tenant, {"job_id": job_id}).fetchone()
    if row is None:
        raise NotFound(f"no extraction job {job_id}")
    tenant_id: UUID = row["tenant_id"]
    return tenant_id


def get_review(deps: ReviewDeps, tenant_id: UUID, job_id: UUID) -> ReviewView:
    """A job's review with the evidence of each value located in its document. 409 for a job that never
    went to review."""
    db = deps.db
    with db.transaction(tenant_id) as conn:
        row = _review_row(conn, db, tenant_id, job_id)
        document = _document(conn, db, row)
    if row["result"] is None or (row["state"] != JobState.REVIEW_REQUIRED and row["decision"] is None):
        raise InvalidState(f"the job is {row['state']} and has no review", state=row["state"])
    return _view(row, _pages(deps, document))


def decide_review(
    deps: ReviewDeps,
    tenant_id: UUID,
    job_id: UUID,
    request: ReviewDecisionRequest,
    *,
    expected_version: int | None,
    reviewer: Reviewer,
    audited: bool = False,
) -> ReviewDecided:
    """Approves, corrects or rejects a waiting result, on the state_version the reviewer read.

    428 without ``expected_version``; 404 for no such job; 412 when the job's version is another (a second
    reviewer, or a stale read); 409 when it does not wait for review; 422 when a correction fails the schema
    or the policy (with the reasons). ``audited`` also writes the support audit row (the CLI, as the system
    role)."""
    if expected_version is None:
        raise PreconditionRequired(
            "send If-Match with the state_version you reviewed (the ETag of GET .../review)"
        )
    db = deps.db
    with db.transaction(tenant_id) as conn:
        row = _review_row(conn, db, tenant_id, job_id)
        _check_decidable(row, expected_version)
        document = _document(conn, db, row) if request.decision is Decision.CORRECT else None
        policy = read_tenant_policy(conn, db, tenant_id) if request.decision is Decision.CORRECT else None

    result: dict[str, Any] | None = None
    policy_version: str | None = None
    located: list[dict[str, object]] | None = None
    if request.decision is Decision.APPROVE:
        result, policy_version, located = row["result"], row["policy_version"], row["located_evidence"]
    elif request.decision is Decision.CORRECT:
        assert request.corrections is not None
        assert policy is not None
        assert document is not None
        kind = registered_type(row["job_type"])
        output = corrected_output(kind, row["result"], request.corrections)
        pages = _pages(deps, document)
        report = kind.validate(output, pages, kind.parse_options(row["options"]), policy)
        if not report.passed:
            reasons = [reason.as_dict() for reason in report.reasons]
            codes = ", ".join(sorted({reason["code"] for reason in reasons}))
            raise CorrectionFailsValidation(
                f"the corrected result still fails validation ({codes}); nothing was changed",
                reasons=reasons,
                policy_version=report.policy_version,
            )
        result, policy_version = output.model_dump(mode="json"), report.policy_version
        located = report.located_json(pages)
    state = checked_transition(
        JobState.REVIEW_REQUIRED,
        JobState.REJECTED if request.decision is Decision.REJECT else JobState.SUCCEEDED,
    )

    now = deps.clock.now()
    params = {
        "tenant_id": tenant_id,
        "job_id": job_id,
        "state_version": expected_version,
        "state": state.value,
        "now": now,
        "decision": request.decision.value,
        "note": request.note,
        "reviewer": reviewer.name,
        "reviewer_key_id": reviewer.key_id,
        "reasons": Jsonb(row["review_reasons"]),
        "review_requested_at": row["finished_at"],
        "result_version": REVIEWED_RESULT_VERSION if result is not None else None,
        "result": Jsonb(result) if result is not None else None,
        "policy_version": policy_version,
        "corrections": Jsonb(request.corrections) if request.corrections is not None else None,
        "located_evidence": Jsonb(located) if located is not None else None,
    }
    with db.transaction(tenant_id) as conn:
        decided = conn.execute(db.q.decide_review, params).fetchone()
        if decided is None:
            # Another decision committed since the read (the update waited for it): say what it left.
            _check_decidable(_review_row(conn, db, tenant_id, job_id), expected_version)
            raise PreconditionFailed("the job changed while the decision was made", state_version=None)
        model, fields = _outcome_event(state, decided, row["review_reasons"])
        insert_outcome_event(
            conn, db, model, event_id=deps.new_id(), trace_context=decided["trace_context"], **fields
        )
        if audited:
            _audit(
                conn, db, reviewer=reviewer, request=request, job_id=job_id, expected_version=expected_version
            )
    deps.nudger.nudge()
    return ReviewDecided(
        job_id=job_id,
        state=state,
        state_version=decided["state_version"],
        decision=request.decision,
        result_version=params["result_version"],
        decided_at=now,
        links=review_links(job_id),
    )


def corrected_invoice(result: Mapping[str, Any], corrections: Mapping[str, Any]) -> Invoice:
    output = corrected_output(INVOICE_EXTRACTION, result, corrections)
    assert isinstance(output, Invoice)
    return output


def corrected_output(kind: JobType, result: Mapping[str, Any], corrections: Mapping[str, Any]) -> BaseModel:
    """The model's result with the reviewer's merge patch applied, parsed by the job type's schema; a patch
    that makes it something the schema refuses is a 422 naming where."""
    patched = absent_as_null(kind.output, merge_patch(dict(result), dict(corrections)))
    try:
        return kind.output.model_validate(patched)
    except ValidationError as error:
        errors = [
            {
                "loc": ["body", "corrections", *(str(part) for part in e["loc"])],
                "type": e["type"],
                "msg": e["msg"],
            }
            for e in error.errors(include_url=False, include_input=False)
        ]
        first = errors[0]
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        where = ".".join(first["loc"][2:]) or "result"
        raise ValidationFailed(
            f"the corrected result does not fit the schema: {where}: {first['msg']}{more}", errors=errors
        ) from None


def _review_row(conn: Conn, db: Database, tenant_id: UUID, job_id: UUID) -> dict[str, Any]:
    row = conn.execute(db.q.get_review, {"tenant_id": tenant_id, "job_id": job_id}).fetchone()
    if row is None:
        raise NotFound(f"no extraction job {job_id}")
    return row


def _check_decidable(row: Mapping[str, Any], expected_version: int) -> None:
    """412 before 409: a reviewer whose read is stale learns that first, whatever the job became."""
    if row["state_version"] != expected_version:
        raise PreconditionFailed(
            f"the job is at state_version {row['state_version']}, not {expected_version}: read the review "
            "again before deciding",
            state_version=row["state_version"],
            state=row["state"],
        )
    if row["state"] != JobState.REVIEW_REQUIRED:
        raise InvalidState(
            f"the job is {row['state']}; only a REVIEW_REQUIRED job can be decided", state=row["state"]
        )


def _document(conn: Conn, db: Database, row: Mapping[str, Any]) -> dict[str, Any]:
    document = conn.execute(db.q.get_document_for_job, {"document_id": row["document_id"]}).fetchone()
    assert document is not None
    return document


def _pages(deps: ReviewDeps, document: Mapping[str, Any]) -> tuple[str, ...]:
    # A small document was committed in its row with the job; a larger one is an S3 object version.
    if document["body"] is not None:
        return pages_from_canonical(document["body"])
    if deps.documents is None:
        raise DocumentsNotReachable("the job's document is in S3: set DOCUMENTS_BUCKET to read it")
    try:
        raw = deps.documents.get(document["s3_key"], document["s3_version_id"], max_bytes=MAX_DOCUMENT_BYTES)
    except DocumentStoreUnreachable as error:
        raise DependencyUnavailable(f"the document could not be read: {error}", retry_after=5) from None
    return pages_from_canonical(raw)


def _view(row: Mapping[str, Any], pages: tuple[str, ...]) -> ReviewView:
    decision = None
    if row["decision"] is not None:
        decision = DecisionView(
            decision=Decision(row["decision"]),
            note=row["note"],
            reviewer=row["reviewer"],
            reviewer_key_id=row["reviewer_key_id"],
            decided_on_version=row["decided_on_version"],
            review_requested_at=row["review_requested_at"],
            decided_at=row["decided_at"],
            result_version=row["result_version"],
            corrections=row["corrections"],
        )
    return ReviewView(
        job_id=row["job_id"],
        state=JobState(row["state"]),
        state_version=row["state_version"],
        waiting_since=decision.review_requested_at if decision else row["finished_at"],
        policy_version=row["policy_version"],
        result=row["result"],
        reasons=[ReviewReason.model_validate(reason) for reason in row["review_reasons"]],
        evidence=evidence_views(
            row["result"], pages, registered_type(row["job_type"]), row["located_evidence"]
        ),
        decision=decision,
        links=review_links(row["job_id"]),
    )


def _outcome_event(
    state: JobState, decided: Mapping[str, Any], reasons: list[dict[str, Any]]
) -> tuple[type[JobOutcome], dict[str, Any]]:
    """What the ERP acts on: the completed event, the same shape as a result that passed on its own, or the
    rejection with the codes the result broke (the totals are added where the event is written)."""
    common = {
        "job_id": decided["job_id"],
        "tenant_id": decided["tenant_id"],
        "state_version": decided["state_version"],
        "attempt": decided["attempt"],
    }
    if state is JobState.SUCCEEDED:
        return ExtractionCompleted, common
    return ExtractionRejected, {**common, "review_reasons": sorted({reason["code"] for reason in reasons})}


def _audit(
    conn: Conn,
    db: Database,
    *,
    reviewer: Reviewer,
    request: ReviewDecisionRequest,
    job_id: UUID,
    expected_version: int,
) -> None:
    """The support trail's row for a decision made at the CLI, committed with the decision itself."""
    conn.execute(
        db.q.insert_audit,
        {
            "actor": reviewer.name,
            "reason": request.note,
            "action": "review_decide",
            "target": str(job_id),
            "outcome": request.decision.value,
            "details": Jsonb({"state_version": expected_version, "corrections": request.corrections}),
        },
    )
