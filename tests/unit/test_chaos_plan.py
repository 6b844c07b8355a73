"""The chaos run's fault plan: the seed decides it, every kind of fault is in it, crashes come first."""

import pytest

from tollgate.chaos.plan import CRASHPOINTS, OUTAGES, FaultKind, plan_faults


@pytest.mark.parametrize(("jobs", "kills"), [(40, 1), (300, 2)])
def test_every_kind_of_fault_is_planned_within_the_traffic(jobs, kills):
    plan = plan_faults(seed=3, traffic_seconds=60, jobs=jobs)

    kinds = [fault.kind for fault in plan]
    assert set(kinds) == set(FaultKind)
    assert all(kinds.count(kind) == kills for kind in CRASHPOINTS)
    assert all(0 < fault.at < 60 for fault in plan)
    assert plan == sorted(plan)


def test_crashes_come_before_the_outages_that_could_keep_them_from_their_crash_point():
    plan = plan_faults(seed=5, traffic_seconds=20, jobs=40)

    last_crash = max(fault.at for fault in plan if fault.kind in CRASHPOINTS)
    first_other = min(fault.at for fault in plan if fault.kind not in CRASHPOINTS)
    assert last_crash < first_other


def test_outages_last_seconds_and_leave_time_to_settle():
    for seed in range(20):
        outages = [f for f in plan_faults(seed, traffic_seconds=90, jobs=300) if f.kind in OUTAGES]
        assert all(1.5 <= f.amount <= 11 for f in outages), outages


def test_the_seed_decides_the_plan():
    assert plan_faults(1, 60, 200) == plan_faults(1, 60, 200)
    assert plan_faults(1, 60, 200) != plan_faults(2, 60, 200)
