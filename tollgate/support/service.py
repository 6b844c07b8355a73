"""Support staff's tools: reconcile and redrive dead letters, retry exhausted jobs, replay deliveries, each
with an audit row that commits or rolls back together with the action it records.

The database is the authority. A dead letter is redriven only after its job's state says what to do:
a job still waiting is signalled again, a job that ran out of attempts (or of time) gets a new budget
first, a running job is left to its lease, and a finished job is never touched (its stale message is
removed from the DLQ, and the audit row says why). Every action writes an audit row (who, why, what, when)
in the transaction of its database change; what an action does outside the database (an SQS send or
delete, a Step Functions start) happens after that commit, in an order each use case explains.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from enum import StrEnum
from typing import TYPE_CHECKING, Any
from uuid import UUID

from psycopg.types.json import Jsonb
from pydantic import BaseModel, ValidationError

from tollgate.core.clock import Clock, IdFactory
from tollgate.core.errors import InvalidRequest, InvalidState, NotFound
from tollgate.core.job_states import JobState
from tollgate.db import Database
from tollgate.delivery.deliveries import (
    DeliveryList,
    ReplayDeps,
    ReplayResult,
    execution_name,
    list_deliveries,
)
from tollgate.delivery.endpoints import EndpointList, list_endpoints
from tollgate.events import ExtractionRequested, UnknownEventType, outbox_row
from tollgate.jobtypes.registry import JOB_TYPES
from tollgate.outbox.relay import OutboxEvent
from tollgate.support.configuration import NotConfigured
from tollgate.support.timeline import JobTimeline, read_timeline
from tollgate.tenants.suppliers import find_tenant

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient

    from tollgate.db.database import Conn

# Terminal failures that a new budget can cure; others (a refusal, a lost document) need --include-failed.
EXHAUSTED_REASONS = frozenset({"attempts_exhausted", "deadline_exceeded"})
# The audit table's own limits (CHECK constraints, migration 0006): refused here with a clear message.
REASON_MIN, REASON_MAX, ACTOR_MAX = 3, 1000, 200


class Decision(StrEnum):
    REDRIVE = "redrive"  # the job still waits: signal it again
    RESET_AND_REDRIVE = "reset_and_redrive"  # give the job a new attempt budget, then signal it
    DISCARD = "discard"  # the job finished: the message carries nothing left to do
    LEAVE = "leave"  # a person must look: stays in the DLQ


@dataclass(frozen=True)
class TypeQueues:
    """A job type's queue and the dead-letter queue SQS moves its failed messages to."""

    url: str
    dlq_url: str


@dataclass(frozen=True)
class SupportDeps:
    """What support commands use. The database is always there; the queues (``dlq`` commands, one pair per
    job type) and the webhook dispatcher (replays) only when configured, so reading jobs needs nothing but
    the database."""

    db: Database
    clock: Clock
    new_id: IdFactory
    sleep: Callable[[float], None]
    actor: str
    sqs: SQSClient | None = None
    type_queues: Mapping[str, TypeQueues] = field(default_factory=dict)
    replays: ReplayDeps | None = None
    extra_attempts: int = 3
    deadline_seconds: int = 3600

    def queues(self) -> SQSClient:
        if self.sqs is None or not self.type_queues:
            raise NotConfigured(
                "this command uses the job types' queues: set JOB_QUEUE_URLS and JOB_DLQ_URLS, "
                "or start `tollgate local up`"
            )
        return self.sqs

    def selected(self, job_type: str | None) -> dict[str, TypeQueues]:
        """The queue pairs a command looks at: one job type's, or (None) every type's."""
        self.queues()
        if job_type is None:
            return dict(self.type_queues)
        if job_type not in self.type_queues:
            raise InvalidRequest(
                f"no job type {job_type!r}; the job types are {', '.join(sorted(self.type_queues))}"
            )
        return {job_type: self.type_queues[job_type]}


@dataclass
class DeadLetter:
    message_id: str
    receipt_handle: str
    body: str
    receive_count: int
    group_id: str | None
    event: OutboxEvent | None
    problem: str | None = None
    # The job type whose DLQ holds the letter: a redrive sends it back to that type's queue.
    job_type: str = ""

    @property
    def job_id(self) -> UUID | None:
        if self.event is None:
            return None
        try:
            return self.event.job_data().job_id
        except (ValidationError, UnknownEventType):
            return None


@dataclass
class RedriveItem:
    letter: DeadLetter
    decision: Decision
    why: str
    job_state: str | None = None
    done: bool = False
    audit_id: int | None = None


@dataclass
class RedriveReport:
    items: list[RedriveItem] = field(default_factory=list)
    dry_run: bool = False

    def count(self, decision: Decision) -> int:
        return sum(1 for item in self.items if item.decision is decision)


def _letter(message: dict[str, Any], job_type: str) -> DeadLetter:
    attributes = message.get("Attributes", {})
    letter = DeadLetter(
        message_id=message["MessageId"],
        receipt_handle=message["ReceiptHandle"],
        body=message["Body"],
        receive_count=int(attributes.get("ApproximateReceiveCount", 0)),
        group_id=attributes.get("MessageGroupId"),
        event=None,
        job_type=job_type,
    )
    try:
        letter.event = OutboxEvent.model_validate_json(message["Body"])
    except ValidationError as error:
        letter.problem = f"not an outbox event: {error.error_count()} validation error(s)"
    return letter


def receive_dead_letters(
    deps: SupportDeps, limit: int, hold_seconds: int = 30, *, job_type: str | None = None
) -> list[DeadLetter]:
    """Up to ``limit`` dead letters of one job type's DLQ (or of each type's in turn), hidden from other
    readers for ``hold_seconds`` while we look."""
    sqs = deps.queues()
    letters: list[DeadLetter] = []
    for name, pair in deps.selected(job_type).items():
        while len(letters) < limit:
            batch = sqs.receive_message(
                QueueUrl=pair.dlq_url,
                MaxNumberOfMessages=min(10, limit - len(letters)),
                WaitTimeSeconds=0,
                VisibilityTimeout=hold_seconds,
                MessageSystemAttributeNames=["All"],
            ).get("Messages", [])
            if not batch:
                break
            letters.extend(_letter(dict(m), name) for m in batch)
    return letters


def release(deps: SupportDeps, letters: list[DeadLetter]) -> None:
    """Makes looked-at letters visible again at once (listing must not hide them from a redrive)."""
    sqs = deps.queues()
    for letter in letters:
        sqs.change_message_visibility(
            QueueUrl=deps.type_queues[letter.job_type].dlq_url,
            ReceiptHandle=letter.receipt_handle,
            VisibilityTimeout=0,
        )


def _judge(
    letter: DeadLetter, job: dict[str, Any] | None, include_failed: bool, extra_attempts: int
) -> RedriveItem:
    """What a redrive does with this letter, given its job as the database has it now."""
    if job is None:
        return RedriveItem(letter, Decision.LEAVE, f"no job {letter.job_id} in the database")
    state = JobState(job["state"])
    reason = (job["last_error"] or {}).get("reason")
    if state in {JobState.READY, JobState.RETRY_SCHEDULED}:
        return RedriveItem(
            letter, Decision.REDRIVE, f"the job is {state.value}: signal it again", state.value
        )
    if state is JobState.RUNNING:
        return RedriveItem(letter, Decision.LEAVE, "the job is RUNNING: its lease decides", state.value)
    if state is JobState.FAILED_TERMINAL and (reason in EXHAUSTED_REASONS or include_failed):
        why = f"the job failed ({reason}): a new budget of {extra_attempts} attempts, then redrive"
        return RedriveItem(letter, Decision.RESET_AND_REDRIVE, why, state.value)
    if state is JobState.FAILED_TERMINAL:
        why = f"the job failed for a reason a retry will not cure ({reason}); use --include-failed to retry"
        return RedriveItem(letter, Decision.LEAVE, why, state.value)
    return RedriveItem(
        letter, Decision.DISCARD, f"the job already ended {state.value}; nothing to redrive", state.value
    )


def decide(deps: SupportDeps, letter: DeadLetter, include_failed: bool) -> RedriveItem:
    """What a redrive would do with this letter now (a look: nothing is locked or changed)."""
    if letter.event is None or letter.job_id is None:
        return RedriveItem(letter, Decision.LEAVE, letter.problem or "the event names no job")
    with deps.db.transaction() as conn:
        job = conn.execute(deps.db.q.support_get_job, {"job_id": letter.job_id}).fetchone()
    return _judge(letter, job, include_failed, deps.extra_attempts)


def list_dead_letters(deps: SupportDeps, limit: int, job_type: str | None = None) -> list[RedriveItem]:
    """Dead letters (of one job type, or of every type) with their jobs' current state and what a redrive
    would do; changes nothing."""
    letters = receive_dead_letters(deps, limit, job_type=job_type)
    try:
        return [decide(deps, letter, include_failed=False) for letter in letters]
    finally:
        release(deps, letters)


def show_dead_letter(deps: SupportDeps, message_id: str, job_type: str | None = None) -> RedriveItem:
    """One dead letter and its job's reconciliation; changes nothing."""
    letters = receive_dead_letters(deps, 500, job_type=job_type)
    try:
        for letter in letters:
            if letter.message_id == message_id:
                return decide(deps, letter, include_failed=False)
    finally:
        release(deps, letters)
    raise NotFound(f"no dead letter {message_id}")


def _require_audit(deps: SupportDeps, reason: str) -> None:
    """Checked before anything is looked at: a clear message rather than the audit table's CHECK error."""
    if len(reason.strip()) < REASON_MIN:
        raise InvalidRequest("say why (--reason): it goes into the audit trail")
    if len(reason) > REASON_MAX:
        raise InvalidRequest(f"say why in at most {REASON_MAX} characters")
    if not 1 <= len(deps.actor) <= ACTOR_MAX:
        raise InvalidRequest(f"who acts (--actor) must be 1 to {ACTOR_MAX} characters")


def record_audit(
    conn: Conn, deps: SupportDeps, reason: str, *, action: str, target: str, outcome: str, details: Any
) -> int:
    """One audit row, in the caller's transaction: it commits or rolls back with the action it records."""
    row = conn.execute(
        deps.db.q.insert_audit,
        {
            "actor": deps.actor,
            "reason": reason,
            "action": action,
            "target": target,
            "outcome": outcome,
            "details": Jsonb(details),
        },
    ).fetchone()
    assert row is not None
    return int(row["audit_id"])


def _resend(deps: SupportDeps, letter: DeadLetter, audit_id: int) -> None:
    assert letter.event is not None
    deps.queues().send_message(
        QueueUrl=deps.type_queues[letter.job_type].url,
        MessageBody=letter.body,
        MessageGroupId=letter.group_id or str(letter.event.tenant_id),
        # A new deduplication id: the original's may still be remembered by SQS for five minutes.
        MessageDeduplicationId=f"{letter.event.event_id}-redrive-{audit_id}",
    )


def redrive_dead_letters(
    deps: SupportDeps,
    *,
    reason: str,
    dry_run: bool = False,
    max_per_second: float = 5.0,
    include_failed: bool = False,
    limit: int = 100,
    job_type: str | None = None,
) -> RedriveReport:
    """Reconciles each dead letter (of one job type's DLQ, or of every type's) with its job, then redrives
    it to its type's queue, resets and redrives, discards or leaves it.

    Each letter's decision is made again under a lock on its job when it is acted on: the look that plans it
    can be seconds old by then (pacing), and a job that started running or finished meanwhile must not be
    signalled or reset on the strength of that look."""
    _require_audit(deps, reason)
    if max_per_second <= 0:
        raise InvalidRequest("--max-per-second must be positive")
    letters = receive_dead_letters(deps, limit, job_type=job_type)
    report = RedriveReport(dry_run=dry_run)
    acted = False
    try:
        for letter in letters:
            planned = decide(deps, letter, include_failed)
            if dry_run or planned.decision is Decision.LEAVE:
                report.items.append(planned)
                continue
            if acted:
                deps.sleep(1.0 / max_per_second)  # redriving must not itself become a stampede
            report.items.append(_redrive(deps, letter, include_failed, reason))
            acted = True
    finally:
        # Whatever was not finished (left, planned only, or not reached after an error) is visible again at
        # once for the next look, rather than after the hold.
        done = {item.letter.message_id for item in report.items if item.done}
        release(deps, [letter for letter in letters if letter.message_id not in done])
    return report


def _redrive(deps: SupportDeps, letter: DeadLetter, include_failed: bool, reason: str) -> RedriveItem:
    """One dead letter: decision, job reset and audit row in one transaction, then the SQS side.

    Order, and why each crash point is harmless:
    1. The transaction (job locked, decided again, reset when needed, audit row) commits first. A failure
       inside it rolls back both the reset and the audit row, and the letter stays in the DLQ.
    2. Then the resend to the job type's queue. If it fails or we crash before it, the job is already READY
       with its audit row: workers claim it from the database without any message, and the letter (not
       deleted) shows up again, where the next redrive finds the job READY and signals it once more.
    3. Then the letter is deleted from the DLQ. A crash before that leaves it there; the next redrive
       decides again from the job's state (running or finished by then: left or discarded), and a second
       copy of the message for the same event is absorbed by the worker's inbox (unique event id).
    No transaction is held across an SQS call."""
    assert letter.event is not None
    assert letter.job_id is not None
    q = deps.db.q
    with deps.db.transaction() as conn:
        job = conn.execute(q.support_lock_job, {"job_id": letter.job_id}).fetchone()
        item = _judge(letter, job, include_failed, deps.extra_attempts)
        if item.decision is Decision.LEAVE:
            return item
        if item.decision is Decision.RESET_AND_REDRIVE:
            reset = conn.execute(q.reset_failed_job, _reset_params(deps, letter.job_id)).fetchone()
            if reset is None:  # cannot happen under the lock; never audit a reset that did not happen
                raise InvalidState(f"job {letter.job_id} did not reset")
        details = {
            "job_type": letter.job_type,
            "message_id": letter.message_id,
            "event_id": str(letter.event.event_id),
            "why": item.why,
        }
        item.audit_id = record_audit(
            conn,
            deps,
            reason,
            action="dlq_redrive",
            target=str(letter.job_id),
            outcome=item.decision.value,
            details=details,
        )
    if item.decision is not Decision.DISCARD:
        _resend(deps, letter, item.audit_id)
    deps.queues().delete_message(
        QueueUrl=deps.type_queues[letter.job_type].dlq_url, ReceiptHandle=letter.receipt_handle
    )
    item.done = True
    return item


def _reset_params(deps: SupportDeps, job_id: UUID) -> dict[str, Any]:
    return {
        "job_id": job_id,
        "extra_attempts": deps.extra_attempts,
        "deadline_seconds": deps.deadline_seconds,
        "now": deps.clock.now(),
    }


def retry_job(deps: SupportDeps, job_id: UUID, reason: str) -> int:
    """Gives a terminally failed job a new attempt budget and signals the workers; returns the audit id.

    Everything happens in one transaction: the reset, the requested event in the outbox (the relay sends
    it after the commit, so there is no external call here) and the audit row."""
    _require_audit(deps, reason)
    q = deps.db.q
    with deps.db.transaction() as conn:
        job = conn.execute(q.support_lock_job, {"job_id": job_id}).fetchone()
        if job is None:
            raise NotFound(f"no job {job_id}")
        reset = conn.execute(q.reset_failed_job, _reset_params(deps, job_id)).fetchone()
        if reset is None:
            raise InvalidState(f"the job is {job['state']}; only FAILED_TERMINAL jobs can be retried")
        requested = ExtractionRequested(
            job_id=job_id,
            tenant_id=reset["tenant_id"],
            state_version=reset["state_version"],
            job_type=reset["job_type"],
        )
        conn.execute(q.insert_outbox_event, outbox_row(requested, event_id=deps.new_id(), trace_context=None))
        details = {
            "previous": json.loads(json.dumps(job["last_error"] or {})),
            "extra_attempts": deps.extra_attempts,
        }
        return record_audit(
            conn, deps, reason, action="job_retry", target=str(job_id), outcome="reset", details=details
        )


def start_bulk_move(sqs: SQSClient, dlq_arn: str, queue_arn: str, max_per_second: int) -> str:
    """Moves every DLQ message back with SQS's own move task: fast, but reconciles nothing with the
    database. For when the cause was upstream of every message (the worker was down), not per job."""
    response = sqs.start_message_move_task(
        SourceArn=dlq_arn, DestinationArn=queue_arn, MaxNumberOfMessagesPerSecond=max_per_second
    )
    return response["TaskHandle"]


@dataclass(frozen=True)
class BulkMove:
    """One job type's bulk move: the task SQS started, and the audit row that requested it."""

    job_type: str
    task_handle: str
    audit_id: int


def move_all_dead_letters(
    deps: SupportDeps, reason: str, max_per_second: int, job_type: str | None = None
) -> list[BulkMove]:
    """Starts the bulk move of every dead letter back to its job type's queue (one type's, or each type's in
    turn), audited per type.

    The action is SQS's alone, so no transaction can hold it and its audit row together. The request is
    committed first (outcome ``requested``), then the task started, then its outcome recorded (``started``
    with the task handle, or ``failed``): a crash in between leaves a request without an outcome, never a
    move nobody recorded. The audit table only takes inserts, so the outcome is a row of its own."""
    _require_audit(deps, reason)
    sqs = deps.queues()
    moves = []
    for name, pair in deps.selected(job_type).items():
        dlq_arn, queue_arn = (
            sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
            for url in (pair.dlq_url, pair.url)
        )
        request = {"job_type": name, "destination": queue_arn, "max_per_second": max_per_second}
        with deps.db.transaction() as conn:
            requested = record_audit(
                conn,
                deps,
                reason,
                action="dlq_move_all",
                target=dlq_arn,
                outcome="requested",
                details=request,
            )
        try:
            handle = start_bulk_move(sqs, dlq_arn, queue_arn, max_per_second)
        except Exception as error:
            with deps.db.transaction() as conn:
                record_audit(
                    conn,
                    deps,
                    reason,
                    action="dlq_move_all",
                    target=dlq_arn,
                    outcome="failed",
                    details={
                        "job_type": name,
                        "requested": requested,
                        "error": f"{type(error).__name__}: {error}"[:1000],
                    },
                )
            raise
        with deps.db.transaction() as conn:
            record_audit(
                conn,
                deps,
                reason,
                action="dlq_move_all",
                target=dlq_arn,
                outcome="started",
                details={"job_type": name, "requested": requested, "task_handle": handle},
            )
        moves.append(BulkMove(name, handle, requested))
    return moves


def replay_delivery_audited(
    deps: SupportDeps, tenant: str, endpoint_id: UUID, delivery_id: UUID, reason: str
) -> tuple[ReplayResult, int]:
    """Sends one of a tenant's deliveries again under its webhook-id, audited; returns what was replayed
    and the audit id.

    The delivery is reopened and the audit row written in one transaction; the dispatcher's execution is
    started after the commit. A crash before the start leaves a reopened PENDING delivery that nothing
    drives, which the scheduler restarts once it counts as stalled; a start that is repeated finds its
    execution already there (same name) and does nothing."""
    _require_audit(deps, reason)
    if deps.replays is None:
        raise NotConfigured("set WEBHOOK_STATE_MACHINE_ARN: there is no dispatcher to replay through")
    tenant_id = find_tenant(deps.db, tenant)
    q = deps.db.q
    with deps.db.transaction(tenant_id) as conn:
        rows = conn.execute(
            q.reopen_delivery,
            {
                "tenant_id": tenant_id,
                "endpoint_id": endpoint_id,
                "delivery_id": delivery_id,
                "now": deps.clock.now(),
            },
        ).fetchall()
        if not rows:
            raise NotFound(f"no delivery {delivery_id} for endpoint {endpoint_id}")
        replayed = [row["delivery_id"] for row in rows]
        audit_id = record_audit(
            conn,
            deps,
            reason,
            action="delivery_replay",
            target=str(delivery_id),
            # What the commit guarantees: the delivery is PENDING again; the execution starts just after.
            outcome="reopened",
            details={"replayed": [str(r) for r in replayed]},
        )
    for row in rows:
        deps.replays.starter.start(
            row["delivery_id"], execution_name(row["delivery_id"], row["replays"], row["restarts"])
        )
    return ReplayResult(replayed=replayed), audit_id


class JobSummary(BaseModel):
    job_id: UUID
    tenant_id: UUID
    tenant: str
    job_type: str
    state: str
    attempt: int
    max_attempts: int
    reason: str | None
    created_at: datetime
    finished_at: datetime | None


class AttemptRecord(BaseModel):
    attempt: int
    fence: int
    worker_id: str | None
    started_at: datetime | None
    finished_at: datetime | None
    outcome: str | None
    model: str | None
    input_tokens: int | None
    output_tokens: int | None
    cost_usd: Decimal | None
    latency_ms: int | None
    provider_request_id: str | None
    error: Any


class AuditEntry(BaseModel):
    audit_id: int
    created_at: datetime
    actor: str
    action: str
    outcome: str
    reason: str
    details: Any


class JobDetail(BaseModel):
    job_id: UUID
    tenant_id: UUID
    tenant: str
    job_type: str
    service_tier: str
    priority: int
    state: str
    state_version: int
    attempt: int
    max_attempts: int
    deadline_at: datetime
    created_at: datetime
    finished_at: datetime | None
    last_error: dict[str, Any] | None
    policy_version: str | None
    # Each as the validation policy wrote it: {"code", "field", "detail"}.
    review_reasons: list[dict[str, Any]]
    attempts: list[AttemptRecord]
    audit: list[AuditEntry]
    # None only from an operations function deployed before there was a timeline.
    timeline: JobTimeline | None = None


def list_jobs(
    db: Database, *, state: JobState | None, tenant: str | None, limit: int, job_type: str | None = None
) -> list[JobSummary]:
    """Recent jobs, newest first; a tenant or a job type that does not exist is an error, not an empty
    list."""
    if job_type is not None and job_type not in JOB_TYPES:
        raise InvalidRequest(f"{job_type!r} is not a job type; one of: {', '.join(JOB_TYPES)}")
    tenant_id = find_tenant(db, tenant) if tenant is not None else None
    with db.transaction() as conn:
        rows = conn.execute(
            db.q.support_list_jobs,
            {
                "state": state.value if state else None,
                "tenant_id": tenant_id,
                "job_type": job_type,
                "limit": limit,
            },
        ).fetchall()
    return [JobSummary.model_validate(row) for row in rows]


def show_job(db: Database, job_id: UUID) -> JobDetail:
    """A job with its tenant, review reasons, every attempt, what support did to it, and its timeline: state
    changes, escalations, the review decision and webhook deliveries. Every read is by the job's id."""
    with db.transaction() as conn:
        job = conn.execute(db.q.support_show_job, {"job_id": job_id}).fetchone()
        if job is None:
            raise NotFound(f"no job {job_id}")
        attempts = [
            AttemptRecord.model_validate(row)
            for row in conn.execute(db.q.support_job_attempts, {"job_id": job_id}).fetchall()
        ]
        trail = conn.execute(db.q.audit_for_target, {"target": str(job_id)}).fetchall()
        timeline = read_timeline(db, conn, job_id, job["state_version"], attempts)
    return JobDetail.model_validate({**job, "attempts": attempts, "audit": trail, "timeline": timeline})


def list_tenant_endpoints(db: Database, tenant: str) -> EndpointList:
    """A tenant's webhook endpoints, oldest first: the ids its deliveries are listed by."""
    return list_endpoints(db, find_tenant(db, tenant))


def list_tenant_deliveries(db: Database, tenant: str, endpoint_id: UUID, limit: int) -> DeliveryList:
    """A tenant's endpoint's deliveries, named as support names them (the tenant by its name)."""
    return list_deliveries(db, find_tenant(db, tenant), endpoint_id, limit)
