"""Log keys follow one unit of work, even with many in flight at once; trace context parses and carries on."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import secrets

import pytest
from aws_lambda_powertools import Logger

from tollgate.core.observability import TraceContext, log_context, trace_for_request, trace_keys

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.fixture
def lines():
    stream = io.StringIO()
    # A service of its own: Powertools reuses the handler of an existing logger with the same name.
    logger = Logger(
        service=f"observability-{secrets.token_hex(4)}", logger_handler=logging.StreamHandler(stream)
    )
    return logger, lambda: [json.loads(line) for line in stream.getvalue().splitlines()]


def test_concurrent_tasks_each_log_their_own_job_and_leave_no_keys_behind(lines):
    logger, read = lines

    async def attempt(job: str, pause: asyncio.Event, go: asyncio.Event) -> None:
        with log_context(job_id=job, fence=1):
            pause.set()
            await go.wait()  # the other task enters and leaves its own context meanwhile
            logger.info("finished")

    async def both() -> None:
        a_in, b_in, go_a, go_b = (asyncio.Event() for _ in range(4))
        task_a = asyncio.create_task(attempt("a", a_in, go_a))
        await a_in.wait()
        task_b = asyncio.create_task(attempt("b", b_in, go_b))
        await b_in.wait()
        go_b.set()
        await task_b
        go_a.set()
        await task_a

    asyncio.run(both())
    logger.info("after")

    logged = read()
    assert [(line["message"], line.get("job_id")) for line in logged] == [
        ("finished", "b"),
        ("finished", "a"),
        ("after", None),
    ]


def test_a_nested_context_adds_keys_and_restores_the_outer_ones(lines):
    logger, read = lines
    with log_context(tenant_id="t1", skipped=None):
        with log_context(job_id="j1"):
            logger.info("inner")
        logger.info("outer")

    inner, outer = read()
    assert (inner["tenant_id"], inner["job_id"]) == ("t1", "j1")
    assert outer["tenant_id"] == "t1" and "job_id" not in outer and "skipped" not in outer


def test_traceparent_parses_and_a_child_keeps_the_trace_with_a_new_span():
    context = TraceContext.parse(TRACEPARENT)
    assert context is not None and context.traceparent == TRACEPARENT

    child = context.child(lambda: "00f067aa0ba902b7")

    assert child.traceparent == "00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01"


@pytest.mark.parametrize(
    "value",
    [
        None,
        "",
        "garbage",
        "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",  # a version we do not speak
        "00-00000000000000000000000000000000-b7ad6b7169203331-01",  # all-zero trace id is invalid
        "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",  # all-zero span id is invalid
        "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",  # upper case is not allowed
    ],
)
def test_invalid_traceparents_are_not_taken(value):
    assert TraceContext.parse(value) is None
    assert trace_keys(value) == {}


def test_an_xray_header_becomes_the_same_trace_in_w3c_form():
    header = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=0"

    context = TraceContext.from_xray(header)

    assert context == TraceContext("5759e988bd862e3fe1be46a994272793", "53995c3f42cd8ad8", "00")


def test_the_callers_trace_wins_then_the_gateways_then_a_new_one():
    xray = "Root=1-5759e988-bd862e3fe1be46a994272793"
    assert trace_for_request(TRACEPARENT, xray).traceparent == TRACEPARENT
    assert trace_for_request("bad", xray).trace_id == "5759e988bd862e3fe1be46a994272793"
    first, second = trace_for_request(None, None), trace_for_request(None, None)
    assert first.trace_id != second.trace_id and TraceContext.parse(first.traceparent) == first
