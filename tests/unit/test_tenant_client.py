"""The tenant CLI's pieces that need no server: what `tollgate submit` makes of a file, how `--wait` paces
its polls and which problems it waits out, and how the timeline orders what happened at one instant."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal
from uuid import uuid4

import pytest

from tollgate.cli.timeline import timeline_lines
from tollgate.client.api import ApiProblem, ApiUnreachable, problem_of
from tollgate.client.bodies import BadInput, request_body
from tollgate.client.follow import Backoff, StillRunning, wait_for_job
from tollgate.support.service import AttemptRecord, JobDetail
from tollgate.support.timeline import JobTimeline, StateChange

DOCUMENT = {"pages": [{"text": "Invoice no. 1"}]}


def test_a_request_body_is_sent_as_it_is_with_the_type_asked_for():
    body = request_body(
        json.dumps({"document": DOCUMENT, "options": {"max_words": 50}}), "document_summary", None
    )
    assert body == {"document": DOCUMENT, "options": {"max_words": 50}, "job_type": "document_summary"}


def test_a_bare_document_becomes_the_bodys_document_and_options_go_over_the_files():
    assert request_body(json.dumps(DOCUMENT), None, None) == {"document": DOCUMENT}
    reference = {"s3_key": "acme/a.txt", "version_id": "v1"}
    wrapped = request_body(json.dumps(reference), "document_classification", '{"labels": ["invoice"]}')
    assert wrapped == {
        "document": reference,
        "job_type": "document_classification",
        "options": {"labels": ["invoice"]},
    }
    merged = request_body(json.dumps({"document": DOCUMENT, "options": {"a": 1, "b": 2}}), None, '{"b": 3}')
    assert merged["options"] == {"a": 1, "b": 3}


@pytest.mark.parametrize(
    ("text", "job_type", "options", "says"),
    [
        ("pages: 1", None, None, "not JSON"),
        ("[1, 2]", None, None, "a JSON array, not an object"),
        (
            json.dumps({"document": DOCUMENT, "job_type": "document_summary"}),
            "invoice_extraction",
            None,
            "which",
        ),
        (json.dumps(DOCUMENT), None, "[1]", "--options is a JSON object"),
    ],
)
def test_what_cannot_become_a_request_is_refused_before_anything_is_sent(text, job_type, options, says):
    with pytest.raises(BadInput, match=says):
        request_body(text, job_type, options)


def test_a_problem_reads_its_errors_and_retry_after_and_says_whose_fault_it_is():
    body = {
        "type": "https://tollgate.dev/problems/validation",
        "title": "The request does not match the schema",
        "status": 422,
        "detail": "body.priority: too big",
        "errors": [{"loc": ["body", "priority"], "msg": "Input should be less than or equal to 9"}],
        "review": "/extraction-jobs/x/review",
    }
    problem = problem_of(
        422, "Unprocessable", {"content-type": "application/problem+json"}, json.dumps(body).encode()
    )
    assert problem.input_problem
    assert problem.lines() == [
        "The request does not match the schema (HTTP 422)",
        "body.priority: too big",
        "  - body.priority: Input should be less than or equal to 9",
        "review: /extraction-jobs/x/review",
    ]
    busy = problem_of(429, "Too Many Requests", {"retry-after": "7"}, b"<html>slow down</html>")
    assert not busy.input_problem and busy.retry_after == 7.0 and busy.detail == "<html>slow down</html>"


class Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def view(state: str, version: int) -> dict[str, object]:
    return {"state": state, "state_version": version}


def test_wait_polls_with_doubling_pauses_and_reports_each_new_version_once():
    clock = Clock()
    answers = iter([view("READY", 1), view("RUNNING", 2), view("RUNNING", 2), view("SUCCEEDED", 3)])
    seen: list[str] = []

    final = wait_for_job(
        lambda: next(answers),
        timeout=60,
        clock=clock,
        sleep=clock.sleep,
        on_change=lambda job: seen.append(str(job["state"])),
        first=view("READY", 1),
    )

    assert final["state"] == "SUCCEEDED"
    assert seen == ["READY", "RUNNING", "SUCCEEDED"]
    assert clock.slept == [0.25, 0.5, 1.0, 2.0]
    assert Backoff().wait(10) == 5.0, "capped"


def test_wait_rides_out_an_outage_and_a_429_but_not_an_input_problem():
    clock = Clock()
    problems: list[Exception] = [
        ApiUnreachable("refused"),
        ApiProblem(429, "Too Many Requests", retry_after=9),
    ]

    def fetch() -> dict[str, object]:
        if problems:
            raise problems.pop(0)
        return view("REVIEW_REQUIRED", 3)

    retried: list[Exception] = []
    final = wait_for_job(
        fetch, timeout=60, clock=clock, sleep=clock.sleep, on_change=lambda _: None, on_retry=retried.append
    )
    assert final["state"] == "REVIEW_REQUIRED", "the pipeline is done with it: a person decides next"
    assert len(retried) == 2
    assert clock.slept == [0.25, 0.5, 9.0], "the Retry-After, not the shorter backoff"

    def gone() -> dict[str, object]:
        raise ApiProblem(404, "Not Found")

    with pytest.raises(ApiProblem):
        wait_for_job(gone, timeout=60, clock=clock, sleep=clock.sleep, on_change=lambda _: None)


def test_wait_gives_up_at_its_timeout_with_the_last_state_known():
    clock = Clock()
    with pytest.raises(StillRunning, match="still RUNNING"):
        wait_for_job(
            lambda: view("RUNNING", 2), timeout=10, clock=clock, sleep=clock.sleep, on_change=lambda _: None
        )
    assert sum(clock.slept) <= 10


def test_the_timeline_puts_an_attempt_after_the_change_that_started_it_and_says_what_is_no_longer_kept():
    # The claim's time, which the RUNNING change and the attempt's start share; the attempt's record is
    # written a moment after the state it ended in.
    at = datetime(2026, 3, 1, 12, 0, 0, 123456, tzinfo=UTC)
    ended = datetime(2026, 3, 1, 12, 0, 0, 123900, tzinfo=UTC)
    recorded = datetime(2026, 3, 1, 12, 0, 0, 123999, tzinfo=UTC)
    attempt = AttemptRecord(
        attempt=1,
        fence=1,
        worker_id="w1",
        started_at=at,
        finished_at=recorded,
        outcome="ok",
        model="m",
        input_tokens=10,
        output_tokens=5,
        cost_usd=Decimal("0.000100"),
        latency_ms=3,
        provider_request_id="r",
        error=None,
    )
    job = JobDetail(
        job_id=uuid4(),
        tenant_id=uuid4(),
        tenant="acme",
        job_type="invoice_extraction",
        service_tier="normal",
        priority=5,
        state="SUCCEEDED",
        state_version=3,
        attempt=1,
        max_attempts=3,
        deadline_at=at,
        created_at=at,
        finished_at=ended,
        last_error=None,
        policy_version="validation.v3",
        review_reasons=[],
        attempts=[attempt],
        audit=[],
        timeline=JobTimeline(
            state_changes=[
                StateChange(sequence=8, state="RUNNING", state_version=2, occurred_at=at),
                StateChange(sequence=9, state="SUCCEEDED", state_version=3, occurred_at=ended),
            ],
            missing_versions=[1],
            escalations=[],
            review=None,
            deliveries=[],
        ),
    )

    lines = timeline_lines(job)

    assert lines[0] == "(no state change kept for version 1: they outlived the live feed's window)"
    assert [line.split()[2:4] for line in lines[1:]] == [
        ["state", "RUNNING"],
        ["attempt", "#1"],
        ["state", "SUCCEEDED"],
    ]
    assert "#1 ok at 12:00:00.123Z: model m, tokens 10 in / 5 out, 0.000100 USD, 3 ms" in lines[2]
