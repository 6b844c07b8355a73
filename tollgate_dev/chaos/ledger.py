"""The ledger check: after a run, reconciles the database, the jobs queue and its dead letters, the
tenants' ERP logs and the Batch API's budget, and says which of the system's promises held.

Each promise is checked against evidence kept in another place, so a bug in one place cannot vouch for
itself: a job's attempt counter against its attempt records, its terminal state against its outbox event,
the event against its deliveries, and a delivery against what the ERP says it acted on.
"""

from __future__ import annotations

import itertools
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any
from uuid import UUID

from pydantic import ValidationError

from tollgate.core.job_states import FINISHED_STATES, JobState
from tollgate.db import Database
from tollgate.delivery.states import DeliveryState
from tollgate.events import (
    EXTRACTION_CANCELLED,
    EXTRACTION_COMPLETED,
    EXTRACTION_REJECTED,
    EXTRACTION_REQUESTED,
    EXTRACTION_REVIEW_REQUIRED,
    WEBHOOK_EVENT_TYPES,
    UnknownEventType,
)
from tollgate.execution.attempt import EVENT_FOR_STATE
from tollgate.execution.batch.batcher import BATCH_TIER
from tollgate.execution.batch.states import ENDED_STATES
from tollgate.execution.limiter.batch_pool import PoolState
from tollgate.execution.limiter.dynamodb import KEY
from tollgate.outbox.relay import OutboxEvent
from tollgate_dev.chaos.erp import ErpEffect
from tollgate_dev.queries import dev_queries

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_sqs import SQSClient

JOBS_EXPLAINED = "jobs_explained"
NO_DUPLICATE_RESULTS = "no_duplicate_results"
NO_LOST_EVENTS = "no_lost_events"
ATTEMPTS_CONSISTENT = "attempts_consistent"
NO_DUPLICATE_ERP_EFFECTS = "no_duplicate_erp_effects"
QUEUES_RECONCILED = "queues_reconciled"
BATCHES_SETTLED = "batches_settled"
BATCH_POOL_RELEASED = "batch_pool_released"

TITLES = {
    JOBS_EXPLAINED: "every admitted job is terminal, and its end is explained",
    NO_DUPLICATE_RESULTS: "no job has two accepted answers; a result is its last claim's, under its fence",
    NO_LOST_EVENTS: "no outbox event lost: published, received, delivered to the ERP",
    ATTEMPTS_CONSISTENT: "attempt counters agree with the attempt records",
    NO_DUPLICATE_ERP_EFFECTS: "no ERP effect duplicated",
    QUEUES_RECONCILED: "jobs queue drained, every dead letter explained",
    BATCHES_SETTLED: "every provider batch ended and settled, each line too; no batch-tier job left RUNNING",
    BATCH_POOL_RELEASED: "the Batch API's budget holds nothing for a settled batch",
}
# The invariants of the batch path: a run with no batch-tier jobs, or a pool it could not read, checks none.
BATCH_INVARIANTS = frozenset({BATCHES_SETTLED, BATCH_POOL_RELEASED})
# The prefix of the Batch API pool's items in the limiter's table (DynamoDbBatchPool.key).
BATCH_POOL_PREFIX = "batch#"
# The states a job can end in by extraction (and a reviewer's decision on it); which of them its invoice
# explains is the caller's knowledge.
EXTRACTED_STATES = frozenset(
    {JobState.SUCCEEDED.value, JobState.REVIEW_REQUIRED.value, JobState.REJECTED.value}
)
# A reviewed job announces its result twice: review_required from the worker, then the decision's event.
DECISION_EVENTS = {JobState.SUCCEEDED: EXTRACTION_COMPLETED, JobState.REJECTED: EXTRACTION_REJECTED}
# The event a job's final state is announced by: the worker's, and the tenant's cancellation.
ENDING_EVENTS = {**EVENT_FOR_STATE, JobState.CANCELLED: EXTRACTION_CANCELLED}
# Enough examples to find the cause; the count says how many there were.
MAX_EXAMPLES = 20


@dataclass
class Invariant:
    key: str
    title: str
    checked: int = 0
    violations: list[str] = field(default_factory=list)

    @property
    def held(self) -> bool:
        return not self.violations

    def fail(self, detail: str) -> None:
        self.violations.append(detail)


@dataclass
class LedgerReport:
    invariants: dict[str, Invariant]
    totals: dict[str, int]

    @property
    def ok(self) -> bool:
        return all(invariant.held for invariant in self.invariants.values())

    @property
    def broken(self) -> set[str]:
        return {key for key, invariant in self.invariants.items() if not invariant.held}


@dataclass(frozen=True)
class DeadLetterFact:
    message_id: str
    event_id: UUID | None
    job_id: UUID | None


@dataclass(frozen=True)
class QueueFacts:
    messages_left: int  # visible, in flight or delayed on the jobs queue
    dlq_depth: int
    dead_letters: tuple[DeadLetterFact, ...] = ()


@dataclass(frozen=True)
class Expectations:
    """What the run's traffic explains. ``acknowledged``: every job a tenant was told was accepted, with the
    states its invoice explains (empty: either extraction outcome); None takes every job found as
    acknowledged. ``explained_failures``: the FAILED_TERMINAL reasons the run's faults can cause."""

    acknowledged: Mapping[UUID, frozenset[str]] | None = None
    cancel_requested: frozenset[UUID] = frozenset()
    explained_failures: frozenset[str] = frozenset({"attempts_exhausted"})


@dataclass
class _Job:
    row: dict[str, Any]
    attempts: list[dict[str, Any]] = field(default_factory=list)
    requested: list[dict[str, Any]] = field(default_factory=list)
    terminal_events: list[dict[str, Any]] = field(default_factory=list)

    @property
    def job_id(self) -> UUID:
        job_id: UUID = self.row["job_id"]
        return job_id

    @property
    def state(self) -> str:
        state: str = self.row["state"]
        return state

    @property
    def label(self) -> str:
        return f"job {self.job_id} ({self.state})"

    @property
    def committed_attempts(self) -> list[int]:
        """Attempts whose fenced completion committed a result (a discarded stale answer is not one)."""
        return [a["attempt"] for a in self.attempts if a["outcome"] == "ok"]


@dataclass(frozen=True)
class _Batches:
    """The run's provider batches and their members, by batch id and by (batch id, job id)."""

    batches: dict[UUID, dict[str, Any]]
    members: dict[tuple[UUID, UUID], dict[str, Any]]


@dataclass(frozen=True)
class _Facts:
    jobs: dict[UUID, _Job]
    events: list[dict[str, Any]]
    inbox: set[UUID]
    endpoints: list[dict[str, Any]]
    deliveries: list[dict[str, Any]]
    erp_effects: Sequence[ErpEffect]
    queues: QueueFacts


def read_queues(sqs: SQSClient, queue_url: str, dlq_url: str, max_letters: int = 100) -> QueueFacts:
    """The jobs queue's leftovers and a look at each dead letter (made visible again afterwards)."""

    def depth(url: str) -> int:
        attributes = sqs.get_queue_attributes(
            QueueUrl=url,
            AttributeNames=[
                "ApproximateNumberOfMessages",
                "ApproximateNumberOfMessagesNotVisible",
                "ApproximateNumberOfMessagesDelayed",
            ],
        )["Attributes"]
        return sum(int(value) for value in attributes.values())

    letters: list[DeadLetterFact] = []
    handles: list[str] = []
    while len(letters) < max_letters:
        batch = sqs.receive_message(
            QueueUrl=dlq_url, MaxNumberOfMessages=10, WaitTimeSeconds=0, VisibilityTimeout=30
        ).get("Messages", [])
        if not batch:
            break
        for message in batch:
            handles.append(message["ReceiptHandle"])
            letters.append(_dead_letter(message["MessageId"], message["Body"]))
    for handle in handles:
        sqs.change_message_visibility(QueueUrl=dlq_url, ReceiptHandle=handle, VisibilityTimeout=0)
    return QueueFacts(depth(queue_url), depth(dlq_url), tuple(letters))


def read_type_queues(
    sqs: SQSClient, queues: Mapping[str, tuple[str, str]], max_letters: int = 100
) -> QueueFacts:
    """``read_queues`` over every job type's (queue, DLQ) pair, added up."""
    facts = [read_queues(sqs, url, dlq_url, max_letters) for url, dlq_url in queues.values()]
    return QueueFacts(
        sum(f.messages_left for f in facts),
        sum(f.dlq_depth for f in facts),
        tuple(letter for f in facts for letter in f.dead_letters),
    )


def read_batch_pool(dynamodb: DynamoDBClient, table: str) -> dict[str, PoolState]:
    """Every item of the Batch API's pool in the limiter's table (one per provider pool and model), as the
    pool reads them. The table must be the run's own: a holder the run's database does not know is a leak."""
    items: dict[str, PoolState] = {}
    paginator = dynamodb.get_paginator("scan")
    pages = paginator.paginate(
        TableName=table,
        ConsistentRead=True,
        FilterExpression="begins_with(#key, :prefix)",
        ExpressionAttributeNames={"#key": KEY},
        ExpressionAttributeValues={":prefix": {"S": BATCH_POOL_PREFIX}},
    )
    for page in pages:
        for item in page.get("Items", []):
            items[item[KEY]["S"]] = PoolState.from_item(item)
    return items


def _dead_letter(message_id: str, body: str) -> DeadLetterFact:
    try:
        event = OutboxEvent.model_validate_json(body)
    except ValidationError:
        return DeadLetterFact(message_id, None, None)
    try:
        job_id = event.job_data().job_id
    except (ValidationError, UnknownEventType):
        return DeadLetterFact(message_id, event.event_id, None)
    return DeadLetterFact(message_id, event.event_id, job_id)


def check_ledger(
    db: Database,
    tenant_ids: Sequence[UUID],
    *,
    queues: QueueFacts,
    erp_effects: Sequence[ErpEffect],
    expectations: Expectations | None = None,
    batch_pool: Mapping[str, PoolState] | None = None,
) -> LedgerReport:
    """``batch_pool``: the Batch API's budget as ``read_batch_pool`` read it after the run; None when the run
    cannot read it (then that invariant checks nothing)."""
    expectations = expectations or Expectations()
    params = {"tenant_ids": list(tenant_ids)}
    q = dev_queries()
    with db.transaction() as conn:
        job_rows = conn.execute(q.ledger_jobs, params).fetchall()
        attempt_rows = conn.execute(q.ledger_attempts, params).fetchall()
        events = conn.execute(q.ledger_events, params).fetchall()
        inbox = {row["event_id"] for row in conn.execute(q.ledger_inbox, params)}
        endpoints = conn.execute(q.ledger_endpoints, params).fetchall()
        deliveries = conn.execute(q.ledger_deliveries, params).fetchall()
        batch_rows = conn.execute(q.ledger_batches, params).fetchall()
        member_rows = conn.execute(q.ledger_batch_members, params).fetchall()

    batches = _Batches(
        {row["batch_id"]: row for row in batch_rows},
        {(row["batch_id"], row["job_id"]): row for row in member_rows},
    )
    jobs = {row["job_id"]: _Job(row) for row in job_rows}
    for attempt in attempt_rows:
        if attempt["job_id"] in jobs:
            jobs[attempt["job_id"]].attempts.append(attempt)
    for event in events:
        job = jobs.get(event["aggregate_id"])
        if job is None:
            continue
        if event["event_type"] == EXTRACTION_REQUESTED:
            job.requested.append(event)
        elif event["event_type"] in WEBHOOK_EVENT_TYPES:
            job.terminal_events.append(event)

    for job in jobs.values():
        job.terminal_events.sort(key=lambda event: (event["created_at"], str(event["event_id"])))

    invariants = {key: Invariant(key, title) for key, title in TITLES.items()}
    _check_jobs(invariants[JOBS_EXPLAINED], jobs, expectations)
    _check_results(invariants[NO_DUPLICATE_RESULTS], jobs.values(), batches)
    facts = _Facts(jobs, events, inbox, endpoints, deliveries, erp_effects, queues)
    _check_events(invariants[NO_LOST_EVENTS], facts)
    _check_attempts(invariants[ATTEMPTS_CONSISTENT], jobs.values())
    _check_erp(invariants[NO_DUPLICATE_ERP_EFFECTS], jobs, deliveries, erp_effects)
    _check_queues(invariants[QUEUES_RECONCILED], jobs, queues)
    _check_batches(invariants[BATCHES_SETTLED], jobs.values(), batches)
    if batch_pool is not None:
        _check_batch_pool(invariants[BATCH_POOL_RELEASED], batch_pool, batches)

    states = Counter(job.state for job in jobs.values())
    totals = {
        "jobs": len(jobs),
        **{f"jobs {state}": count for state, count in sorted(states.items())},
        "attempts": len(attempt_rows),
        "outbox events": len(events),
        "events published": sum(1 for e in events if e["published_at"] is not None),
        "deliveries": len(deliveries),
        "deliveries delivered": sum(1 for d in deliveries if d["state"] == DeliveryState.DELIVERED),
        "ERP effects": len(erp_effects),
        "dead letters": queues.dlq_depth,
        "batch-tier jobs": sum(1 for job in jobs.values() if job.row["service_tier"] == BATCH_TIER),
        "provider batches": len(batches.batches),
        "batch lines": len(batches.members),
    }
    return LedgerReport(invariants, totals)


def _check_jobs(invariant: Invariant, jobs: Mapping[UUID, _Job], expectations: Expectations) -> None:
    acknowledged = expectations.acknowledged
    if acknowledged is not None:
        for job_id in sorted(set(acknowledged) - set(jobs), key=str):
            invariant.fail(f"job {job_id} was acknowledged to its tenant but is not in the database")
        for job_id in sorted(set(jobs) - set(acknowledged), key=str):
            invariant.fail(f"job {job_id} is in the database but its tenant was never told of it")
    for job in jobs.values():
        invariant.checked += 1
        problem = _unexplained(job, expectations)
        if problem:
            invariant.fail(f"{job.label}: {problem}")


def _unexplained(job: _Job, expectations: Expectations) -> str | None:
    state = job.state
    if state not in FINISHED_STATES:
        return "not terminal"
    result_attempt = job.row["result_attempt"]
    if state in EXTRACTED_STATES:
        if result_attempt is None:
            return "ended by extraction but has no result"
        explained = (expectations.acknowledged or {}).get(job.job_id) or EXTRACTED_STATES
        if state not in explained:
            return f"its invoice explains {' or '.join(sorted(explained))}"
        return None
    if result_attempt is not None:
        return f"has a result from attempt {result_attempt}"
    if state == JobState.CANCELLED:
        return None if job.job_id in expectations.cancel_requested else "cancelled, but nobody asked"
    reason = (job.row["last_error"] or {}).get("reason")
    if not reason:
        return "failed without a recorded reason"
    if reason not in expectations.explained_failures:
        return f"failed for {reason!r}, which nothing in this run explains"
    if reason == "attempts_exhausted":
        if job.row["attempt"] < job.row["max_attempts"]:
            return f"attempts_exhausted after {job.row['attempt']} of {job.row['max_attempts']} attempts"
        if job.committed_attempts:
            return "attempts_exhausted, yet an attempt committed a result"
    return None


def _check_results(invariant: Invariant, jobs: Iterable[_Job], batches: _Batches) -> None:
    for job in jobs:
        invariant.checked += 1
        committed = job.committed_attempts
        if len(committed) > 1:
            invariant.fail(f"{job.label}: attempts {committed} each committed a result")
        result_attempt = job.row["result_attempt"]
        if result_attempt is not None and committed and result_attempt != committed[-1]:
            invariant.fail(
                f"{job.label}: the result is attempt {result_attempt}'s, attempt {committed[-1]} committed"
            )
        if result_attempt is not None:
            problem = _not_from_last_claim(job, result_attempt, batches)
            if problem:
                invariant.fail(f"{job.label}: {problem}")
        if len(job.terminal_events) > 1 + _reviewed(job):
            invariant.fail(f"{job.label}: finished {len(job.terminal_events)} times (terminal events)")


def _not_from_last_claim(job: _Job, result_attempt: int, batches: _Batches) -> str | None:
    """Why the job's result is not the accepted answer of its last claim, under that claim's fence (for a
    batch line: the line's own attempt and fence, its custom id); None when it is. A finished job keeps the
    fence of its last claim: only moving a RUNNING job on (reaper, release, return, cancel) raises it."""
    records = {attempt["attempt"]: attempt for attempt in job.attempts}
    record = records.get(result_attempt)
    if record is None:
        return f"the result is attempt {result_attempt}'s, which has no attempt record"
    last = max(records)
    if result_attempt != last:
        return f"the result is attempt {result_attempt}'s, but the last claim was attempt {last}"
    # An attempt never closed is the attempt counters' invariant; one closed otherwise gave no answer.
    if record["outcome"] is not None and record["outcome"] != "ok":
        return f"the result is attempt {result_attempt}'s, whose record says {record['outcome']!r}"
    if record["fence"] != job.row["fence"]:
        return (
            f"the result is attempt {result_attempt}'s under fence {record['fence']}, but the job's last "
            f"claim holds fence {job.row['fence']}"
        )
    if record["batch_id"] is not None:
        member = batches.members.get((record["batch_id"], job.job_id))
        if member is None:
            return f"the result came from batch {record['batch_id']}, which never carried the job"
        if (member["attempt"], member["fence"]) != (record["attempt"], record["fence"]):
            return (
                f"the result is attempt {result_attempt}'s under fence {record['fence']}, but its batch line "
                f"was written for attempt {member['attempt']} under fence {member['fence']}"
            )
    return None


def _check_events(invariant: Invariant, facts: _Facts) -> None:
    _check_publication(invariant, facts)
    _check_job_events(invariant, facts.jobs)
    _check_deliveries(invariant, facts)


def _check_publication(invariant: Invariant, facts: _Facts) -> None:
    """Every event left the outbox, and every extraction.requested reached a worker (or the DLQ)."""
    dead_events = {letter.event_id for letter in facts.queues.dead_letters if letter.event_id}
    for event in facts.events:
        invariant.checked += 1
        if event["published_at"] is None:
            invariant.fail(f"event {event['event_id']} ({event['event_type']}) was never published")
        elif event["event_type"] == EXTRACTION_REQUESTED and not (
            event["event_id"] in facts.inbox or event["event_id"] in dead_events
        ):
            invariant.fail(f"event {event['event_id']} of job {event['aggregate_id']} never reached a worker")


def _reviewed(job: _Job) -> bool:
    """The job left review by a decision: its first outcome event sent it to review, its state is another."""
    first = job.terminal_events[0]["event_type"] if job.terminal_events else None
    return first == EXTRACTION_REVIEW_REQUIRED and job.state != JobState.REVIEW_REQUIRED


def _check_job_events(invariant: Invariant, jobs: Mapping[UUID, _Job]) -> None:
    """One extraction.requested per job, and a finished job's event says how it ended (a reviewed job's
    two: review_required, then its decision's)."""
    for job in jobs.values():
        if len(job.requested) != 1:
            invariant.fail(f"{job.label}: {len(job.requested)} extraction.requested events")
        if _reviewed(job):
            kinds = [(event["event_type"], event["state"]) for event in job.terminal_events]
            decided = (DECISION_EVENTS.get(JobState(job.state)), job.state)
            if kinds != [(EXTRACTION_REVIEW_REQUIRED, JobState.REVIEW_REQUIRED.value), decided]:
                invariant.fail(f"{job.label}: reviewed, but its events say {kinds}")
            continue
        expected = ENDING_EVENTS.get(JobState(job.state))
        if expected is None:
            if job.terminal_events:
                invariant.fail(f"{job.label}: has a terminal event but did not end by one")
            continue
        if not job.terminal_events:
            invariant.fail(f"{job.label}: finished without its {expected} event")
        for event in job.terminal_events:
            if event["event_type"] != expected or event["state"] != job.state:
                invariant.fail(f"{job.label}: its event says {event['event_type']} / {event['state']}")


def _check_deliveries(invariant: Invariant, facts: _Facts) -> None:
    """Each webhook event fanned out to every endpoint subscribed to it, and each delivery reached the ERP."""
    by_event: dict[UUID, int] = Counter(delivery["event_id"] for delivery in facts.deliveries)
    for event in facts.events:
        if event["event_type"] not in WEBHOOK_EVENT_TYPES:
            continue
        wanted = sum(1 for endpoint in facts.endpoints if _subscribed(endpoint, event))
        found = by_event.get(event["event_id"], 0)
        if found < wanted:
            invariant.fail(
                f"event {event['event_id']} of job {event['aggregate_id']} has {found} of {wanted} deliveries"
            )
    applied = {effect.webhook_id for effect in facts.erp_effects}
    for delivery in facts.deliveries:
        invariant.checked += 1
        if delivery["state"] != DeliveryState.DELIVERED:
            invariant.fail(
                f"delivery {delivery['delivery_id']} is {delivery['state']} after {delivery['attempts']} "
                "attempts"
            )
        elif str(delivery["delivery_id"]) not in applied:
            invariant.fail(f"delivery {delivery['delivery_id']} is DELIVERED, but the ERP never received it")


def _subscribed(endpoint: dict[str, Any], event: dict[str, Any]) -> bool:
    created: datetime = endpoint["created_at"]
    deleted: datetime | None = endpoint["deleted_at"]
    return (
        endpoint["tenant_id"] == event["tenant_id"]
        and event["event_type"] in endpoint["event_types"]
        and endpoint["enabled"]
        and created <= event["created_at"]
        and (deleted is None or deleted > event["created_at"])
    )


def _check_attempts(invariant: Invariant, jobs: Iterable[_Job]) -> None:
    for job in jobs:
        invariant.checked += 1
        numbers = [a["attempt"] for a in job.attempts]
        if job.row["attempt"] != len(numbers):
            invariant.fail(f"{job.label}: counter says {job.row['attempt']}, {len(numbers)} attempt records")
        elif numbers != list(range(1, len(numbers) + 1)):
            invariant.fail(f"{job.label}: attempt records {numbers} are not 1..{len(numbers)}")
        fences = [a["fence"] for a in job.attempts]
        if any(later <= earlier for earlier, later in itertools.pairwise(fences)):
            invariant.fail(f"{job.label}: fences {fences} do not rise with the attempts")
        if job.state in FINISHED_STATES:
            unclosed = [a["attempt"] for a in job.attempts if a["finished_at"] is None or not a["outcome"]]
            if unclosed:
                invariant.fail(f"{job.label}: attempts {unclosed} were never closed")


def _check_erp(
    invariant: Invariant,
    jobs: Mapping[UUID, _Job],
    deliveries: Sequence[dict[str, Any]],
    erp_effects: Sequence[ErpEffect],
) -> None:
    known = {str(d["delivery_id"]) for d in deliveries}
    by_job: dict[str, list[ErpEffect]] = defaultdict(list)
    for effect in erp_effects:
        invariant.checked += 1
        by_job[effect.job_id].append(effect)
        if effect.webhook_id not in known:
            invariant.fail(f"the ERP acted on webhook {effect.webhook_id}, which no delivery explains")
            continue
        effect_job = _uuid(effect.job_id)
        job = jobs.get(effect_job) if effect_job is not None else None
        if job is not None and effect.state != job.state:
            invariant.fail(f"the ERP booked {effect.state} for {job.label}")
    for job_id, effects in by_job.items():
        if len(effects) > 1:
            ids = ", ".join(e.webhook_id for e in effects)
            invariant.fail(f"the ERP acted {len(effects)} times on job {job_id} (webhooks {ids})")


def _uuid(value: str) -> UUID | None:
    try:
        return UUID(value)
    except ValueError:
        return None


def _check_queues(invariant: Invariant, jobs: Mapping[UUID, _Job], queues: QueueFacts) -> None:
    invariant.checked += 1 + queues.dlq_depth
    if queues.messages_left:
        invariant.fail(f"{queues.messages_left} messages still on the jobs queue")
    unread = queues.dlq_depth - len(queues.dead_letters)
    if unread > 0:
        invariant.fail(f"{unread} dead letters could not be read")
    for letter in queues.dead_letters:
        job = jobs.get(letter.job_id) if letter.job_id is not None else None
        # The database owns the work: a dead letter whose job finished anyway only lost a signal.
        if job is None or job.state not in FINISHED_STATES:
            state = job.state if job else "no such job"
            invariant.fail(f"dead letter {letter.message_id} (job {letter.job_id}: {state})")


def _check_batches(invariant: Invariant, jobs: Iterable[_Job], batches: _Batches) -> None:
    """Every batch the provider ended, and settled after it; every member with its outcome; and no batch-tier
    job still RUNNING (in a batch or not), so nothing waits on a batch that nobody follows."""
    ended = {state.value for state in ENDED_STATES}
    for batch_id, batch in batches.batches.items():
        invariant.checked += 1
        if batch["state"] not in ended:
            invariant.fail(f"batch {batch_id} is still {batch['state']} (holder {batch['holder']})")
        elif batch["settled_at"] is None:
            invariant.fail(f"batch {batch_id} ended {batch['state']} but was never settled")
    for (batch_id, job_id), member in batches.members.items():
        invariant.checked += 1
        if member["settled_at"] is None:
            invariant.fail(
                f"job {job_id}'s line in batch {batch_id} (attempt {member['attempt']}, fence "
                f"{member['fence']}) has no outcome"
            )
    for job in jobs:
        if job.row["service_tier"] != BATCH_TIER:
            continue
        invariant.checked += 1
        if job.state == JobState.RUNNING:
            where = f" in batch {job.row['batch_id']}" if job.row["batch_id"] else ""
            invariant.fail(f"{job.label}: a batch-tier job left RUNNING{where}")


def _check_batch_pool(invariant: Invariant, pool: Mapping[str, PoolState], batches: _Batches) -> None:
    """Once a batch is settled its enqueued tokens are back in the Batch API's budget; a holding of an open
    batch is that batch's own (its invariant speaks for it), one of no batch at all is a leak."""
    open_batches = {str(b) for b, batch in batches.batches.items() if batch["settled_at"] is None}
    invariant.checked += 1
    for key, state in sorted(pool.items()):
        invariant.checked += 1
        for holder, held in sorted(state.holders.items()):
            if holder in open_batches:
                continue
            why = "settled" if _uuid(holder) in batches.batches else "unknown to the database"
            invariant.fail(f"{key} holds {held.tokens} tokens for batch {holder}, which is {why}")
        held_total = sum(held.tokens for held in state.holders.values())
        if state.enqueued != held_total:
            invariant.fail(f"{key} counts {state.enqueued} tokens enqueued, its holders {held_total}")
