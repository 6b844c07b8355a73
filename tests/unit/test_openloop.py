"""The open-loop benchmark's pure parts: the schedule, the rate model, the slope fit, and the two checkers
(every accepted job explained; every answer the one admission owed), each shown to catch what it is for."""

import math

import pytest

from bench.openloop import (
    JobRow,
    Model,
    arrival_schedule,
    check_admission,
    explain_accepted,
    fit_window,
    last_over_first,
    max_min_share,
    send_lag,
    slope,
)

LOW = 2  # two regular tenants (0, 1); the low-quota tenant is number 2


def record(n, status, *, tenant=0, sent=0.0, done=None, job_id=None, problem=None, dimension=None):
    return {
        "key": f"k{n}",
        "at_s": sent,
        "sent_s": sent,
        "done_s": sent + 0.02 if done is None else done,
        "status": status,
        "tenant": tenant,
        "job_id": job_id,
        "problem": problem,
        "limit_dimension": dimension,
    }


def job(n, *, tenant=0, state="SUCCEEDED", created=0.0, finished=None):
    return JobRow(f"job{n}", tenant, f"k{n}", state, created, finished)


def test_arrivals_come_at_fixed_instants_and_the_low_tenant_gets_every_nth():
    arrivals = arrival_schedule(rate=6.0, duration_s=10.0, tenants=20, low_every=6)

    assert len(arrivals) == 60
    assert [a.at_s for a in arrivals[:3]] == pytest.approx([0.0, 1 / 6, 2 / 6])
    low = [a for a in arrivals if a.tenant == 20]
    assert len(low) == 10 and all(a.index % 6 == 5 for a in low)
    regular = [a.tenant for a in arrivals if a.tenant != 20]
    assert regular[:21] == [*range(20), 0]


def test_fair_share_gives_light_tenants_their_demand_and_splits_the_rest():
    assert max_min_share(4.0, [0.5, 0.5, 0.5, 0.5]) == math.inf  # nobody is backlogged
    assert max_min_share(4.0, [0.5, math.inf, math.inf]) == pytest.approx(1.75)
    assert max_min_share(4.0, [0.25] * 20 + [math.inf]) == pytest.approx(4 / 21)


def test_the_model_predicts_when_the_quota_and_the_cap_are_reached():
    # Given 6 arrivals/s (1/s for the low tenant) against 4 jobs/s of capacity and 2 s of latency
    model = Model(6.0, 1.0, 20, 4.0, 2.0, low_quota=8, system_max_backlog=50)

    # Then the low tenant fills its quota of 8 at 1 - 4/21 jobs/s, and the backlog then grows more slowly
    assert model.quota_full_s == pytest.approx(8 / (1 - 4 / 21))
    assert model.growth_before_quota == pytest.approx(2.0)
    assert model.growth_after_quota == pytest.approx(5 + 4 / 21 - 4)
    # and stops at the cap, after which the excess is refused with 503
    assert model.backlog(model.cap_reached_s) == pytest.approx(50, abs=0.1)
    assert model.backlog(1000) == 50
    refusals = model.refusals(90.0)
    assert refusals["503"] == pytest.approx(model.growth_after_quota * (90 - model.cap_reached_s))


def test_the_slope_fit_recovers_a_line_and_declines_too_few_points():
    assert slope([(t, 3.0 + 1.25 * t) for t in range(10)]) == pytest.approx(1.25)
    assert slope([(0, 1), (1, 2)]) is None


def test_the_fit_window_stops_before_the_cap_that_was_seen():
    model = Model(6.0, 1.0, 20, 4.0, 2.0, low_quota=8, system_max_backlog=87)
    start, end = fit_window(model, 90.0, first_503_s=40.0)
    assert start == pytest.approx(model.quota_full_s)
    assert end == pytest.approx(39.0)


def test_latency_flatness_is_last_window_over_first():
    windows = [{"p50_ms": 10.0}, {"p50_ms": None}, {"p50_ms": 15.0}]
    assert last_over_first(windows, "p50_ms") == pytest.approx(1.5)


def test_a_client_that_falls_behind_its_schedule_says_so():
    on_time = [{"at_s": n / 6, "sent_s": n / 6 + 0.001} for n in range(60)]
    late = [{"at_s": n / 6, "sent_s": n / 6 + n * 0.01} for n in range(60)]
    assert send_lag(on_time, 0.05)["kept_schedule"]
    assert not send_lag(late, 0.05)["kept_schedule"]


def test_every_accepted_job_is_explained_and_the_counts_add_up():
    # Given three 202s (one still running), a 429 and a 503, and the jobs the 202s made
    records = [
        record(1, 202, job_id="job1"),
        record(2, 202, job_id="job2"),
        record(3, 202, job_id="job3"),
        record(4, 429, tenant=LOW),
        record(5, 503),
    ]
    jobs = [job(1), job(2, state="REVIEW_REQUIRED"), job(3, state="RUNNING")]

    explained = explain_accepted(records, jobs)

    assert explained["adds_up"]
    assert (explained["succeeded"], explained["review"], explained["still_pending"]) == (1, 1, 1)
    assert explained["still_pending_states"] == {"RUNNING": 1}


@pytest.mark.parametrize(
    "broken",
    ["a 202 whose job is missing", "a refusal that made a job", "a 202 answered with another job's id"],
)
def test_the_explanation_fails_when_a_job_is_missing_or_made_by_a_refusal(broken):
    records = [record(1, 202, job_id="job1"), record(2, 429, tenant=LOW)]
    jobs = [job(1)]
    if broken == "a 202 whose job is missing":
        jobs = []
    elif broken == "a refusal that made a job":
        jobs.append(job(2, tenant=LOW))
    else:
        records[0]["job_id"] = "job9"
    assert not explain_accepted(records, jobs)["adds_up"]


def admission(records, jobs, **limits):
    return check_admission(
        records, jobs, low_tenant=LOW, low_quota=2, tenant_quota=1000, system_max_backlog=10, **limits
    )


def test_refusals_are_matched_when_the_quota_or_the_cap_was_reached():
    # Given the low tenant with 2 unfinished jobs (its quota) and 10 unfinished in all (the cap)
    jobs = [job(n, tenant=LOW, state="RUNNING") for n in (1, 2)]
    jobs += [job(n, state="READY") for n in range(3, 11)]
    records = [
        record(11, 429, tenant=LOW, sent=5.0, problem="tenant-over-quota", dimension="jobs"),
        record(12, 503, sent=5.0, problem="system-overloaded"),
    ]

    judged = admission(records, jobs)

    assert judged["429"] == {"matched": 1, "unmatched": 0}
    assert judged["503"] == {"matched": 1, "unmatched": 0}


def test_refusals_that_admission_did_not_owe_are_caught():
    # Given one unfinished job of the low tenant (below its quota of 2) and a backlog of 1
    jobs = [job(1, tenant=LOW, state="RUNNING")]
    records = [
        record(2, 429, tenant=LOW, sent=5.0, problem="tenant-over-quota", dimension="jobs"),
        record(3, 429, tenant=0, sent=5.0, problem="tenant-over-quota", dimension="jobs"),
        record(4, 503, sent=5.0, problem="system-overloaded"),
        record(5, 503, sent=5.0, problem="dependency-unavailable"),
    ]

    judged = admission(records, jobs)

    assert judged["429"] == {"matched": 0, "unmatched": 2}
    assert judged["503"] == {"matched": 0, "unmatched": 2}
    assert len(judged["examples"]) == 4


def test_a_202_while_the_quota_was_surely_full_is_caught():
    # Given the low tenant's two jobs unfinished from before its request until after the answer
    jobs = [job(n, tenant=LOW, state="RUNNING", created=1.0) for n in (1, 2)]
    jobs.append(job(3, tenant=LOW, state="READY", created=5.01))
    accepted = record(3, 202, tenant=LOW, sent=5.0, job_id="job3")

    assert admission([accepted], jobs)["202"] == {"matched": 0, "unmatched": 1}

    # When one of them finished a second before the request, the 202 is what admission owed
    jobs[0] = job(1, tenant=LOW, created=1.0, finished=4.0)
    assert admission([accepted], jobs)["202"] == {"matched": 1, "unmatched": 0}
