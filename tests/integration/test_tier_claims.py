"""The claim by service tier (migration 0017): a worker of one tier takes only that tier's jobs, each tier
is a fair queue of its own across tenants, and the per-tier run-queue rows equal a recount of the jobs."""

from __future__ import annotations

from collections import Counter
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from tests.support import invoice_request
from tollgate.core.clock import SystemClock
from tollgate.execution.leasing import ClaimedJob, claim_next_job, peek_next_job

pytestmark = pytest.mark.integration

NO_CAP = 10_000


def submit(tenant: Any, count: int, tier: str | None, *, tag: str = "") -> list[str]:
    options = {} if tier is None else {"service_tier": tier}
    ids = []
    for index in range(count):
        body = invoice_request(f"Nordwind Logistik GmbH\nInvoice {tag}{tier}-{index}", **options)
        response = tenant.client.submit(body, f"{tenant.tenant_id}-{tag}{tier}-{index}")
        assert response.status == 202, response.json
        ids.append(response.json["job_id"])
    return ids


def claim(system_db: Any, tier: str) -> ClaimedJob | None:
    return claim_next_job(
        system_db,
        SystemClock(),
        worker_id=f"w-{tier}",
        lease_seconds=600,
        tenant_cap=NO_CAP,
        service_tier=tier,  # type: ignore[arg-type]
    )


def test_a_high_tier_claim_takes_the_one_high_job_behind_a_batch_backlog_and_nothing_else(
    make_tenant, system_db, clean_db
):
    # Given a tenant with a batch backlog and one high-tier job sent after it
    tenant = make_tenant("mixed")
    submit(tenant, 30, "batch")
    [urgent] = submit(tenant, 1, "high")

    # When a high-tier worker peeks and claims, twice
    assert peek_next_job(system_db, SystemClock(), tenant_cap=NO_CAP, service_tier="high") is not None
    first = claim(system_db, "high")
    second = claim(system_db, "high")

    # Then it took the high job, then found nothing, although 30 batch jobs wait: they are not its tier
    assert first is not None and str(first.job_id) == urgent and first.service_tier == "high"
    assert second is None
    assert peek_next_job(system_db, SystemClock(), tenant_cap=NO_CAP, service_tier="high") is None
    # And a normal-tier worker (the default) finds nothing either; the batch worker finds the backlog
    assert claim(system_db, "normal") is None
    taken = claim(system_db, "batch")
    assert taken is not None and taken.service_tier == "batch"


def test_a_job_without_a_tier_is_normal_and_the_view_says_so(make_tenant, system_db, clean_db):
    tenant = make_tenant("plain")
    response = tenant.client.submit(invoice_request(), "plain-1")
    assert response.json["service_tier"] == "normal"
    job = claim_next_job(system_db, SystemClock(), worker_id="w", lease_seconds=60, tenant_cap=NO_CAP)
    assert job is not None and job.service_tier == "normal"


def test_the_tier_is_not_part_of_the_request_identity(make_tenant, clean_db):
    # The same document and options under the same key, sent again as high tier: the same job, replayed
    tenant = make_tenant("replay")
    first = tenant.client.submit(invoice_request(service_tier="batch"), "same-key")
    again = tenant.client.submit(invoice_request(service_tier="high"), "same-key")
    assert first.status == 202
    assert again.header("idempotent-replayed") == "true"
    assert again.json["job_id"] == first.json["job_id"]
    assert again.json["service_tier"] == "batch", "a replay returns the job as it was accepted"


def test_tenants_share_a_tier_fairly_whatever_they_run_in_other_tiers(make_tenant, system_db, clean_db):
    # Given a tenant that has had a long batch backlog served, and another that has not
    busy, quiet = make_tenant("busy"), make_tenant("quiet")
    submit(busy, 25, "batch")
    for _ in range(20):
        assert claim(system_db, "batch") is not None
    submit(busy, 6, "high", tag="b")
    submit(quiet, 6, "high", tag="q")

    # When six high-tier jobs are claimed
    order = []
    for _ in range(6):
        job = claim(system_db, "high")
        assert job is not None
        order.append(job.tenant_id)

    # Then the two tenants alternate: the busy tenant's batch consumption is the batch queue's business
    assert Counter(order) == {busy.tenant_id: 3, quiet.tenant_id: 3}


def test_the_tier_queue_rows_equal_a_recount_of_the_jobs(make_tenant, system_db, clean_db):
    tenant = make_tenant("counted")
    submit(tenant, 4, "high")
    submit(tenant, 5, "batch")
    submit(tenant, 3, None)
    claim(system_db, "batch")
    claim(system_db, "high")
    with psycopg.connect(clean_db, row_factory=dict_row) as conn:
        conn.execute(
            "UPDATE extraction_jobs SET state = 'CANCELLED', finished_at = now()"
            " WHERE job_id = (SELECT job_id FROM extraction_jobs WHERE service_tier = 'batch'"
            " AND state = 'READY' LIMIT 1)"
        )
        kept = {
            row["service_tier"]: row["ready_jobs"]
            for row in conn.execute(
                "SELECT service_tier, ready_jobs FROM tier_queues WHERE tenant_id = %s", (tenant.tenant_id,)
            )
        }
        counted = {
            row["service_tier"]: row["ready"]
            for row in conn.execute(
                "SELECT service_tier, count(*) FILTER (WHERE state = 'READY') AS ready FROM extraction_jobs"
                " WHERE tenant_id = %s GROUP BY service_tier",
                (tenant.tenant_id,),
            )
        }
    assert kept == counted == {"high": 3, "batch": 3, "normal": 3}


def test_the_schema_refuses_an_unknown_tier(make_tenant, clean_db):
    tenant = make_tenant("checked")
    job_id = tenant.client.submit(invoice_request(), "k").json["job_id"]
    with psycopg.connect(clean_db) as conn, pytest.raises(psycopg.errors.CheckViolation):
        conn.execute("UPDATE extraction_jobs SET service_tier = 'urgent' WHERE job_id = %s", (job_id,))


def test_a_tenant_at_its_cap_in_batch_still_has_its_high_job_claimed(make_tenant, system_db, clean_db):
    # Given a tenant whose batch jobs fill its fairness cap of 3
    tenant = make_tenant("capped")
    submit(tenant, 5, "batch")
    for _ in range(3):
        assert claim_next_job(
            system_db, SystemClock(), worker_id="b", lease_seconds=600, tenant_cap=3, service_tier="batch"
        )
    assert (
        claim_next_job(
            system_db, SystemClock(), worker_id="b", lease_seconds=600, tenant_cap=3, service_tier="batch"
        )
        is None
    )
    # When its high-tier job arrives, then the cap, which counts per tier, lets it run at once
    [urgent] = submit(tenant, 1, "high")
    job = claim_next_job(
        system_db, SystemClock(), worker_id="h", lease_seconds=600, tenant_cap=3, service_tier="high"
    )
    assert job is not None and str(job.job_id) == urgent


def test_the_scheduler_recounts_a_drifted_tier_queue_row_and_reports_the_drift(
    make_tenant, system_db, clean_db
):
    from tollgate.core.clock import new_id
    from tollgate.core.metrics import COUNTER_DRIFT, RecordedMetrics
    from tollgate.core.retry import RetryPolicy
    from tollgate.scheduler.tick import SchedulerDeps, run_scheduler

    # Given a tier row a change beneath the trigger set wrong
    tenant = make_tenant("drifted-tier")
    submit(tenant, 2, "batch")
    with psycopg.connect(clean_db) as conn:
        conn.execute(
            "UPDATE tier_queues SET ready_jobs = 9, running_jobs = 4 WHERE tenant_id = %s",
            (tenant.tenant_id,),
        )
    metrics = RecordedMetrics()

    def tick() -> int:
        deps = SchedulerDeps(system_db, SystemClock(), new_id, metrics, RetryPolicy(), lambda low, high: 0)
        return run_scheduler(deps).tier_queues_drifted

    # When the scheduler ticks, then it corrects the row and counts the drift, once
    assert tick() == 1
    assert metrics.values[COUNTER_DRIFT] == 1
    with psycopg.connect(clean_db, row_factory=dict_row) as conn:
        row = conn.execute(
            "SELECT ready_jobs, running_jobs FROM tier_queues WHERE tenant_id = %s", (tenant.tenant_id,)
        ).fetchone()
    assert row == {"ready_jobs": 2, "running_jobs": 0}
    assert tick() == 0
    assert metrics.values[COUNTER_DRIFT] == 0
