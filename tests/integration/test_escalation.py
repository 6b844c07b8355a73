"""Model routing and escalation against real PostgreSQL: a small model's result that fails validation is
retried once on the large model before review, and each attempt keeps its own model, tokens and cost."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import timedelta

import psycopg
import pytest

from tests.integration.test_execution import (
    MISPRINTED,
    TEXT,
    ScriptedLlm,
    claim,
    extraction,
    make_deps,
    misprinted_extraction,
    ok,
    rows,
)
from tests.support import invoice_request, job_row
from tollgate.core.clock import new_id
from tollgate.execution.attempt import AttemptEnd, ModelRouter, run_attempt
from tollgate.jobtypes.base import Complexity
from tollgate.jobtypes.registry import DOCUMENT_CLASSIFICATION, DOCUMENT_SUMMARY, INVOICE_EXTRACTION
from tollgate.tenants.suppliers import add_supplier

pytestmark = pytest.mark.integration

ESCALATING = ModelRouter("small-model", "large-model", escalate=True)


@pytest.fixture
def supplier_tenant(tenant, system_db):
    add_supplier(system_db, tenant.tenant_id, "Nordwind Logistik GmbH", "DE89370400440532013000", new_id)
    return tenant


def attempts(url):
    return rows(url, "SELECT attempt, model, outcome, cost_usd, error FROM job_attempts ORDER BY attempt")


def test_a_small_models_wrong_result_is_retried_on_the_large_model_and_succeeds(
    supplier_tenant, system_db, clean_db
):
    job_id = supplier_tenant.client.submit(invoice_request(TEXT), "k").json["job_id"]
    llm = ScriptedLlm(ok(extraction(total="1.00")), ok())
    deps = make_deps(system_db, llm, router=ESCALATING)

    first = asyncio.run(run_attempt(deps, claim(deps)))
    # Then: no review yet, and nothing stored as the job's result; the job is runnable again at once.
    assert first.end is AttemptEnd.RETRY_SCHEDULED
    job = job_row(clean_db, job_id)
    assert job["state"] == "RETRY_SCHEDULED" and job["model_escalated"] is True
    assert job["next_attempt_at"] <= deps.clock.now()
    assert rows(clean_db, "SELECT count(*) FROM extraction_results") == [(0,)]

    second = asyncio.run(run_attempt(deps, claim(deps)))
    assert second.end is AttemptEnd.SUCCEEDED
    assert [call[1] for call in llm.calls] == ["small-model", "large-model"]
    [(first_no, small, escalated, small_cost, error), (second_no, large, outcome, large_cost, _)] = attempts(
        clean_db
    )
    assert (first_no, second_no) == (1, 2)
    assert (small, escalated, large, outcome) == ("small-model", "escalated", "large-model", "ok")
    assert float(small_cost) == pytest.approx((900 * 0.4 + 300 * 1.6) / 1e6)
    assert float(large_cost) == pytest.approx((900 * 2.0 + 300 * 8.0) / 1e6)
    assert "total_mismatch" in {reason["code"] for reason in error["reasons"]}
    assert job_row(clean_db, job_id)["state"] == "SUCCEEDED"


def test_when_the_large_model_is_wrong_too_the_job_goes_to_review_with_its_reasons(
    supplier_tenant, system_db, clean_db
):
    job_id = supplier_tenant.client.submit(invoice_request(MISPRINTED), "k").json["job_id"]
    llm = ScriptedLlm(ok(misprinted_extraction()), ok(misprinted_extraction()))
    deps = make_deps(system_db, llm, router=ESCALATING)

    asyncio.run(run_attempt(deps, claim(deps)))
    report = asyncio.run(run_attempt(deps, claim(deps)))

    assert report.end is AttemptEnd.REVIEW_REQUIRED
    assert [r["code"] for r in report.reasons] == ["total_mismatch"]
    assert [(a[1], a[2]) for a in attempts(clean_db)] == [("small-model", "escalated"), ("large-model", "ok")]
    assert job_row(clean_db, job_id)["state"] == "REVIEW_REQUIRED"


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"router": ModelRouter("small-model", "large-model", escalate=False)}, "escalation is off"),
        ({"policy": "small"}, "the tenant asked for the small model"),
        ({"max_attempts": 1}, "no attempt is left"),
        ({"deadline_seconds": 20}, "no whole attempt fits before the deadline"),
    ],
)
def test_no_escalation_goes_straight_to_review(supplier_tenant, system_db, clean_db, change, why):
    request = invoice_request(MISPRINTED)
    if "policy" in change:
        request["model_policy"] = change["policy"]
    job_id = supplier_tenant.client.submit(request, "k").json["job_id"]
    if "max_attempts" in change or "deadline_seconds" in change:
        with psycopg.connect(clean_db, autocommit=True) as conn:
            conn.execute(
                "UPDATE extraction_jobs SET max_attempts = coalesce(%s, max_attempts),"
                " deadline_at = coalesce(now() + %s * interval '1 second', deadline_at) WHERE job_id = %s",
                (change.get("max_attempts"), change.get("deadline_seconds"), job_id),
            )
    deps = make_deps(
        system_db, ScriptedLlm(ok(misprinted_extraction())), router=change.get("router", ESCALATING)
    )

    report = asyncio.run(run_attempt(deps, claim(deps)))

    assert report.end is AttemptEnd.REVIEW_REQUIRED, why
    assert [a[2] for a in attempts(clean_db)] == ["ok"]


def test_routing_follows_each_types_bounds_and_the_language():
    router = ModelRouter("small", "large")
    one_page = Complexity.of(["x" * 5000], None)
    assert router.choose("auto", INVOICE_EXTRACTION, one_page) == "small"
    assert router.choose("auto", INVOICE_EXTRACTION, Complexity.of(["x", "y"], None)) == "large"
    assert router.choose("auto", DOCUMENT_SUMMARY, Complexity.of(["x", "y"], None)) == "small"
    assert router.choose("auto", DOCUMENT_SUMMARY, Complexity.of(["x"], "ja")) == "large"
    assert router.choose("auto", DOCUMENT_CLASSIFICATION, Complexity.of(["x\n"] * 4, "ja")) == "small"
    many_lines = Complexity.of(["\n".join(["row 1 2 3"] * 200)], None)
    assert router.choose("auto", INVOICE_EXTRACTION, many_lines) == "large"
    assert router.choose("large", INVOICE_EXTRACTION, one_page) == "large"
    assert router.choose("small", INVOICE_EXTRACTION, many_lines) == "small"
    assert router.choose("auto", INVOICE_EXTRACTION, one_page, escalated=True) == "large"


def test_an_escalated_job_that_is_reaped_still_runs_on_the_large_model(supplier_tenant, system_db, clean_db):
    supplier_tenant.client.submit(invoice_request(TEXT), "k")
    llm = ScriptedLlm(ok(extraction(total="1.00")), ok())
    deps = make_deps(system_db, llm, router=ESCALATING)
    asyncio.run(run_attempt(deps, claim(deps)))
    # A worker claims the escalated job and dies; the next claim still goes to the large model.
    later = dataclasses.replace(deps, worker_id="worker-b")
    job = claim(later)
    assert job.model_escalated
    assert job.deadline_at - deps.clock.now() > timedelta(seconds=30)
    asyncio.run(run_attempt(later, job))
    assert llm.calls[-1][1] == "large-model"
