"""The fair claim on PostgreSQL (DESIGN §3 fairness, §4 run-queues): tenants share claims by tokens and
priority, not by job count; a tenant that arrives or comes back after idling is served at once but banks
nothing for the time it was away; and the run-queue's counters equal a recount of the jobs."""

from __future__ import annotations

from collections import Counter
from typing import Any
from uuid import UUID

import psycopg
import pytest
from psycopg.rows import dict_row

from tests.support import invoice_request
from tollgate.core.clock import SystemClock, new_id
from tollgate.execution.leasing import EXPIRIES_PER_CLAIM, claim_next_job

pytestmark = pytest.mark.integration

TEXT = "Nordwind Logistik GmbH\nInvoice\nTotal due 999.60 EUR"
# A cap no tenant reaches here: claimed jobs stay RUNNING, and the order is the run-queue's alone.
NO_CAP = 10_000


def submit_many(tenant: Any, count: int, *, padding: int = 0, priority: int | None = None) -> None:
    options = {} if priority is None else {"priority": priority}
    for index in range(count):
        body = invoice_request(f"{TEXT}\n{'line ' * padding}\nref {index}", **options)
        response = tenant.client.submit(body, f"{tenant.tenant_id}-{padding}-{priority}-{index}")
        assert response.status == 202, response.json


def claim_tenants(system_db: Any, claims: int) -> list[tuple[UUID, int]]:
    """(tenant, estimated tokens) of each of ``claims`` claims in a row."""
    taken = []
    for _ in range(claims):
        job = claim_next_job(system_db, SystemClock(), worker_id="w", lease_seconds=600, tenant_cap=NO_CAP)
        assert job is not None, "a job was runnable"
        taken.append((job.tenant_id, job.estimated_tokens))
    return taken


def tokens_by_tenant(taken: list[tuple[UUID, int]]) -> Counter[UUID]:
    shares: Counter[UUID] = Counter()
    for tenant_id, tokens in taken:
        shares[tenant_id] += tokens
    return shares


def test_a_tenant_sending_ten_times_larger_jobs_gets_the_same_token_share_not_ten_times_it(
    make_tenant, system_db, clean_db
):
    # Given two tenants with deep backlogs, one of jobs about ten times the other's size
    small, large = make_tenant("small"), make_tenant("large")
    submit_many(small, 130)
    submit_many(large, 15, padding=35_000)
    sizes = dict(
        psycopg.connect(clean_db)
        .execute("SELECT tenant_id, max(estimated_tokens) FROM extraction_jobs GROUP BY tenant_id")
        .fetchall()
    )
    assert sizes[large.tenant_id] >= 8 * sizes[small.tenant_id]

    # When workers claim 120 jobs in a row
    taken = claim_tenants(system_db, 120)

    # Then each tenant had about the same tokens claimed (within one large job), so the small tenant ran
    # about ten jobs for each large one
    shares = tokens_by_tenant(taken)
    assert abs(shares[small.tenant_id] - shares[large.tenant_id]) <= sizes[large.tenant_id] * 1.5
    counts = Counter(tenant_id for tenant_id, _ in taken)
    assert counts[small.tenant_id] >= 6 * counts[large.tenant_id]


def test_priority_weights_the_token_share(make_tenant, system_db, clean_db):
    # Given two tenants with equal jobs, one sending priority 9 (weight 10), the other priority 0 (weight 1)
    urgent, patient = make_tenant("urgent"), make_tenant("patient")
    submit_many(urgent, 60, priority=9)
    submit_many(patient, 60, priority=0)

    # When 55 jobs are claimed, then the urgent tenant had about ten claims for each of the other's
    counts = Counter(tenant_id for tenant_id, _ in claim_tenants(system_db, 55))
    assert counts[urgent.tenant_id] == pytest.approx(10 * counts[patient.tenant_id], abs=10)
    assert counts[patient.tenant_id] >= 3, "the low-priority tenant is slower, never starved"


def test_a_single_job_arriving_behind_a_deep_backlog_is_claimed_next(make_tenant, system_db, clean_db):
    heavy = make_tenant("heavy")
    submit_many(heavy, 40)
    claim_tenants(system_db, 25)  # the heavy tenant has been served for a while

    light = make_tenant("light")
    submit_many(light, 1)

    [(first, _)] = claim_tenants(system_db, 1)
    assert first == light.tenant_id


def test_a_claim_ends_its_share_of_expired_jobs_then_still_takes_a_runnable_one(
    make_tenant, system_db, clean_db
):
    expired, runnable = make_tenant("expired"), make_tenant("runnable")
    submit_many(expired, EXPIRIES_PER_CLAIM + 4)
    submit_many(runnable, 1)
    with psycopg.connect(clean_db) as conn:
        # Past their deadline, and first in the run-queue: the runnable tenant has the more virtual time.
        conn.execute(
            "UPDATE extraction_jobs SET deadline_at = now() - interval '1 minute' WHERE tenant_id = %s",
            (expired.tenant_id,),
        )
        # (The claim orders each tier's run-queue; these jobs are all of the default, normal, tier.)
        conn.execute("UPDATE tier_queues SET vtime = 1000 WHERE tenant_id = %s", (runnable.tenant_id,))

    [(taken, _)] = claim_tenants(system_db, 1)

    assert taken == runnable.tenant_id
    with psycopg.connect(clean_db) as conn:
        states = dict(
            conn.execute(
                "SELECT state, count(*) FROM extraction_jobs WHERE tenant_id = %s GROUP BY state",
                (expired.tenant_id,),
            ).fetchall()
        )
    assert states == {"FAILED_TERMINAL": EXPIRIES_PER_CLAIM, "READY": 4}, "ended its share, left the rest"


def test_a_tenant_back_from_idling_banks_nothing_for_the_time_it_was_away(make_tenant, system_db, clean_db):
    # Given a tenant served once and then idle, while another tenant's backlog is served for a long time
    steady, returning = make_tenant("steady"), make_tenant("returning")
    submit_many(returning, 1)
    submit_many(steady, 60)
    assert returning.tenant_id in {t for t, _ in claim_tenants(system_db, 2)}
    claim_tenants(system_db, 30)  # only the steady tenant has work now

    # When the idle tenant comes back with a backlog of its own
    submit_many(returning, 10)

    # Then the two alternate: the returning tenant starts at the steady one's virtual time, not at the
    # low counter it had when it left (which would hand it its whole backlog before the other ran again)
    order = [tenant for tenant, _ in claim_tenants(system_db, 8)]
    assert Counter(order) == {returning.tenant_id: 4, steady.tenant_id: 4}


def test_the_counters_equal_a_recount_and_a_full_system_backlog_reads_no_job(
    make_tenant, system_db, clean_db
):
    tenant = make_tenant("counted")
    submit_many(tenant, 12, padding=10)
    claim_tenants(system_db, 5)
    with psycopg.connect(clean_db, row_factory=dict_row) as conn:
        conn.execute(
            "UPDATE extraction_jobs SET state = 'CANCELLED', finished_at = now() WHERE state = 'READY'"
            " AND job_id IN (SELECT job_id FROM extraction_jobs WHERE state = 'READY' LIMIT 3)"
        )
        kept = conn.execute(
            "SELECT pending_jobs, pending_bytes, pending_tokens, running_jobs, ready_jobs, retry_jobs"
            " FROM tenant_queues WHERE tenant_id = %s",
            (tenant.tenant_id,),
        ).fetchone()
        recount = conn.execute(
            "SELECT pending_jobs, pending_bytes, pending_tokens, running_jobs, ready_jobs, retry_jobs"
            " FROM tenant_queue_recount(%s)",
            (tenant.tenant_id,),
        ).fetchone()
        backlog = conn.execute("SELECT sum(unfinished) AS unfinished FROM backlog_shards").fetchone()

    assert kept == recount
    assert (kept["pending_jobs"], kept["running_jobs"], kept["ready_jobs"]) == (9, 5, 4)
    assert backlog["unfinished"] == 9


def test_the_scheduler_recounts_drifted_counters_and_reports_the_drift(make_tenant, system_db, clean_db):
    from tollgate.core.metrics import COUNTER_DRIFT, RecordedMetrics
    from tollgate.core.retry import RetryPolicy
    from tollgate.scheduler.tick import SchedulerDeps, run_scheduler

    # Given a tenant whose counters a bug (here: a change made beneath the trigger) set wrong
    tenant = make_tenant("drifted")
    submit_many(tenant, 3)
    with psycopg.connect(clean_db) as conn:
        conn.execute(
            "UPDATE tenant_queues SET pending_jobs = 40, ready_jobs = 0 WHERE tenant_id = %s",
            (tenant.tenant_id,),
        )
    metrics = RecordedMetrics()

    def tick() -> int:
        deps = SchedulerDeps(system_db, SystemClock(), new_id, metrics, RetryPolicy(), lambda low, high: 0)
        return run_scheduler(deps).queues_drifted

    # When the scheduler ticks, then it recounts, corrects, and says so; the next recount finds nothing
    assert tick() == 1
    assert metrics.values[COUNTER_DRIFT] == 1
    with psycopg.connect(clean_db, row_factory=dict_row) as conn:
        row = conn.execute(
            "SELECT pending_jobs, ready_jobs FROM tenant_queues WHERE tenant_id = %s", (tenant.tenant_id,)
        ).fetchone()
    assert row == {"pending_jobs": 3, "ready_jobs": 3}
    assert tick() == 0
    assert metrics.values[COUNTER_DRIFT] == 0


def test_the_scheduler_recounts_drifted_backlog_shards_and_reports_the_drift(
    make_tenant, system_db, clean_db
):
    from tollgate.core.metrics import COUNTER_DRIFT, RecordedMetrics
    from tollgate.core.retry import RetryPolicy
    from tollgate.scheduler.tick import SchedulerDeps, run_scheduler

    # Given shards a change beneath the trigger set wrong (admission would refuse on their sum)
    submit_many(make_tenant("counted"), 4)
    with psycopg.connect(clean_db) as conn:
        conn.execute("UPDATE backlog_shards SET unfinished = unfinished + 1000 WHERE shard = 3")
    metrics = RecordedMetrics()

    def tick() -> bool:
        deps = SchedulerDeps(system_db, SystemClock(), new_id, metrics, RetryPolicy(), lambda low, high: 0)
        return run_scheduler(deps).backlog_shards_drifted

    # When the scheduler ticks, then the shards are recounted and the drift is counted, once
    assert tick() is True
    assert metrics.values[COUNTER_DRIFT] == 1
    with psycopg.connect(clean_db, row_factory=dict_row) as conn:
        total = conn.execute("SELECT sum(unfinished) AS unfinished FROM backlog_shards").fetchone()
    assert total == {"unfinished": 4}
    assert tick() is False
    assert metrics.values[COUNTER_DRIFT] == 0
