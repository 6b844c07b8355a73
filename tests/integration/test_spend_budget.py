"""Monthly spend budgets against real PostgreSQL: concurrent accepts never pass a tenant's budget, a new month
reopens admission, 80% and 100% are announced once each, and the worker starts no call that would cross."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import boto3
import psycopg
import pytest

from tests.integration.test_execution import TEXT, claim, make_deps, ok, rows
from tests.support import invoice_request
from tollgate.accept.models import CreateJobRequest
from tollgate.accept.service import AcceptanceDeps, AcceptanceLimits, accept_job
from tollgate.core.clock import FakeClock, SystemClock, new_id
from tollgate.core.documents import S3DocumentStore
from tollgate.core.errors import SpendBudgetExhausted
from tollgate.core.metrics import SPEND_BUDGET_STOPS, SPEND_THRESHOLDS_CROSSED, RecordedMetrics
from tollgate.execution.attempt import AttemptEnd, run_attempt
from tollgate.execution.llm.client import LlmResult
from tollgate.tenants.suppliers import add_supplier
from tollgate.usage.service import set_monthly_budget
from tollgate.usage.spend import next_month_start, seconds_until_next_month
from tollgate_dev.local.runtime import LOCAL_BUCKET

pytestmark = pytest.mark.integration


@pytest.fixture
def supplier_tenant(tenant, system_db):
    add_supplier(system_db, tenant.tenant_id, "Nordwind Logistik GmbH", "DE89370400440532013000", new_id)
    return tenant


def _reserved(url, job_id) -> Decimal:
    [(reserved,)] = rows(url, "SELECT reserved_usd FROM extraction_jobs WHERE job_id = %s", job_id)
    return reserved


def test_concurrent_accepts_near_the_limit_never_admit_past_the_budget(tenant, system_db, clean_db):
    # given a budget with room for three jobs' estimates and a half (one job measures the estimate, then is
    # cancelled, which gives its reservation back)
    probe = tenant.client.submit(invoice_request(TEXT), "probe").json["job_id"]
    estimate = _reserved(clean_db, probe)
    assert tenant.client.request("POST", f"/extraction-jobs/{probe}/cancel").status == 200
    budget = estimate * Decimal("3.5")
    set_monthly_budget(system_db, tenant.tenant_id, budget)

    # when ten accepts race for it
    with ThreadPoolExecutor(max_workers=10) as pool:
        answers = list(pool.map(lambda i: tenant.client.submit(invoice_request(TEXT), f"k{i}"), range(10)))

    # then exactly three are admitted: the reservations never add up past the budget (the bound is exact: the
    # check and the reservation happen under the tenant's acceptance lock)
    assert sorted(a.status for a in answers) == [202] * 3 + [429] * 7
    [(reserved,)] = rows(clean_db, "SELECT reserved_usd FROM tenant_spend")
    assert reserved == estimate * 3 <= budget
    refused = next(a for a in answers if a.status == 429)
    assert refused.json["type"].endswith("spend-budget-exhausted")
    retry_after = int(refused.header("Retry-After"))
    assert 0 < retry_after <= seconds_until_next_month(SystemClock().now()) + 5


def _acceptance(app_db, clock) -> AcceptanceDeps:
    limits = AcceptanceLimits(
        default_deadline_seconds=3600,
        max_deadline_seconds=7 * 24 * 3600,
        max_document_bytes=2 * 1024 * 1024,
        document_row_max_bytes=32 * 1024,
        max_output_tokens=4096,
        default_max_attempts=5,
        tenant_max_pending_jobs=1000,
        tenant_max_pending_bytes=10**9,
        tenant_max_pending_tokens=10**9,
        system_max_backlog=10**6,
        admission_retry_after_seconds=30,
        model_prices={"large-model": (2.0, 8.0)},
    )
    return AcceptanceDeps(
        db=app_db,
        documents=S3DocumentStore(boto3.client("s3"), LOCAL_BUCKET),
        limits=limits,
        clock=clock,
        new_id=new_id,
    )


def test_a_month_rollover_reopens_admission(tenant, app_db, system_db, clean_db):
    # given a tenant whose budget holds one job, a minute before the month ends
    clock = FakeClock(datetime(2026, 1, 31, 23, 59, tzinfo=UTC))
    deps = _acceptance(app_db, clock)
    request = CreateJobRequest.model_validate(invoice_request(TEXT))
    first = accept_job(deps, tenant.tenant_id, "jan-1", request).job
    set_monthly_budget(system_db, tenant.tenant_id, _reserved(clean_db, first.job_id) * Decimal("1.5"))

    # when a second job comes in January, it is refused until February
    with pytest.raises(SpendBudgetExhausted) as refused:
        accept_job(deps, tenant.tenant_id, "jan-2", request)
    assert refused.value.retry_after == 60

    # then the first instant of February admits it, against February's own row
    clock.advance(60)
    second = accept_job(deps, tenant.tenant_id, "feb-1", request).job
    assert second.state == "READY"
    months = rows(clean_db, "SELECT month, reserved_usd > 0 FROM tenant_spend ORDER BY month")
    assert [(m.isoformat(), held) for m, held in months] == [("2026-01-01", True), ("2026-02-01", True)]


class TwoAtOnce:
    """An LLM fake whose calls answer only once two are in flight (so both passed the budget check)."""

    def __init__(self, *results: LlmResult) -> None:
        self.results = list(results)
        self.calls = 0
        self.both = asyncio.Condition()

    async def extract(self, pages, model, timeout, max_tokens):
        async with self.both:
            self.calls += 1
            self.both.notify_all()
            await self.both.wait_for(lambda: self.calls >= 2)
        result = self.results.pop(0)
        result.model = model
        return result


def _big() -> LlmResult:
    # Close to the job's estimate (its tokens at the dearest price), so two calls cross 80% and then 100%.
    result = ok()
    result.input_tokens, result.output_tokens = 4000, 900
    return result


def test_thresholds_are_announced_once_each(supplier_tenant, system_db, clean_db):
    # given two jobs, and a budget that each call fits alone (priced alike, input and output)
    for key in ("a", "b"):
        supplier_tenant.client.submit(invoice_request(TEXT), key)
    [(estimated_tokens,)] = rows(clean_db, "SELECT max(estimated_tokens) FROM extraction_jobs")
    price = (1.0, 1.0)
    set_monthly_budget(system_db, supplier_tenant.tenant_id, Decimal(estimated_tokens + 1000) / 1_000_000)
    metrics = RecordedMetrics()
    llm = TwoAtOnce(_big(), _big())
    deps = make_deps(system_db, llm, prices={"small-model": price}, metrics=metrics)

    # when both run at once: the first crosses 80%, the second 100%
    async def both():
        return await asyncio.gather(run_attempt(deps, claim(deps)), run_attempt(deps, claim(deps)))

    reports = asyncio.run(both())

    # then each threshold has one event, written with the cost that crossed it
    assert {r.end for r in reports} == {AttemptEnd.SUCCEEDED}
    events = rows(
        clean_db,
        "SELECT payload->>'threshold_percent', aggregate_id FROM outbox_events "
        "WHERE event_type = 'tenant.spend_threshold.v1' ORDER BY (payload->>'threshold_percent')::int",
    )
    assert events == [("80", supplier_tenant.tenant_id), ("100", supplier_tenant.tenant_id)]
    assert metrics.counts[SPEND_THRESHOLDS_CROSSED] == 2


def test_the_worker_starts_no_call_that_would_cross_the_budget(supplier_tenant, system_db, clean_db):
    # given a job accepted before its tenant's budget was cut below one call's estimate
    job_id = supplier_tenant.client.submit(invoice_request(TEXT), "k").json["job_id"]
    set_monthly_budget(system_db, supplier_tenant.tenant_id, Decimal("0.0001"))
    now = SystemClock().now()
    with psycopg.connect(clean_db) as conn:  # the job may wait until the next month
        conn.execute(
            "UPDATE extraction_jobs SET deadline_at = %s WHERE job_id = %s",
            (next_month_start(now) + timedelta(days=1), job_id),
        )
    metrics = RecordedMetrics()
    llm = TwoAtOnce()
    deps = make_deps(system_db, llm, metrics=metrics)

    # when a worker claims it
    report = asyncio.run(run_attempt(deps, claim(deps)))

    # then no call went out, and the job waits for the next month with its attempt given back
    assert llm.calls == 0
    assert report.end is AttemptEnd.RETRY_SCHEDULED
    [(state, next_at, reason, attempt, max_attempts)] = rows(
        clean_db,
        "SELECT state, next_attempt_at, last_error->>'outcome', attempt, max_attempts FROM extraction_jobs",
    )
    assert (state, next_at, reason) == ("RETRY_SCHEDULED", next_month_start(now), "spend_budget_exhausted")
    assert rows(clean_db, "SELECT outcome, input_tokens FROM job_attempts") == [
        ("spend_budget_exhausted", None)
    ]
    assert metrics.counts[SPEND_BUDGET_STOPS] == 1
    assert max_attempts == 5 and attempt == 1


def test_a_worker_fails_a_job_whose_deadline_comes_before_the_budget_reopens(
    supplier_tenant, system_db, clean_db
):
    supplier_tenant.client.submit(invoice_request(TEXT), "k")
    set_monthly_budget(system_db, supplier_tenant.tenant_id, Decimal("0"))
    now = SystemClock().now()
    with psycopg.connect(clean_db) as conn:
        deadline = min(now + timedelta(hours=1), next_month_start(now) - timedelta(seconds=1))
        conn.execute("UPDATE extraction_jobs SET deadline_at = %s", (deadline,))
    deps = make_deps(system_db, TwoAtOnce())

    report = asyncio.run(run_attempt(deps, claim(deps)))

    assert report.end is AttemptEnd.FAILED_TERMINAL
    [(state, reason)] = rows(clean_db, "SELECT state, last_error->>'reason' FROM extraction_jobs")
    assert (state, reason) == ("FAILED_TERMINAL", "spend_budget_exhausted")
    [(event_reason,)] = rows(
        clean_db, "SELECT payload->>'reason' FROM outbox_events WHERE event_type = 'extraction.failed.v1'"
    )
    assert event_reason == "spend_budget_exhausted"
    [(reserved,)] = rows(clean_db, "SELECT reserved_usd FROM tenant_spend")
    assert reserved == 0, "a finished job gives its reservation back"
