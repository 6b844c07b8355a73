"""The chaos run's bounded waits: they end when the condition holds, and when they run out they say what they
awaited, how far the system got and what last went wrong, without sleeping in the test."""

from tollgate_dev.chaos.waiting import Waiter


class FakeTime:
    def __init__(self) -> None:
        self.now = 100.0
        self.pauses: list[float] = []

    def clock(self) -> float:
        return self.now

    def pause(self, seconds: float) -> bool:
        self.pauses.append(seconds)
        self.now += seconds
        return False


def test_a_wait_ends_as_soon_as_its_condition_holds():
    time = FakeTime()
    waiter = Waiter(time.clock, time.pause, interval=0.5)

    waited = waiter.until(lambda: time.now >= 102.0, deadline=200.0, awaited="the 3rd job to be accepted")

    assert waited.met
    assert waited.seconds == 2.0
    assert waited.shortfall == ""


def test_a_wait_that_runs_out_names_what_it_awaited_and_what_it_saw():
    time = FakeTime()
    waiter = Waiter(time.clock, time.pause, interval=1.0)

    waited = waiter.until(
        lambda: False,
        deadline=110.5,
        awaited="the 12th job to reach RUNNING",
        seen=lambda: "9 reached RUNNING",
    )

    assert not waited.met
    assert time.now == 110.5, "the last pause is cut to the deadline"
    assert waited.shortfall == (
        "waited 10 s for the 12th job to reach RUNNING; ran out (seen: 9 reached RUNNING)"
    )


def test_an_unreadable_condition_is_not_yet_met_and_its_error_is_reported():
    time = FakeTime()
    waiter = Waiter(time.clock, time.pause, interval=1.0)
    answers = iter([ConnectionError("database away"), ConnectionError("database away"), True])

    def condition() -> bool:
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    assert waiter.until(condition, deadline=200.0, awaited="a count").met

    failing = waiter.until(lambda: 1 / 0 > 0, deadline=time.now + 2, awaited="a count")
    assert not failing.met
    assert "last error: ZeroDivisionError" in failing.shortfall


def test_an_aborted_run_ends_the_wait_at_once():
    time = FakeTime()
    waiter = Waiter(time.clock, lambda seconds: True, interval=1.0)

    waited = waiter.until(lambda: False, deadline=1000.0, awaited="a process to meet before_sqs_delete")

    assert not waited.met
    assert waited.shortfall == "waited 0 s for a process to meet before_sqs_delete; the run was aborted"
