"""The chaos run's fault plan: the seed decides it, every kind of fault is in it, each is armed by a count of
jobs that the run is sure to reach, crashes first."""

import pytest

from tollgate_dev.chaos.plan import (
    BATCH_LINE_FAULTS,
    CRASHPOINTS,
    EARLY_FAULTS,
    MILESTONES,
    OUTAGES,
    FaultKind,
    Milestone,
    Trigger,
    plan_faults,
)


@pytest.mark.parametrize(("jobs", "kills"), [(40, 1), (300, 2)])
def test_every_kind_of_fault_is_planned_and_armed_by_its_milestone(jobs, kills):
    plan = plan_faults(seed=3, traffic_seconds=60, jobs=jobs)

    kinds = [fault.kind for fault in plan]
    assert set(kinds) == set(FaultKind)
    assert all(kinds.count(kind) == kills for kind in CRASHPOINTS)
    assert all(fault.trigger.milestone is MILESTONES[fault.kind] for fault in plan)
    assert [fault.order for fault in plan] == list(range(len(plan)))


@pytest.mark.parametrize("jobs", [10, 40, 300, 2000])
@pytest.mark.parametrize("seed", range(10))
def test_every_trigger_is_a_count_the_run_reaches_with_traffic_still_to_come(seed, jobs):
    """Some jobs are cancelled before they run (one in 40), so fewer than all reach RUNNING; a crash armed on
    acceptances needs later submissions to carry a process to its crash point."""
    cancelled = max(1, jobs // 40)

    plan = plan_faults(seed, traffic_seconds=60, jobs=jobs)

    counts = [fault.trigger.count for fault in plan]
    assert counts == sorted(counts), "the plan never waits for an event it already passed"
    assert all(1 <= count < jobs - cancelled for count in counts)
    crashes = [fault.trigger.count for fault in plan if fault.kind in CRASHPOINTS]
    assert max(crashes) <= 0.4 * jobs


def test_crashes_come_before_the_outages_that_could_keep_them_from_their_crash_point():
    plan = plan_faults(seed=5, traffic_seconds=20, jobs=40)

    last_crash = max(fault.order for fault in plan if fault.kind in CRASHPOINTS)
    first_other = min(fault.order for fault in plan if fault.kind not in EARLY_FAULTS)
    assert last_crash < first_other


@pytest.mark.parametrize("seed", range(10))
def test_failed_batch_lines_are_queued_early_while_batch_tier_submissions_are_still_to_come(seed):
    """Only batches created after the line faults are queued carry them, and a quarter of the traffic makes
    them: armed by acceptances among the crashes, most of the batches are still ahead."""
    [fault] = [f for f in plan_faults(seed, traffic_seconds=60, jobs=40) if f.kind in BATCH_LINE_FAULTS]

    assert fault.trigger.milestone is Milestone.ACCEPTED
    assert fault.trigger.count <= 0.4 * 40
    assert fault.amount >= 2


def test_outages_last_seconds_and_leave_time_to_settle():
    for seed in range(20):
        outages = [f for f in plan_faults(seed, traffic_seconds=90, jobs=300) if f.kind in OUTAGES]
        assert all(1.5 <= f.amount <= 11 for f in outages), outages


def test_the_seed_decides_the_plan():
    assert plan_faults(1, 60, 200) == plan_faults(1, 60, 200)
    assert plan_faults(1, 60, 200) != plan_faults(2, 60, 200)


def test_a_trigger_says_which_job_it_awaits():
    assert Trigger(Milestone.RUNNING, 12).describe() == "the 12th job to reach RUNNING"
    assert Trigger(Milestone.ACCEPTED, 1).describe() == "the 1st job to be accepted"
    assert Trigger(Milestone.FINISHED, 22).describe() == "the 22nd job to finish"
    assert Trigger(Milestone.ACCEPTED, 13).describe() == "the 13th job to be accepted"
    assert Trigger(Milestone.ACCEPTED, 111).describe() == "the 111th job to be accepted"
    assert str(Trigger(Milestone.RUNNING, 3)) == "3 reached RUNNING"
