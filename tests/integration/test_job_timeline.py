"""A job's timeline for support (`tollgate jobs show`) against real PostgreSQL: an escalated attempt, the
large model's attempt and the reviewer's rejection in order, with the state changes and their versions; and
every timeline read is served by an index on the job's id, so one job's page does not grow with other jobs
or tenants."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from tests.integration.test_escalation import ESCALATING
from tests.integration.test_execution import (
    MISPRINTED,
    ScriptedLlm,
    claim,
    make_deps,
    misprinted_extraction,
    ok,
)
from tests.support import invoice_request
from tollgate.cli.timeline import timeline_lines
from tollgate.core.clock import new_id
from tollgate.db.queries import load_queries
from tollgate.support.service import show_job
from tollgate.tenants.suppliers import add_supplier

pytestmark = pytest.mark.integration


def test_the_timeline_shows_the_escalation_the_second_attempt_and_the_review_in_order(
    tenant, system_db, clean_db
):
    add_supplier(system_db, tenant.tenant_id, "Nordwind Logistik GmbH", "DE89370400440532013000", new_id)
    job_id = tenant.client.submit(invoice_request(MISPRINTED), "k").json["job_id"]
    deps = make_deps(
        system_db, ScriptedLlm(ok(misprinted_extraction()), ok(misprinted_extraction())), router=ESCALATING
    )
    asyncio.run(run_attempt_twice(deps))
    decided = tenant.client.request(
        "POST",
        f"/extraction-jobs/{job_id}/review",
        json_body={"decision": "reject", "note": "the total is not what the page says"},
        headers={"If-Match": '"5"'},
    )
    assert decided.status == 200, decided.json

    job = show_job(system_db, job_id)

    timeline = job.timeline
    assert timeline is not None
    assert [(c.state, c.state_version) for c in timeline.state_changes] == [
        ("READY", 1),
        ("RUNNING", 2),
        ("RETRY_SCHEDULED", 3),
        ("RUNNING", 4),
        ("REVIEW_REQUIRED", 5),
        ("REJECTED", 6),
    ]
    assert timeline.missing_versions == []
    (escalation,) = timeline.escalations
    assert (escalation.attempt, escalation.from_model, escalation.to_model) == (
        1,
        "small-model",
        "large-model",
    )
    assert [r["code"] for r in escalation.reasons] == ["total_mismatch"]
    assert timeline.review is not None and timeline.review.decision == "reject"
    assert timeline.review.decided_on_version == 5
    assert timeline.deliveries == [], "no endpoint registered"

    kinds = [line.split()[2] for line in timeline_lines(job)]
    assert kinds == [
        "state",  # READY
        "state",  # RUNNING
        "attempt",  # the small model's, at its start
        "escalated",
        "state",  # RETRY_SCHEDULED
        "state",  # RUNNING
        "attempt",  # the large model's
        "state",  # REVIEW_REQUIRED
        "review",  # the decision, before the state it led to
        "state",  # REJECTED
    ]
    # What the operations function sends back is the same detail, timeline included.
    assert type(job).model_validate(json.loads(job.model_dump_json())) == job


async def run_attempt_twice(deps: Any) -> None:
    from tollgate.execution.attempt import run_attempt

    await run_attempt(deps, claim(deps))
    await run_attempt(deps, claim(deps))


TIMELINE_READS = {
    "timeline_state_changes": {"job_state_events"},
    "timeline_deliveries": {"webhook_deliveries", "webhook_delivery_attempts", "webhook_endpoints"},
    "timeline_review_decision": {"review_decisions"},
    "support_job_attempts": {"job_attempts"},
    "support_show_job": {"extraction_jobs", "tenants", "extraction_results"},
}


def scanned_tables(plan: dict[str, Any]) -> set[str]:
    found = {plan["Relation Name"]} if plan.get("Node Type") == "Seq Scan" else set()
    for child in plan.get("Plans", []):
        found |= scanned_tables(child)
    return found


@pytest.mark.parametrize("name", sorted(TIMELINE_READS))
def test_each_timeline_read_reaches_its_rows_by_an_index_on_the_job(name, clean_db):
    """With sequential scans priced out, a query that has an index for its condition uses it; one without
    (as job_state_events and webhook_deliveries had no index by job) still scans the table."""
    sql = getattr(load_queries(), name)
    with psycopg.connect(clean_db, row_factory=dict_row) as conn:
        conn.execute("SET enable_seqscan = off")
        (row,) = conn.execute(
            "EXPLAIN (FORMAT JSON) " + sql,
            {"job_id": new_id()},
        ).fetchall()
    plan = row["QUERY PLAN"][0]["Plan"]
    assert scanned_tables(plan) == set(), f"{name} scans {scanned_tables(plan)}"


def test_the_index_check_catches_a_read_with_no_index_for_its_condition(clean_db):
    # A planted read of the events by a column no index leads with: the check must see the scan.
    planted = "SELECT seq FROM job_state_events WHERE job_type = %(job_id)s::text"
    with psycopg.connect(clean_db, row_factory=dict_row) as conn:
        conn.execute("SET enable_seqscan = off")
        (row,) = conn.execute("EXPLAIN (FORMAT JSON) " + planted, {"job_id": "x"}).fetchall()
    assert scanned_tables(row["QUERY PLAN"][0]["Plan"]) == {"job_state_events"}
