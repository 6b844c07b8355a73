"""Leasing and executing jobs against real PostgreSQL and moto S3, with an in-memory LLM fake.

Provider faults over real HTTP are in test_execution_provider.py (the simulated provider)."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import boto3
import psycopg
import pytest

from tests.support import invoice_request, job_row
from tollgate.core.clock import FakeClock, SystemClock, new_id
from tollgate.core.documents import S3DocumentStore
from tollgate.core.metrics import RecordedMetrics
from tollgate.core.retry import RetryPolicy
from tollgate.events import ExtractionFailed
from tollgate.execution.attempt import AttemptEnd, ExecutionDeps, ModelRouter, run_attempt
from tollgate.execution.leasing import claim_next_job
from tollgate.execution.limiter.base import Denied, Reservation
from tollgate.execution.limiter.local import InProcessLimiter
from tollgate.execution.llm.client import LlmResult, OutcomeClass
from tollgate.jobtypes.invoice_extraction.schema import Invoice
from tollgate.scheduler.tick import SchedulerDeps, run_scheduler
from tollgate.tenants.suppliers import add_supplier
from tollgate_dev.local.runtime import LOCAL_BUCKET

pytestmark = pytest.mark.integration

TEXT = """Nordwind Logistik GmbH
Invoice no. DE-2026-00001
Invoice date: 2026-03-01
Pallet transport  2  420.00  840.00 EUR
Subtotal 840.00 EUR
VAT 19.0% 159.60 EUR
Total due 999.60 EUR
IBAN DE89370400440532013000"""


# An invoice whose printed total does not add up: a faithful extraction of it fails only the arithmetic.
MISPRINTED = TEXT.replace("Total due 999.60 EUR", "Total due 999.70 EUR")


def _on_page(quote: str) -> dict[str, object]:
    return {"page": 1, "quote": quote}


def extraction(**changes) -> Invoice:
    data = {
        "supplier": {"name": "Nordwind Logistik GmbH", "evidence": _on_page("Nordwind Logistik GmbH")},
        "invoice_number": "DE-2026-00001",
        "invoice_number_evidence": _on_page("Invoice no. DE-2026-00001"),
        "issue_date": "2026-03-01",
        "issue_date_evidence": _on_page("Invoice date: 2026-03-01"),
        "due_date": None,
        "due_date_evidence": None,
        "currency": "EUR",
        "currency_evidence": _on_page("Total due 999.60 EUR"),
        "iban": "DE89370400440532013000",
        "iban_evidence": _on_page("IBAN DE89370400440532013000"),
        "line_items": [
            {
                "description": "Pallet transport",
                "quantity": "2",
                "unit_price": "420.00",
                "amount": "840.00",
                "evidence": _on_page("Pallet transport  2  420.00  840.00 EUR"),
            },
        ],
        "subtotal": "840.00",
        "subtotal_evidence": _on_page("Subtotal 840.00 EUR"),
        "tax": {"rate_percent": "19.0", "amount": "159.60", "evidence": _on_page("VAT 19.0% 159.60 EUR")},
        "total": "999.60",
        "total_evidence": _on_page("Total due 999.60 EUR"),
    }
    data.update(changes)
    return Invoice.model_validate(data)


def misprinted_extraction() -> Invoice:
    printed = _on_page("Total due 999.70 EUR")
    return extraction(total="999.70", total_evidence=printed, currency_evidence=printed)


class ScriptedLlm:
    """An LLM fake that answers from a script, one result per call, and records what it was asked."""

    def __init__(self, *results: LlmResult) -> None:
        self.results = list(results)
        self.calls: list[tuple[tuple[str, ...], str]] = []
        self.called = asyncio.Event()
        self.hold: asyncio.Event | None = None

    async def extract(self, task, model, timeout, max_tokens):
        self.calls.append((task.pages, model))
        self.called.set()
        if self.hold is not None:
            await self.hold.wait()
        result = self.results.pop(0)
        result.model = model
        return result


def ok(invoice: Invoice | None = None) -> LlmResult:
    return LlmResult(
        OutcomeClass.OK,
        "",
        output=invoice or extraction(),
        input_tokens=900,
        output_tokens=300,
        latency_ms=12,
        request_id="req_123",
    )


class ManualTicks:
    """Heartbeat sleeps that end only when the test says so, and tell the test when one begins."""

    def __init__(self) -> None:
        self.tick = asyncio.Event()
        self.entries = 0
        self.entered = asyncio.Condition()

    async def sleep(self, seconds: float) -> None:
        async with self.entered:
            self.entries += 1
            self.entered.notify_all()
        await self.tick.wait()
        self.tick.clear()

    async def sleeping(self, count: int) -> None:
        async with self.entered:
            await self.entered.wait_for(lambda: self.entries >= count)


# Bounds a scenario's waits on real I/O (PostgreSQL, moto) on a loaded machine; it runs out only when a test
# is failing, and then says what never happened.
SCENARIO_SECONDS = 120.0


async def within(awaitable, awaited: str):
    try:
        return await asyncio.wait_for(awaitable, SCENARIO_SECONDS)
    except TimeoutError:
        raise AssertionError(f"{awaited} (waited {SCENARIO_SECONDS:.0f} s)") from None


def make_deps(system_db, llm, clock=None, sleep=None, **overrides) -> ExecutionDeps:
    clock = clock or SystemClock()
    fields = {
        "db": system_db,
        "documents": S3DocumentStore(boto3.client("s3"), LOCAL_BUCKET),
        "llm": llm,
        "limiter": InProcessLimiter(
            clock, requests_per_minute=1000, tokens_per_minute=10**8, max_in_flight=10
        ),
        "clock": clock,
        "new_id": new_id,
        "retry_policy": RetryPolicy(base_seconds=2, cap_seconds=60, attempt_timeout_seconds=30),
        "jitter": lambda low, high: high,
        "router": ModelRouter("small-model", "large-model", escalate=False),
        "prices": {"small-model": (0.4, 1.6), "large-model": (2.0, 8.0)},
        "worker_id": "worker-a",
        "provider_pool": "test",
        "lease_seconds": 60,
        "heartbeat_seconds": 3600,
        "max_output_tokens": 1000,
    }
    if sleep is not None:
        fields["sleep"] = sleep
    fields.update(overrides)
    return ExecutionDeps(**fields)


def claim(deps, cap=8):
    return claim_next_job(
        deps.db, deps.clock, worker_id=deps.worker_id, lease_seconds=deps.lease_seconds, tenant_cap=cap
    )


@pytest.fixture
def supplier_tenant(tenant, system_db):
    add_supplier(system_db, tenant.tenant_id, "Nordwind Logistik GmbH", "DE89370400440532013000", new_id)
    return tenant


# The job's own events; live notifications' job.state_changed.v1 rows commit in the same transactions (same
# created_at), and tests/integration/test_job_state_events.py checks them.
OWN_EVENTS = "WHERE event_type <> 'job.state_changed.v1'"


def rows(url, sql, *args):
    with psycopg.connect(url) as conn:
        return conn.execute(sql, args).fetchall()


def test_a_claim_leases_the_job_with_a_new_fence_and_opens_an_attempt(supplier_tenant, system_db, clean_db):
    job_id = supplier_tenant.client.submit(invoice_request(TEXT), "k").json["job_id"]
    deps = make_deps(system_db, ScriptedLlm())

    job = claim(deps)

    assert str(job.job_id) == job_id and (job.attempt, job.fence) == (1, 1)
    row = job_row(clean_db, job_id)
    assert row["state"] == "RUNNING" and row["lease_owner"] == "worker-a"
    assert rows(clean_db, "SELECT attempt, fence, worker_id FROM job_attempts") == [(1, 1, "worker-a")]
    assert claim(deps) is None, "a leased job is not handed out twice"


def test_a_valid_extraction_succeeds_with_result_attempt_record_and_event(
    supplier_tenant, system_db, clean_db
):
    job_id = supplier_tenant.client.submit(invoice_request(TEXT), "k").json["job_id"]
    llm = ScriptedLlm(ok())
    deps = make_deps(system_db, llm)

    report = asyncio.run(run_attempt(deps, claim(deps)))

    assert report.end is AttemptEnd.SUCCEEDED
    assert llm.calls[0] == ((TEXT,), "small-model"), "a short one-page invoice goes to the small model"
    job = job_row(clean_db, job_id)
    assert job["state"] == "SUCCEEDED" and job["lease_until"] is None and job["finished_at"] is not None
    [(model, tokens_in, tokens_out, cost, request_id, outcome)] = rows(
        clean_db,
        "SELECT model, input_tokens, output_tokens, cost_usd, provider_request_id, outcome FROM job_attempts",
    )
    assert (model, tokens_in, tokens_out, request_id, outcome) == ("small-model", 900, 300, "req_123", "ok")
    assert float(cost) == pytest.approx((900 * 0.4 + 300 * 1.6) / 1e6)
    [(result, reasons, policy)] = rows(
        clean_db, "SELECT result, review_reasons, policy_version FROM extraction_results"
    )
    assert result["total"] == "999.60" and reasons == [] and policy == "validation.v3"
    assert rows(clean_db, f"SELECT event_type FROM outbox_events {OWN_EVENTS} ORDER BY created_at")[-1] == (
        "extraction.completed.v1",
    )
    assert (
        supplier_tenant.client.request("GET", f"/extraction-jobs/{job_id}/result").json["result"]["total"]
        == "999.60"
    )


def test_a_failed_validation_goes_to_review_with_reasons(supplier_tenant, system_db, clean_db):
    job_id = supplier_tenant.client.submit(invoice_request(MISPRINTED), "k").json["job_id"]
    deps = make_deps(system_db, ScriptedLlm(ok(misprinted_extraction())))

    report = asyncio.run(run_attempt(deps, claim(deps)))

    assert report.end is AttemptEnd.REVIEW_REQUIRED
    assert [r["code"] for r in report.reasons] == ["total_mismatch"]
    assert job_row(clean_db, job_id)["state"] == "REVIEW_REQUIRED"
    [(reasons,)] = rows(clean_db, "SELECT review_reasons FROM extraction_results")
    assert reasons[0]["code"] == "total_mismatch"
    events = rows(
        clean_db,
        f"SELECT event_type, payload->'review_reasons' FROM outbox_events {OWN_EVENTS} ORDER BY created_at",
    )
    assert events[-1] == ("extraction.review_required.v1", ["total_mismatch"])


def test_a_worker_whose_lease_was_taken_over_cannot_commit(supplier_tenant, system_db, clean_db):
    job_id = supplier_tenant.client.submit(invoice_request(TEXT), "k").json["job_id"]
    clock = FakeClock(SystemClock().now())
    stale = make_deps(system_db, ScriptedLlm(ok(extraction(total="1.00"))), clock=clock, worker_id="stale")
    fresh = make_deps(system_db, ScriptedLlm(ok()), clock=clock, worker_id="fresh")
    stale_job = claim(stale)

    clock.advance(61)  # the stale worker stalls past its lease; the reaper hands the job on
    run_scheduler(SchedulerDeps(system_db, clock, new_id, RecordedMetrics(), RetryPolicy(), lambda lo, hi: 0))
    fresh_job = claim(fresh)
    fresh_report = asyncio.run(run_attempt(fresh, fresh_job))
    stale_report = asyncio.run(run_attempt(stale, stale_job))

    assert fresh_job.fence > stale_job.fence
    assert (fresh_report.end, stale_report.end) == (AttemptEnd.SUCCEEDED, AttemptEnd.LOST)
    assert rows(clean_db, "SELECT result->>'total' FROM extraction_results") == [("999.60",)]
    assert job_row(clean_db, job_id)["state"] == "SUCCEEDED"
    outcomes = dict(rows(clean_db, "SELECT worker_id, outcome FROM job_attempts"))
    assert outcomes == {"stale": "discarded_stale", "fresh": "ok"}


def test_a_heartbeat_that_finds_the_fence_moved_stops_the_attempt(supplier_tenant, system_db, clean_db):
    job_id = supplier_tenant.client.submit(invoice_request(TEXT), "k").json["job_id"]
    llm = ScriptedLlm(ok())
    ticks = ManualTicks()
    deps = make_deps(system_db, llm, sleep=ticks.sleep)

    async def scenario():
        llm.hold = asyncio.Event()  # the provider call hangs until cancelled
        attempt = asyncio.create_task(run_attempt(deps, claim(deps)))
        await within(llm.called.wait(), "the attempt never called the provider")
        await asyncio.to_thread(
            lambda: psycopg.connect(clean_db, autocommit=True).execute(
                "UPDATE extraction_jobs SET fence = fence + 1 WHERE job_id = %s", (job_id,)
            )
        )
        ticks.tick.set()  # the next heartbeat runs now
        return await within(attempt, "the attempt did not stop after its heartbeat found the fence moved")

    report = asyncio.run(scenario())

    assert report.end is AttemptEnd.LOST
    assert rows(clean_db, "SELECT count(*) FROM extraction_results") == [(0,)]
    assert job_row(clean_db, job_id)["state"] == "RUNNING", "the new owner's state is left alone"
    assert rows(clean_db, "SELECT outcome FROM job_attempts") == [("discarded_stale",)]


def test_a_heartbeat_extends_the_lease_while_the_fence_matches(supplier_tenant, system_db, clean_db):
    job_id = supplier_tenant.client.submit(invoice_request(TEXT), "k").json["job_id"]
    llm = ScriptedLlm(ok())
    ticks = ManualTicks()
    clock = FakeClock(SystemClock().now())
    deps = make_deps(system_db, llm, clock=clock, sleep=ticks.sleep)

    async def scenario():
        llm.hold = asyncio.Event()
        attempt = asyncio.create_task(run_attempt(deps, claim(deps)))
        await llm.called.wait()
        await ticks.sleeping(1)
        clock.advance(45)
        ticks.tick.set()
        await ticks.sleeping(2)  # the heartbeat renewed and went back to sleep
        renewed = await asyncio.to_thread(job_row, clean_db, job_id)
        llm.hold.set()
        return renewed, await attempt

    renewed, report = asyncio.run(
        within(scenario(), "the heartbeat did not renew the lease, or the attempt did not finish after it")
    )

    assert renewed["lease_until"] == clock.now() + timedelta(seconds=60)
    assert report.end is AttemptEnd.SUCCEEDED


@pytest.mark.parametrize(
    ("outcome", "retry_after"),
    [
        (OutcomeClass.THROTTLED, 40.0),
        (OutcomeClass.TIMEOUT, None),
        (OutcomeClass.TRANSIENT, None),
        (OutcomeClass.INVALID_OUTPUT, None),
    ],
)
def test_a_retryable_failure_schedules_a_persisted_retry(
    supplier_tenant, system_db, clean_db, outcome, retry_after
):
    job_id = supplier_tenant.client.submit(invoice_request(TEXT), "k").json["job_id"]
    clock = FakeClock(SystemClock().now())
    deps = make_deps(
        system_db,
        ScriptedLlm(LlmResult(outcome, "", retry_after_seconds=retry_after, error="x")),
        clock=clock,
    )

    report = asyncio.run(run_attempt(deps, claim(deps)))

    job = job_row(clean_db, job_id)
    assert report.end is AttemptEnd.RETRY_SCHEDULED
    assert job["state"] == "RETRY_SCHEDULED" and job["attempt"] == 1
    expected_wait = max(retry_after or 0, 2.0)  # jitter picks the ceiling (2 s); Retry-After is a floor
    assert job["next_attempt_at"] == clock.now() + timedelta(seconds=expected_wait)
    assert rows(clean_db, "SELECT outcome FROM job_attempts") == [(outcome.value,)]


def test_a_refusal_ends_the_job_without_retrying(supplier_tenant, system_db, clean_db):
    job_id = supplier_tenant.client.submit(invoice_request(TEXT), "k").json["job_id"]
    deps = make_deps(system_db, ScriptedLlm(LlmResult(OutcomeClass.REFUSED, "", error="refused")))

    assert asyncio.run(run_attempt(deps, claim(deps))).end is AttemptEnd.FAILED_TERMINAL
    assert job_row(clean_db, job_id)["last_error"]["reason"] == "refused"
    event_type, payload = rows(
        clean_db, f"SELECT event_type, payload FROM outbox_events {OWN_EVENTS} ORDER BY created_at"
    )[-1]
    assert event_type == "extraction.failed.v1"
    # The scheduler's failed event is held to the same fields (tests/integration/test_scheduler.py).
    assert set(payload) == set(ExtractionFailed.model_fields)
    assert ExtractionFailed.parse(payload).model_dump(include={"attempt", "reason", "review_reasons"}) == {
        "attempt": 1,
        "reason": "refused",
        "review_reasons": [],
    }


def test_the_deadline_stops_a_doomed_retry(supplier_tenant, system_db, clean_db):
    # 60 s deadline; a retry would need 2 s of backoff plus a 30 s attempt after 40 s have passed.
    job_id = supplier_tenant.client.submit(invoice_request(TEXT, deadline_seconds=60), "k").json["job_id"]
    clock = FakeClock(SystemClock().now())
    deps = make_deps(system_db, ScriptedLlm(LlmResult(OutcomeClass.TRANSIENT, "", error="503")), clock=clock)
    job = claim(deps)
    clock.advance(40)

    assert asyncio.run(run_attempt(deps, job)).end is AttemptEnd.FAILED_TERMINAL
    assert job_row(clean_db, job_id)["last_error"]["reason"] == "deadline_exceeded"


def test_attempts_are_counted_across_retries_until_the_budget_is_spent(supplier_tenant, system_db, clean_db):
    job_id = supplier_tenant.client.submit(invoice_request(TEXT), "k").json["job_id"]
    clock = FakeClock(SystemClock().now())
    llm = ScriptedLlm(*[LlmResult(OutcomeClass.TRANSIENT, "", error="503") for _ in range(5)])
    ends = []
    for _ in range(5):
        deps = make_deps(system_db, llm, clock=clock)
        ends.append(asyncio.run(run_attempt(deps, claim(deps))).end)
        clock.advance(120)

    assert ends == [AttemptEnd.RETRY_SCHEDULED] * 4 + [AttemptEnd.FAILED_TERMINAL]
    job = job_row(clean_db, job_id)
    assert (job["attempt"], job["last_error"]["reason"]) == (5, "attempts_exhausted")
    assert rows(clean_db, "SELECT count(*) FROM job_attempts") == [(5,)]


def test_one_heavy_tenant_does_not_hold_back_a_light_tenants_single_job(make_tenant, system_db, clean_db):
    heavy, light = make_tenant("heavy"), make_tenant("light")
    for i in range(30):
        heavy.client.submit(invoice_request(f"{TEXT}\nref {i}"), f"h{i}")
    light_job = light.client.submit(invoice_request(f"{TEXT}\nlight"), "l").json["job_id"]
    deps = make_deps(system_db, ScriptedLlm())

    first_two = [str(claim(deps, cap=4).job_id) for _ in range(2)]

    assert light_job in first_two


def test_a_tenant_at_its_in_flight_cap_gets_nothing_more(make_tenant, system_db, clean_db):
    heavy = make_tenant("heavy")
    for i in range(5):
        heavy.client.submit(invoice_request(f"{TEXT}\nref {i}"), f"h{i}")
    deps = make_deps(system_db, ScriptedLlm())

    claimed = [claim(deps, cap=2) for _ in range(3)]

    assert [c is not None for c in claimed] == [True, True, False]


def test_higher_priority_runs_first_within_a_tenant(supplier_tenant, system_db, clean_db):
    low = supplier_tenant.client.submit(invoice_request(f"{TEXT}\nlow", priority=1), "low").json["job_id"]
    high = supplier_tenant.client.submit(invoice_request(f"{TEXT}\nhigh", priority=9), "high").json["job_id"]
    deps = make_deps(system_db, ScriptedLlm())

    assert [str(claim(deps).job_id), str(claim(deps).job_id)] == [high, low]


def test_a_refused_api_key_pauses_every_worker_and_keeps_the_job(supplier_tenant, system_db, clean_db):
    job_id = supplier_tenant.client.submit(invoice_request(TEXT), "k").json["job_id"]
    clock = FakeClock(SystemClock().now())
    limiter = InProcessLimiter(clock, requests_per_minute=1000, tokens_per_minute=10**8, max_in_flight=10)
    refused = LlmResult(OutcomeClass.PROVIDER_AUTH, "", error="401: invalid api key")
    deps = make_deps(system_db, ScriptedLlm(refused), clock=clock, limiter=limiter)

    report = asyncio.run(run_attempt(deps, claim(deps)))

    assert report.end is AttemptEnd.RETRY_SCHEDULED, "our key is not the job's fault"
    assert job_row(clean_db, job_id)["state"] == "RETRY_SCHEDULED"
    paused = limiter.try_acquire(Reservation("test", 100))
    assert isinstance(paused, Denied) and paused.reason == "cooldown" and paused.wait_seconds >= 59


def test_provider_statuses_are_classified():
    from tollgate.execution.llm.client import classify_status

    assert classify_status(401) is OutcomeClass.PROVIDER_AUTH
    assert classify_status(403) is OutcomeClass.PROVIDER_AUTH
    assert classify_status(429) is OutcomeClass.THROTTLED
    assert classify_status(503) is OutcomeClass.TRANSIENT
    assert classify_status(400) is OutcomeClass.TERMINAL
    assert OutcomeClass.PROVIDER_AUTH.retryable and not OutcomeClass.TERMINAL.retryable


def test_on_stop_a_worker_drains_then_hands_back_what_it_cannot_finish(supplier_tenant, system_db, clean_db):
    from tollgate.execution.worker import WorkerConfig, run_worker
    from tollgate.ingress.consumer import IngressDeps
    from tollgate_dev.local.aws import create_jobs_queues

    job_id = supplier_tenant.client.submit(invoice_request(TEXT), "k").json["job_id"]
    llm = ScriptedLlm(ok())
    llm.hold = asyncio.Event()  # the provider never answers before the drain time is up
    deps = make_deps(system_db, llm)
    queues = create_jobs_queues(f"drain-{new_id().hex[:8]}")
    ingress = IngressDeps(system_db, boto3.client("sqs"), queues.url, SystemClock(), wait_seconds=0)

    async def scenario():
        stop = asyncio.Event()
        worker = asyncio.create_task(
            run_worker(
                [ingress], deps, WorkerConfig(slots=1, tenant_cap=8, idle_seconds=0.05, drain_seconds=0), stop
            )
        )
        # the job is claimed and its call is in flight
        await within(llm.called.wait(), "the worker never claimed the job and called the provider")
        stop.set()  # SIGTERM
        await within(worker, "the worker did not stop after its drain time")

    asyncio.run(scenario())

    job = job_row(clean_db, job_id)
    assert job["state"] == "RETRY_SCHEDULED"
    assert job["last_error"] == {"reason": "released_on_shutdown"}
    assert job["attempt"] == 1 and job["lease_until"] is None
    assert rows(clean_db, "SELECT outcome FROM job_attempts") == [("released",)]


def test_a_job_released_on_its_last_attempt_can_still_be_claimed(supplier_tenant, system_db, clean_db):
    from tollgate.execution.leasing import release_job

    job_id = supplier_tenant.client.submit(invoice_request(TEXT), "k").json["job_id"]
    with psycopg.connect(clean_db, autocommit=True) as conn:
        conn.execute("UPDATE extraction_jobs SET max_attempts = 1 WHERE job_id = %s", (job_id,))
    deps = make_deps(system_db, ScriptedLlm(ok()))
    held = claim(deps)
    assert held.attempt == held.max_attempts == 1

    assert release_job(system_db, deps.clock, held)
    again = claim(deps)

    assert again is not None and again.job_id == held.job_id and again.attempt == 2
    report = asyncio.run(run_attempt(deps, again))
    assert report.end is AttemptEnd.SUCCEEDED
    assert rows(clean_db, "SELECT attempt, outcome FROM job_attempts ORDER BY attempt") == [
        (1, "released"),
        (2, "ok"),
    ]


def test_a_document_store_that_does_not_answer_schedules_a_retry_without_calling_the_provider(
    supplier_tenant, system_db, clean_db
):
    import socket

    from botocore.config import Config

    # Over the row limit, so the document is an S3 object the worker has to fetch.
    job_id = supplier_tenant.client.submit(invoice_request(TEXT + "\nTerms apply." * 4000), "k").json[
        "job_id"
    ]
    with socket.socket() as probe:  # a port nothing listens on: S3 refuses the connection
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    unreachable = boto3.client(
        "s3", endpoint_url=f"http://127.0.0.1:{port}", config=Config(retries={"max_attempts": 1})
    )
    llm = ScriptedLlm(ok())
    deps = make_deps(system_db, llm, documents=S3DocumentStore(unreachable, LOCAL_BUCKET))

    report = asyncio.run(run_attempt(deps, claim(deps)))

    assert report.end is AttemptEnd.RETRY_SCHEDULED, "the object is still there; only the store was away"
    assert llm.calls == []
    job = job_row(clean_db, job_id)
    assert job["state"] == "RETRY_SCHEDULED" and job["lease_until"] is None
    assert rows(clean_db, "SELECT outcome FROM job_attempts") == [("transient",)]
