"""The ledger check against a real database, SQS and DynamoDB on moto, an ERP over HTTP and the simulated
provider's Batch API: a clean run keeps every promise, and each kind of broken promise - a second result, a
lost outbox event, an unexplained job, an attempt counter that disagrees, a duplicate ERP effect, a message
left behind, a provider batch never settled, a result that is not its last claim's, a batch budget never
given back - is caught by its own invariant and by no other."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import secrets
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from uuid import UUID

import boto3
import psycopg
import pytest

from tests.integration.test_batch_path import (
    BATCH_DEADLINE_SECONDS,
    COMPLETION_SECONDS,
    batch_deps,
    poll_until_settled,
    prepare_and_submit,
)
from tests.integration.test_execution import TEXT, ScriptedLlm, claim, make_deps, ok, rows
from tests.support import invoice_request
from tollgate.core.clock import FakeClock, SystemClock, new_id
from tollgate.delivery.attempts import AttemptDeps, attempt_delivery
from tollgate.delivery.deliveries import WebhookDispatcher
from tollgate.delivery.sender import WebhookSender
from tollgate.delivery.signing import sign
from tollgate.events import EXTRACTION_REQUESTED, JOB_STATE_CHANGED, WEBHOOK_EVENT_TYPES
from tollgate.execution.attempt import run_attempt
from tollgate.execution.batch.deps import BatchDeps
from tollgate.execution.limiter.batch_pool import DynamoDbBatchPool, Enqueue, Enqueued, Limits
from tollgate.execution.llm.client import LlmResult, OutcomeClass
from tollgate.ingress.consumer import IngressDeps, ingest_once
from tollgate.outbox.fanout import NoSubscriber
from tollgate.outbox.relay import RelayDeps, relay_outbox
from tollgate.outbox.sqs import SqsFifoPublisher
from tollgate.tenants.suppliers import add_supplier
from tollgate_dev.chaos.erp import ErpEndpoint, ErpLog
from tollgate_dev.chaos.ledger import (
    ATTEMPTS_CONSISTENT,
    BATCH_INVARIANTS,
    BATCH_POOL_RELEASED,
    BATCHES_SETTLED,
    JOBS_EXPLAINED,
    NO_DUPLICATE_ERP_EFFECTS,
    NO_DUPLICATE_RESULTS,
    NO_LOST_EVENTS,
    QUEUES_RECONCILED,
    TITLES,
    Expectations,
    LedgerReport,
    check_ledger,
    read_batch_pool,
    read_queues,
)
from tollgate_dev.local.aws import JobsQueues, create_jobs_queues, create_limiter_table
from tollgate_dev.local.client import ApiClient
from tollgate_dev.samples import SUPPLIERS, generate_invoices, request_body
from tollgate_dev.simulator.batches import BatchSimulation
from tollgate_dev.simulator.server import SimulatedProvider, SimulatorConfig

pytestmark = pytest.mark.integration

SUCCEEDED = frozenset({"SUCCEEDED"})


class DeliverNow:
    """Step Functions stand-in for these tests: a started delivery makes its attempt at once."""

    def __init__(self, deps: AttemptDeps) -> None:
        self.deps = deps

    def start(self, delivery_id: UUID, name: str) -> None:
        attempt_delivery(self.deps, delivery_id)


@dataclass
class World:
    """Two invoices taken through the real pipeline: accepted, relayed to SQS, taken in, extracted, their
    webhooks delivered to the tenant's ERP."""

    owner_url: str
    system_db: object
    tenant_id: UUID
    client: ApiClient
    queues: JobsQueues
    relay: RelayDeps
    erp: ErpLog
    endpoint: ErpEndpoint
    secret: str
    job_ids: list[UUID]
    acknowledged: dict[UUID, frozenset[str]] = field(default_factory=dict)
    forgotten: set[str] = field(default_factory=set)
    # The limiter table holding the Batch API's budget, read by the check when a batch world set it.
    pool_table: str | None = None

    def submit(self, key: str) -> UUID:
        job_id = UUID(self.client.submit(invoice_request(TEXT), key).json["job_id"])
        self.acknowledged[job_id] = SUCCEEDED
        return job_id

    def run_pipeline(self, *results: LlmResult) -> None:
        """Relay, ingress and one attempt per result, then relay again so the webhooks go out."""
        relay_outbox(self.relay)
        sqs = boto3.client("sqs")
        for _ in range(10):
            taken = ingest_once(
                IngressDeps(self.system_db, sqs, self.queues.url, SystemClock(), wait_seconds=0)
            )  # type: ignore[arg-type]
            if not taken.received:
                break
        for result in results:
            deps = make_deps(self.system_db, ScriptedLlm(result))
            asyncio.run(run_attempt(deps, claim(deps)))
        relay_outbox(self.relay)

    def sql(self, statement: str, *args: object) -> None:
        with psycopg.connect(self.owner_url) as conn:
            conn.execute(statement, args)  # type: ignore[arg-type]

    def check(self, **changes: object) -> LedgerReport:
        expectations = {"acknowledged": self.acknowledged, **changes}
        pool = read_batch_pool(boto3.client("dynamodb"), self.pool_table) if self.pool_table else None
        return check_ledger(
            self.system_db,  # type: ignore[arg-type]
            [self.tenant_id],
            queues=read_queues(boto3.client("sqs"), self.queues.url, self.queues.dlq_url),
            erp_effects=[e for e in self.erp.effects if e.webhook_id not in self.forgotten],
            expectations=Expectations(**expectations),  # type: ignore[arg-type]
            batch_pool=pool,
        )

    def post_to_erp(self, webhook_id: str, body: bytes) -> int:
        headers = sign(self.secret, webhook_id, SystemClock().now(), body)
        result = WebhookSender(allow_private_targets=True).post(
            f"{self.endpoint.url}/erp", body, {**headers, "Content-Type": "application/json"}
        )
        assert result.status is not None
        return result.status


@pytest.fixture
def world(make_tenant, system_db, clean_db, local_aws):
    tenant = make_tenant("ledger")
    add_supplier(system_db, tenant.tenant_id, "Nordwind Logistik GmbH", "DE89370400440532013000", new_id)
    created = tenant.client.request(
        "POST", "/webhook-endpoints", json_body={"url": "http://127.0.0.1:9/pending"}
    ).json
    erp = ErpLog()
    endpoint = ErpEndpoint(created["secret"], erp)
    tenant.client.request(
        "PATCH", f"/webhook-endpoints/{created['endpoint_id']}", json_body={"url": f"{endpoint.url}/erp"}
    )
    queues = create_jobs_queues(f"ledger-{secrets.token_hex(4)}")
    attempts = AttemptDeps(
        db=system_db,
        clock=SystemClock(),
        sender=WebhookSender(allow_private_targets=True),
        jitter=lambda low, high: 0.0,
        time_scale=0.0,
    )
    relay = RelayDeps(
        db=system_db,
        clock=SystemClock(),
        routes={
            EXTRACTION_REQUESTED: SqsFifoPublisher(boto3.client("sqs"), queues.url),
            **dict.fromkeys(WEBHOOK_EVENT_TYPES, WebhookDispatcher(system_db, DeliverNow(attempts))),
            # No live notifier in this world: confirmed to nobody, as the relay does without its queue.
            JOB_STATE_CHANGED: NoSubscriber(),
        },
    )
    world = World(
        clean_db,
        system_db,
        tenant.tenant_id,
        tenant.client,
        queues,
        relay,
        erp,
        endpoint,
        created["secret"],
        [],
    )
    world.job_ids = [world.submit("first"), world.submit("second")]
    world.run_pipeline(ok(), ok())
    yield world
    endpoint.stop()


def effect_of(world: World, job_id: UUID):
    [effect] = [e for e in world.erp.effects if e.job_id == str(job_id)]
    return effect


def test_a_clean_run_keeps_every_promise(world):
    report = world.check()

    assert report.ok, {k: v.violations for k, v in report.invariants.items()}
    assert set(report.invariants) == set(TITLES)
    assert all(report.invariants[key].checked > 0 for key in set(TITLES) - BATCH_INVARIANTS)
    assert report.totals["jobs SUCCEEDED"] == 2
    assert report.totals["deliveries delivered"] == 2 and report.totals["ERP effects"] == 2


def test_a_second_committed_result_is_caught(world):
    # A stale worker whose answer was stored as well as the owner's: two attempts each committed one.
    job_id = world.job_ids[0]
    world.sql("UPDATE extraction_jobs SET attempt = 2, fence = fence + 1 WHERE job_id = %s", job_id)
    world.sql(
        "INSERT INTO job_attempts (job_id, attempt, tenant_id, fence, worker_id, started_at, finished_at,"
        " outcome) SELECT job_id, 2, tenant_id, fence, 'stale-worker', now(), now(), 'ok'"
        " FROM extraction_jobs WHERE job_id = %s",
        job_id,
    )

    report = world.check()

    assert report.broken == {NO_DUPLICATE_RESULTS}
    assert any(
        str(job_id) in v and "each committed a result" in v
        for v in report.invariants[NO_DUPLICATE_RESULTS].violations
    )


def _unpublished(world: World) -> str:
    world.sql(
        "UPDATE outbox_events SET published_at = NULL WHERE aggregate_id = %s AND event_type <> %s",
        world.job_ids[0],
        EXTRACTION_REQUESTED,
    )
    return "was never published"


def _finished_without_event(world: World) -> str:
    world.sql(
        "DELETE FROM outbox_events WHERE aggregate_id = %s AND event_type <> %s",
        world.job_ids[0],
        EXTRACTION_REQUESTED,
    )
    return "finished without its extraction.completed.v1 event"


def _never_reached_a_worker(world: World) -> str:
    world.sql("DELETE FROM execution_inbox WHERE job_id = %s", world.job_ids[0])
    return "never reached a worker"


def _delivery_left_pending(world: World) -> str:
    world.sql(
        "UPDATE webhook_deliveries SET state = 'PENDING', delivered_at = NULL WHERE event_id IN"
        " (SELECT event_id FROM outbox_events WHERE aggregate_id = %s)",
        world.job_ids[0],
    )
    return "is PENDING after 1 attempts"


def _erp_never_received(world: World) -> str:
    # The database says DELIVERED; the ERP's own log has no trace of it (a 3xx taken for success, say).
    world.forgotten.add(delivery_of(world, world.job_ids[0]))
    return "is DELIVERED, but the ERP never received it"


def delivery_of(world: World, job_id: UUID) -> str:
    with psycopg.connect(world.owner_url) as conn:
        row = conn.execute(
            "SELECT d.delivery_id FROM webhook_deliveries d JOIN outbox_events e USING (event_id)"
            " WHERE e.aggregate_id = %s",
            (job_id,),
        ).fetchone()
    assert row is not None
    return str(row[0])


@pytest.mark.parametrize(
    "lose",
    [
        _unpublished,
        _finished_without_event,
        _never_reached_a_worker,
        _delivery_left_pending,
        _erp_never_received,
    ],
)
def test_a_lost_outbox_event_is_caught(world, lose: Callable[[World], str]):
    expected = lose(world)

    report = world.check()

    assert report.broken == {NO_LOST_EVENTS}, report.invariants[NO_LOST_EVENTS].violations
    assert any(expected in v for v in report.invariants[NO_LOST_EVENTS].violations)


def _left_ready(world: World) -> dict[str, object]:
    # Accepted, relayed and taken in, but never run.
    world.submit("third")
    world.run_pipeline()
    return {}


def _failed_for_an_unexplained_reason(world: World) -> dict[str, object]:
    world.submit("third")
    world.run_pipeline(LlmResult(OutcomeClass.REFUSED, "", error="refused: no"))
    return {}


def _succeeded_where_review_was_due(world: World) -> dict[str, object]:
    return {"acknowledged": {**world.acknowledged, world.job_ids[0]: frozenset({"REVIEW_REQUIRED"})}}


def _never_acknowledged(world: World) -> dict[str, object]:
    return {"acknowledged": {world.job_ids[0]: SUCCEEDED}}


def _cancelled_unasked(world: World) -> dict[str, object]:
    job_id = world.submit("third")
    assert world.client.request("POST", f"/extraction-jobs/{job_id}/cancel").status == 200
    world.run_pipeline()
    return {}


@pytest.mark.parametrize(
    ("break_it", "expected"),
    [
        (_left_ready, "(READY): not terminal"),
        (_failed_for_an_unexplained_reason, "failed for 'refused'"),
        (_succeeded_where_review_was_due, "its invoice explains REVIEW_REQUIRED"),
        (_never_acknowledged, "its tenant was never told of it"),
        (_cancelled_unasked, "cancelled, but nobody asked"),
    ],
)
def test_an_unexplained_job_is_caught(world, break_it, expected):
    changes = break_it(world)

    report = world.check(**changes)

    assert report.broken == {JOBS_EXPLAINED}, {k: v.violations for k, v in report.invariants.items()}
    assert any(expected in v for v in report.invariants[JOBS_EXPLAINED].violations)


def test_a_cancellation_that_was_asked_for_is_explained(world):
    job_id = world.submit("third")
    world.client.request("POST", f"/extraction-jobs/{job_id}/cancel")
    world.run_pipeline()

    assert world.check(cancel_requested=frozenset({job_id})).ok


def test_exhausted_attempts_explain_a_failure_only_when_every_attempt_was_made(world):
    job_id = world.submit("third")
    world.sql("UPDATE extraction_jobs SET max_attempts = 2 WHERE job_id = %s", job_id)
    throttled = LlmResult(OutcomeClass.THROTTLED, "", error="429", retry_after_seconds=0.0)
    world.run_pipeline(throttled)
    world.sql("UPDATE extraction_jobs SET next_attempt_at = now() WHERE job_id = %s", job_id)
    world.run_pipeline(LlmResult(OutcomeClass.THROTTLED, "", error="429", retry_after_seconds=0.0))

    assert world.check().ok
    world.sql("UPDATE extraction_jobs SET max_attempts = 3 WHERE job_id = %s", job_id)
    report = world.check()
    assert report.broken == {JOBS_EXPLAINED}
    assert any(
        "attempts_exhausted after 2 of 3 attempts" in v for v in report.invariants[JOBS_EXPLAINED].violations
    )


@pytest.mark.parametrize(
    ("statement", "expected"),
    [
        ("UPDATE extraction_jobs SET attempt = 2 WHERE job_id = %s", "counter says 2, 1 attempt records"),
        (
            "UPDATE job_attempts SET finished_at = NULL, outcome = NULL WHERE job_id = %s",
            "attempts [1] were never closed",
        ),
    ],
)
def test_an_attempt_counter_that_disagrees_is_caught(world, statement, expected):
    world.sql(statement, world.job_ids[0])

    report = world.check()

    assert report.broken == {ATTEMPTS_CONSISTENT}
    assert any(expected in v for v in report.invariants[ATTEMPTS_CONSISTENT].violations)


def test_a_second_erp_effect_for_one_job_is_caught(world):
    # The same outcome under another webhook-id, as a second event or a second endpoint would send it.
    effect = effect_of(world, world.job_ids[0])
    body = json.dumps({"type": effect.event_type, "data": {"job_id": effect.job_id, "state": effect.state}})

    assert world.post_to_erp(str(new_id()), body.encode()) == 200
    report = world.check()

    assert report.broken == {NO_DUPLICATE_ERP_EFFECTS}
    assert any("acted 2 times on job" in v for v in report.invariants[NO_DUPLICATE_ERP_EFFECTS].violations)


def test_a_redelivery_under_the_same_webhook_id_is_no_second_effect_even_after_an_erp_restart(world):
    webhook_id = delivery_of(world, world.job_ids[0])
    world.endpoint.go_down()
    world.endpoint.come_back()

    assert world.post_to_erp(webhook_id, b'{"data": {}}') == 200
    assert world.erp.redeliveries == 1
    assert world.check().ok


def test_a_message_left_on_the_jobs_queue_is_caught(world):
    boto3.client("sqs").send_message(
        QueueUrl=world.queues.url, MessageBody="{}", MessageGroupId="g", MessageDeduplicationId="left"
    )

    report = world.check()

    assert report.broken == {QUEUES_RECONCILED}
    assert report.invariants[QUEUES_RECONCILED].violations == ["1 messages still on the jobs queue"]


def _reviewed_and_approved(world: World) -> UUID:
    """A third invoice whose extraction fails validation, approved by a reviewer, its webhooks sent."""
    from tests.integration.test_execution import extraction
    from tollgate.review.models import ReviewDecisionRequest
    from tollgate.review.service import ReviewDeps, Reviewer, decide_review, get_review

    job_id = world.submit("reviewed")
    world.run_pipeline(ok(extraction(total="999.70")))
    deps = ReviewDeps(world.system_db, None, SystemClock(), new_id)  # type: ignore[arg-type]
    version = get_review(deps, world.tenant_id, job_id).state_version
    request = ReviewDecisionRequest(decision="approve", note="checked against the paper invoice")
    decide_review(
        deps, world.tenant_id, job_id, request, expected_version=version, reviewer=Reviewer("ledger")
    )
    relay_outbox(world.relay)
    return job_id


def test_a_job_approved_by_a_reviewer_keeps_every_promise_and_reaches_the_erp_once(world):
    job_id = _reviewed_and_approved(world)

    report = world.check()

    assert report.ok, {k: v.violations for k, v in report.invariants.items()}
    assert report.totals["jobs SUCCEEDED"] == 3
    assert effect_of(world, job_id).state == "SUCCEEDED", "one effect: the ERP never saw it waiting"


def test_a_review_decision_that_announced_nothing_is_caught(world):
    job_id = _reviewed_and_approved(world)
    world.sql(
        "DELETE FROM outbox_events WHERE aggregate_id = %s AND event_type = 'extraction.completed.v1'", job_id
    )

    report = world.check()

    assert NO_LOST_EVENTS in report.broken
    assert any("reviewed, but its events say" in v for v in report.invariants[NO_LOST_EVENTS].violations)


# -- the batch path ------------------------------------------------------------------------------------


@dataclass
class BatchWorld:
    """The world's two invoices, and three more on the batch tier taken through the simulated provider's Batch
    API: claimed into one provider batch, followed to its end on a clock of its own, settled, their webhooks
    delivered; the Batch API's budget in DynamoDB on moto."""

    world: World
    deps: BatchDeps
    clock: FakeClock
    job_ids: list[UUID] = field(default_factory=list)

    def submit(self, count: int, seed: int) -> list[UUID]:
        job_ids = []
        for index, invoice in enumerate(generate_invoices(count, seed=seed, kinds=["clean"] * count)):
            body = request_body(invoice, service_tier="batch", deadline_seconds=BATCH_DEADLINE_SECONDS)
            answer = self.world.client.submit(body, f"batch-{seed}-{index}")
            job_ids.append(UUID(answer.json["job_id"]))
        self.world.acknowledged.update(dict.fromkeys(job_ids, SUCCEEDED))
        return job_ids

    def batch(self, job_id: UUID) -> tuple[UUID, str]:
        """The batch that carried ``job_id``, and its model."""
        [(batch_id, model)] = rows(
            self.world.owner_url,
            "SELECT b.batch_id, b.model FROM provider_batches b JOIN provider_batch_jobs m USING (batch_id)"
            " WHERE m.job_id = %s",
            job_id,
        )
        return batch_id, model

    def hold(self, holder: str, model: str, tokens: int) -> None:
        """Holds ``tokens`` of the model's Batch API budget for ``holder``, as a batcher does before upload."""
        held = self.deps.pool.try_enqueue(
            Enqueue(
                pool=self.deps.execution.provider_pool,
                model=model,
                holder=holder,
                tokens=tokens,
                expires_at=self.clock.now() + timedelta(hours=1),
            )
        )
        assert isinstance(held, Enqueued)


@pytest.fixture
def batch_world(world: World) -> Iterator[BatchWorld]:
    world.sql(
        "UPDATE tenants SET allowed_currencies = %s WHERE tenant_id = %s",
        sorted({s.currency for s in SUPPLIERS}),
        world.tenant_id,
    )
    for supplier in SUPPLIERS:
        add_supplier(world.system_db, world.tenant_id, supplier.name, supplier.iban, new_id)  # type: ignore[arg-type]
    world.pool_table = f"ledger-budget-{secrets.token_hex(4)}"
    dynamodb = boto3.client("dynamodb")
    create_limiter_table(dynamodb, world.pool_table)
    clock = FakeClock(SystemClock().now())
    config = SimulatorConfig(
        requests_per_minute=None,
        tokens_per_minute=None,
        batches=BatchSimulation(completion_seconds=COMPLETION_SECONDS),
    )
    with SimulatedProvider(config, clock=clock) as simulator:
        deps = batch_deps(world.system_db, simulator, clock)
        pool = DynamoDbBatchPool(dynamodb, world.pool_table, clock, Limits(10_000_000))
        batches = BatchWorld(world, dataclasses.replace(deps, pool=pool), clock)
        batches.job_ids = batches.submit(3, seed=11)
        world.run_pipeline()  # relayed and taken in
        claimed, _ = prepare_and_submit(batches.deps)
        assert [len(b.jobs) for b in claimed.batches] == [3]
        poll_until_settled(batches.deps, clock)
        relay_outbox(world.relay)  # their outcome events, delivered to the ERP
        yield batches
    dynamodb.delete_table(TableName=world.pool_table)


def test_a_clean_run_through_the_batch_path_keeps_every_promise(batch_world):
    report = batch_world.world.check()

    assert report.ok, {k: v.violations for k, v in report.invariants.items()}
    assert all(invariant.checked > 0 for invariant in report.invariants.values())
    assert report.totals["jobs SUCCEEDED"] == 5
    assert (report.totals["batch-tier jobs"], report.totals["provider batches"]) == (3, 1)
    assert report.totals["batch lines"] == 3


def _batch_never_settled(batches: BatchWorld) -> str:
    batches.world.sql("UPDATE provider_batches SET settled_at = NULL")
    return "ended completed but was never settled"


def _line_without_outcome(batches: BatchWorld) -> str:
    batches.world.sql(
        "UPDATE provider_batch_jobs SET settled_at = NULL, outcome = NULL WHERE job_id = %s",
        batches.job_ids[0],
    )
    return "has no outcome"


@pytest.mark.parametrize("unsettle", [_batch_never_settled, _line_without_outcome])
def test_a_provider_batch_or_line_left_unsettled_is_caught(batch_world, unsettle):
    expected = unsettle(batch_world)

    report = batch_world.world.check()

    assert report.broken == {BATCHES_SETTLED}, {k: v.violations for k, v in report.invariants.items()}
    assert any(expected in v for v in report.invariants[BATCHES_SETTLED].violations)


def test_a_batch_nobody_followed_to_its_end_is_caught_with_its_jobs_left_running(batch_world):
    # Given one more batch-tier job, claimed into a batch the provider completes, but no poller ever looks.
    [job_id] = batch_world.submit(1, seed=12)
    batch_world.world.run_pipeline()
    prepare_and_submit(batch_world.deps)
    relay_outbox(batch_world.world.relay)  # the claim's state change goes out, as a running relay sends it
    batch_world.clock.advance(COMPLETION_SECONDS)
    batch_id, _ = batch_world.batch(job_id)

    report = batch_world.world.check()

    # Then the batch, its line and the job are each caught; the job is also not terminal. The batch still
    # holds its tokens, which is its own business while it is open, not the budget's invariant.
    assert report.broken == {BATCHES_SETTLED, JOBS_EXPLAINED}
    violations = report.invariants[BATCHES_SETTLED].violations
    assert any(f"batch {batch_id} is still submitted" in v for v in violations)
    assert any(f"job {job_id}'s line in batch {batch_id}" in v for v in violations)
    assert any(
        f"job {job_id} (RUNNING): a batch-tier job left RUNNING in batch {batch_id}" in v for v in violations
    )
    [state] = read_batch_pool(boto3.client("dynamodb"), batch_world.world.pool_table).values()
    assert str(batch_id) in state.holders


def _answer_recorded_as_stale(batches: BatchWorld) -> str:
    # A second poller settling the same line would record its own (stale) answer over the accepted one.
    batches.world.sql(
        "UPDATE job_attempts SET outcome = 'discarded_stale' WHERE job_id = %s", batches.job_ids[0]
    )
    return "whose record says 'discarded_stale'"


def _line_of_an_earlier_claim(batches: BatchWorld) -> str:
    batches.world.sql(
        "UPDATE provider_batch_jobs SET fence = fence - 1 WHERE job_id = %s", batches.job_ids[0]
    )
    return "but its batch line was written for attempt 1 under fence"


def _fence_moved_after_the_result(batches: BatchWorld) -> str:
    batches.world.sql("UPDATE extraction_jobs SET fence = fence + 1 WHERE job_id = %s", batches.job_ids[0])
    return "but the job's last claim holds fence"


def _claimed_again_after_the_result(batches: BatchWorld) -> str:
    job_id = batches.job_ids[0]
    batches.world.sql("UPDATE extraction_jobs SET attempt = 2, fence = fence + 1 WHERE job_id = %s", job_id)
    batches.world.sql(
        "INSERT INTO job_attempts (job_id, attempt, tenant_id, fence, worker_id, started_at, finished_at,"
        " outcome) SELECT job_id, 2, tenant_id, fence, 'late-worker', now(), now(), 'discarded_stale'"
        " FROM extraction_jobs WHERE job_id = %s",
        job_id,
    )
    return "but the last claim was attempt 2"


@pytest.mark.parametrize(
    "misplace",
    [
        _answer_recorded_as_stale,
        _line_of_an_earlier_claim,
        _fence_moved_after_the_result,
        _claimed_again_after_the_result,
    ],
)
def test_a_result_that_is_not_its_last_claims_accepted_answer_is_caught(batch_world, misplace):
    expected = misplace(batch_world)

    report = batch_world.world.check()

    assert report.broken == {NO_DUPLICATE_RESULTS}, {k: v.violations for k, v in report.invariants.items()}
    assert any(
        str(batch_world.job_ids[0]) in v and expected in v
        for v in report.invariants[NO_DUPLICATE_RESULTS].violations
    )


def _kept_by_a_settled_batch(batches: BatchWorld) -> str:
    batch_id, model = batches.batch(batches.job_ids[0])
    batches.hold(str(batch_id), model, 500)
    return f"holds 500 tokens for batch {batch_id}, which is settled"


def _held_for_no_batch(batches: BatchWorld) -> str:
    _, model = batches.batch(batches.job_ids[0])
    holder = str(new_id())
    batches.hold(holder, model, 700)
    return f"holds 700 tokens for batch {holder}, which is unknown to the database"


@pytest.mark.parametrize("leak", [_kept_by_a_settled_batch, _held_for_no_batch])
def test_batch_budget_held_after_its_batch_was_settled_is_caught(batch_world, leak):
    expected = leak(batch_world)

    report = batch_world.world.check()

    assert report.broken == {BATCH_POOL_RELEASED}, {k: v.violations for k, v in report.invariants.items()}
    assert any(expected in v for v in report.invariants[BATCH_POOL_RELEASED].violations)
