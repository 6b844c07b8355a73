"""Usage aggregates against real PostgreSQL: every attempt's tokens and cost reach them exactly once (also a
stale worker's discarded record after the reaper closed its attempt), and so does a batch attempt's discount;
GET /usage and `tollgate usage` group and validate, and job views and results carry their totals."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from decimal import Decimal
from uuid import uuid4

import psycopg
import pytest
from typer.testing import CliRunner

from tests.integration.test_execution import (
    TEXT,
    ScriptedLlm,
    claim,
    make_deps,
    ok,
    rows,
)
from tests.support import invoice_request
from tollgate.cli.main import app
from tollgate.core.clock import FakeClock, SystemClock, new_id
from tollgate.core.metrics import RecordedMetrics
from tollgate.core.retry import RetryPolicy
from tollgate.execution.attempt import AttemptEnd, run_attempt
from tollgate.scheduler.tick import SchedulerDeps, run_scheduler
from tollgate.tenants.keys import Scope, create_key
from tollgate.tenants.suppliers import add_supplier
from tollgate.usage.pricing import batch_cost
from tollgate_dev.local.client import ApiClient

pytestmark = pytest.mark.integration


@pytest.fixture
def supplier_tenant(tenant, system_db):
    add_supplier(system_db, tenant.tenant_id, "Nordwind Logistik GmbH", "DE89370400440532013000", new_id)
    return tenant


# ok(): 900 input and 300 output tokens on the small model at (0.4, 1.6) USD per million.
OK_COST = Decimal("0.000840")


def _aggregates(url):
    [(attempts, tokens_in, tokens_out, cost)] = rows(
        url, "SELECT sum(attempts), sum(input_tokens), sum(output_tokens), sum(cost_usd) FROM usage_daily"
    )
    return attempts, tokens_in, tokens_out, cost


def _recount(url):
    [(attempts, tokens_in, tokens_out, cost)] = rows(
        url,
        "SELECT count(*), sum(coalesce(input_tokens, 0)), sum(coalesce(output_tokens, 0)), "
        "sum(coalesce(cost_usd, 0)) FROM job_attempts WHERE finished_at IS NOT NULL",
    )
    return attempts, tokens_in, tokens_out, cost


def test_a_stale_workers_discarded_record_reaches_the_aggregates_once(supplier_tenant, system_db, clean_db):
    # given a job whose first worker stalls past its lease, the reaper hands it on and a second one succeeds
    job_id = supplier_tenant.client.submit(invoice_request(TEXT), "k").json["job_id"]
    clock = FakeClock(SystemClock().now())
    stale = make_deps(system_db, ScriptedLlm(ok()), clock=clock, worker_id="stale")
    fresh = make_deps(system_db, ScriptedLlm(ok()), clock=clock, worker_id="fresh")
    stale_job = claim(stale)
    clock.advance(61)
    run_scheduler(SchedulerDeps(system_db, clock, new_id, RecordedMetrics(), RetryPolicy(), lambda lo, hi: 0))
    assert asyncio.run(run_attempt(fresh, claim(fresh))).end is AttemptEnd.SUCCEEDED

    # when the stale worker's answer arrives after the job completed
    assert asyncio.run(run_attempt(stale, stale_job)).end is AttemptEnd.LOST

    # then both attempts count once each, under the model they used, and the discarded cost is the job's too
    assert _aggregates(clean_db) == _recount(clean_db) == (2, 1800, 600, OK_COST * 2)
    assert rows(clean_db, "SELECT model, attempts FROM usage_daily WHERE attempts <> 0") == [
        ("small-model", 2)
    ]
    [(finished, completed, completed_cost)] = rows(
        clean_db, "SELECT finished_jobs, completed_jobs, completed_cost_usd FROM usage_jobs_daily"
    )
    assert (finished, completed, completed_cost) == (1, 1, OK_COST * 2)
    view = supplier_tenant.client.request("GET", f"/extraction-jobs/{job_id}").json
    assert view["usage"] == {
        "input_tokens": 1800,
        "output_tokens": 600,
        "cost_usd": "0.001680",
        "attempts": 2,
    }
    result = supplier_tenant.client.request("GET", f"/extraction-jobs/{job_id}/result").json
    assert result["usage"]["cost_usd"] == "0.001680"
    listed = supplier_tenant.client.request("GET", "/extraction-jobs").json["items"][0]
    assert listed["usage"]["attempts"] == 2


def test_get_usage_groups_by_job_type_and_model_with_cost_per_completed_job(
    supplier_tenant, make_tenant, system_db, clean_db
):
    # given two completed jobs of one tenant, and another tenant's job
    other = make_tenant("other")
    for key in ("a", "b"):
        supplier_tenant.client.submit(invoice_request(TEXT), key)
        deps = make_deps(system_db, ScriptedLlm(ok()))
        asyncio.run(run_attempt(deps, claim(deps)))
    other.client.submit(invoice_request(TEXT), "x")
    deps = make_deps(system_db, ScriptedLlm(ok()))
    asyncio.run(run_attempt(deps, claim(deps)))

    # when the tenant reads its usage by job type
    by_type = supplier_tenant.client.request("GET", "/usage?group_by=job_type").json

    # then it sees its own two jobs only, and one division gives the cost per completed job
    [row] = by_type["rows"]
    assert row["job_type"] == "invoice_extraction" and row["tenant"] is None
    assert (row["attempts"], row["completed_jobs"], row["finished_jobs"]) == (2, 2, 2)
    assert Decimal(row["cost_usd"]) == OK_COST * 2
    assert Decimal(row["cost_per_completed_job"]) == OK_COST
    assert by_type["total"]["attempts"] == 2

    by_model = supplier_tenant.client.request("GET", "/usage?group_by=model,day").json
    [row] = by_model["rows"]
    assert row["model"] == "small-model" and row["day"] is not None
    assert row["completed_jobs"] is None, "a completed job is not split across models"
    assert by_model["total"]["completed_jobs"] == 2


@pytest.mark.parametrize(
    "query",
    [
        "from=2026-13-01",
        "to=yesterday",
        "from=2026-03-02&to=2026-03-01",
        "from=2024-01-01&to=2026-01-01",
        "group_by=tenant",
    ],
)
def test_get_usage_refuses_bad_dates_ranges_and_dimensions_with_422(tenant, query):
    response = tenant.client.request("GET", f"/usage?{query}")
    assert response.status == 422
    assert response.json["type"].endswith("validation-failed")


def test_usage_needs_a_key_that_reads_jobs(stack, make_tenant, system_db):
    owner = make_tenant("scoped")
    key = create_key(system_db, owner.tenant_id, new_id, scopes=frozenset({Scope.JOBS_WRITE}))

    client = ApiClient(stack.api_url, key.api_key)
    assert client.request("GET", "/usage").status == 403


# What the batch path records for ok()'s tokens at half price: half paid, the other half saved.
PRICES = {"small-model": (0.4, 1.6)}
BATCH_PAID, BATCH_DISCOUNT = batch_cost(PRICES, "small-model", 900, 300, 0.5)


def record_batch_attempt(url, job, *, at, batch_id, input_tokens=900, output_tokens=300, factor=0.5):
    """Closes a claimed job's open attempt as the batch poller records a line's outcome: the batch's usage,
    the batch price paid, the discount and the batch, under the claim's fence (one UPDATE, as
    record_attempt)."""
    paid, discount = batch_cost(PRICES, "small-model", input_tokens, output_tokens, factor)
    with psycopg.connect(url) as conn:
        updated = conn.execute(
            "UPDATE job_attempts SET finished_at = %s, outcome = 'ok', model = 'small-model',"
            " input_tokens = %s, output_tokens = %s, cost_usd = %s, discount_usd = %s, batch_id = %s"
            " WHERE job_id = %s AND attempt = %s AND fence = %s",
            (at, input_tokens, output_tokens, paid, discount, batch_id, job.job_id, job.attempt, job.fence),
        ).rowcount
    assert updated == 1


def _batch_aggregates(url):
    [(batch_attempts, discount, cost)] = rows(
        url, "SELECT sum(batch_attempts), sum(discount_usd), sum(cost_usd) FROM usage_daily"
    )
    return batch_attempts, discount, cost


def _batch_recount(url):
    [(batch_attempts, discount, cost)] = rows(
        url,
        "SELECT count(*) FILTER (WHERE batch_id IS NOT NULL), coalesce(sum(discount_usd), 0),"
        " sum(coalesce(cost_usd, 0)) FROM job_attempts WHERE finished_at IS NOT NULL",
    )
    return batch_attempts, discount, cost


def test_a_batch_attempt_shows_its_discount_in_get_usage_next_to_an_immediate_one(
    supplier_tenant, system_db, clean_db
):
    # given one job run on the immediate path and one whose attempt came back from a provider batch
    supplier_tenant.client.submit(invoice_request(TEXT), "immediate")
    deps = make_deps(system_db, ScriptedLlm(ok()))
    assert asyncio.run(run_attempt(deps, claim(deps))).end is AttemptEnd.SUCCEEDED
    supplier_tenant.client.submit(invoice_request(TEXT), "batched")
    batched = claim(deps)

    # when the batch line's outcome is recorded
    record_batch_attempt(clean_db, batched, at=SystemClock().now(), batch_id=uuid4())

    # then the tenant's usage counts one batch attempt of two, what it paid in the cost, and what it saved
    report = supplier_tenant.client.request("GET", "/usage?group_by=model").json
    [row] = report["rows"]
    assert row["model"] == "small-model"
    assert (row["attempts"], row["batch_attempts"]) == (2, 1)
    assert row["cost_usd"] == "0.001260"  # 0.000840 at list price + 0.000420 at the batch price
    assert row["batch_discount_usd"] == "0.000420"
    assert (report["total"]["batch_attempts"], report["total"]["batch_discount_usd"]) == (1, "0.000420")
    by_type = supplier_tenant.client.request("GET", "/usage?group_by=job_type").json
    assert by_type["rows"][0]["batch_discount_usd"] == "0.000420"
    assert _batch_aggregates(clean_db) == _batch_recount(clean_db)
    # A discount is not spend: the month's spend holds what was paid only.
    [(spent,)] = rows(clean_db, "SELECT spent_usd FROM tenant_spend")
    assert spent == OK_COST + BATCH_PAID


def test_a_batch_attempt_updated_again_counts_once_with_its_last_discount(
    supplier_tenant, system_db, clean_db
):
    # given a batch attempt recorded once
    supplier_tenant.client.submit(invoice_request(TEXT), "batched")
    deps = make_deps(system_db, ScriptedLlm())
    job = claim(deps)
    now = SystemClock().now()
    batch_id = uuid4()
    record_batch_attempt(clean_db, job, at=now, batch_id=batch_id)
    assert _batch_aggregates(clean_db) == (1, BATCH_DISCOUNT, BATCH_PAID)

    # when it is recorded again with other usage, and then only its discount is corrected
    record_batch_attempt(clean_db, job, at=now, batch_id=batch_id, input_tokens=2000, factor=0.25)
    paid, discount = batch_cost(PRICES, "small-model", 2000, 300, 0.25)
    assert _batch_aggregates(clean_db) == (1, discount, paid)
    with psycopg.connect(clean_db) as conn:
        conn.execute("UPDATE job_attempts SET discount_usd = 0.000001 WHERE job_id = %s", (job.job_id,))

    # then the attempt is one batch attempt, with the discount it holds now, and the report says so
    assert _batch_aggregates(clean_db) == _batch_recount(clean_db) == (1, Decimal("0.000001"), paid)
    total = supplier_tenant.client.request("GET", "/usage").json["total"]
    assert (total["attempts"], total["batch_attempts"], total["batch_discount_usd"]) == (1, 1, "0.000001")


def test_a_batch_attempt_moved_to_another_day_or_out_of_its_batch_leaves_its_old_row(
    supplier_tenant, system_db, clean_db
):
    supplier_tenant.client.submit(invoice_request(TEXT), "batched")
    job = claim(make_deps(system_db, ScriptedLlm()))
    today = SystemClock().now()
    record_batch_attempt(clean_db, job, at=today, batch_id=uuid4())

    record_batch_attempt(clean_db, job, at=today - timedelta(days=1), batch_id=uuid4())
    by_day = rows(
        clean_db, "SELECT day, attempts, batch_attempts, discount_usd FROM usage_daily ORDER BY day"
    )
    assert [tuple(r[1:]) for r in by_day] == [(1, 1, BATCH_DISCOUNT), (0, 0, Decimal("0"))]

    with psycopg.connect(clean_db) as conn:
        conn.execute(
            "UPDATE job_attempts SET batch_id = NULL, discount_usd = NULL WHERE job_id = %s", (job.job_id,)
        )
    assert _batch_aggregates(clean_db) == _batch_recount(clean_db) == (0, Decimal("0"), BATCH_PAID)


def test_the_usage_cli_shows_batch_attempts_and_the_discount(
    supplier_tenant, system_db, clean_db, monkeypatch, tmp_path
):
    supplier_tenant.client.submit(invoice_request(TEXT), "batched")
    job = claim(make_deps(system_db, ScriptedLlm()))
    record_batch_attempt(clean_db, job, at=SystemClock().now(), batch_id=uuid4())
    monkeypatch.setenv("DATABASE_URL", clean_db)

    def cli(*args):
        result = CliRunner().invoke(
            app, ["usage", *args, "--data-dir", str(tmp_path)], env={"COLUMNS": "200"}
        )
        assert result.exit_code == 0, result.output
        return result.output

    report = json.loads(cli("--output", "json"))
    [row] = report["rows"]
    assert (row["tenant"], row["batch_attempts"], row["batch_discount_usd"]) == ("acme", 1, "0.000420")
    assert report["total"]["batch_discount_usd"] == "0.000420"
    mine = json.loads(cli("--tenant", "acme", "-o", "json"))
    assert mine["total"]["batch_attempts"] == 1

    table = cli("--group-by", "model")
    assert "batch saved USD" in table
    [acme_line] = [line for line in table.splitlines() if "acme" in line]
    assert "0.000420" in acme_line
