"""Usage aggregates against real PostgreSQL: every attempt's tokens and cost reach them exactly once (also a
stale worker's discarded record after the reaper closed its attempt), GET /usage groups and validates, and
job views and results carry their totals."""

from __future__ import annotations

import asyncio
from decimal import Decimal

import pytest

from tests.integration.test_execution import (
    TEXT,
    ScriptedLlm,
    claim,
    make_deps,
    ok,
    rows,
)
from tests.support import invoice_request
from tollgate.core.clock import FakeClock, SystemClock, new_id
from tollgate.core.metrics import RecordedMetrics
from tollgate.core.retry import RetryPolicy
from tollgate.execution.attempt import AttemptEnd, run_attempt
from tollgate.scheduler.tick import SchedulerDeps, run_scheduler
from tollgate.tenants.keys import Scope, create_key
from tollgate.tenants.suppliers import add_supplier
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
