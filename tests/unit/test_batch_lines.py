"""The Batch API's JSON Lines: a custom id names one attempt under its fence and nothing else parses as one; a
request line is the immediate call's request; an output line ends exactly as the same immediate answer would."""

from __future__ import annotations

import json
import random
import uuid

import pytest

from tollgate.execution.llm.batch_api import (
    LINE_CANCELLED,
    LINE_EXPIRED,
    CustomId,
    line_result,
    parse_output_line,
    request_line,
)
from tollgate.execution.llm.client import OutcomeClass, Task, request_options
from tollgate.execution.llm.output import StructuredOutput
from tollgate.jobtypes.registry import INVOICE_EXTRACTION
from tollgate_dev.samples import expected_invoice, generate_invoice
from tollgate_dev.simulator.extraction import extract

SAMPLE = generate_invoice(random.Random(8), 8, "clean")
ANSWER = json.dumps(extract(list(SAMPLE.pages)))
JOB = uuid.UUID("5b8f0a34-3f7e-4c61-9d55-0c2f1f3b9a11")


def completion(content: str | None, *, finish_reason: str = "stop", refusal: str | None = None) -> dict:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1_767_225_600,
        "model": "gpt-sim-2026",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content, "refusal": refusal},
                "logprobs": None,
                "finish_reason": finish_reason,
            }
        ],
        "usage": {"prompt_tokens": 812, "completion_tokens": 301, "total_tokens": 1113},
    }


def line(status: int | None, body: dict | None = None, error: dict | None = None) -> bytes:
    response = None if status is None else {"status_code": status, "request_id": "req_9", "body": body}
    record = {
        "id": "batch_req_1",
        "custom_id": str(CustomId(JOB, 2, 3)),
        "response": response,
        "error": error,
    }
    return json.dumps(record).encode()


def result_of(raw: bytes):
    return line_result(parse_output_line(raw), INVOICE_EXTRACTION, "gpt-sim")


# -- custom ids ------------------------------------------------------------------------------------------


def test_a_custom_id_round_trips_through_its_text():
    custom_id = CustomId(JOB, 4, 17)
    assert str(custom_id) == f"{JOB}:4:17"
    assert CustomId.parse(str(custom_id)) == custom_id


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "job_id:attempt:fence"),
        (f"{JOB}:1", "job_id:attempt:fence"),
        (f"{JOB}:1:2:3", "job_id:attempt:fence"),
        ("job-7:1:2", "UUID"),
        (f"{JOB}:-1:2", "attempt '-1'"),
        (f"{JOB}:1:+2", "fence '+2'"),
        (f"{JOB}:01:2", "attempt '01'"),
        (f"{JOB}: 1:2", "attempt ' 1'"),
        # A full-width digit: int() takes it, but the text would not round-trip.
        (f"{JOB}:1:\uff12", "fence '\uff12'"),
        (f"{str(JOB).upper()}:1:2", "canonical form"),
    ],
)
def test_anything_but_a_canonical_custom_id_is_refused_saying_why(text, says):
    with pytest.raises(ValueError, match="custom_id") as refused:
        CustomId.parse(text)
    assert says in str(refused.value)


# -- request lines ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", list(StructuredOutput))
def test_a_request_line_carries_the_immediate_calls_options_for_every_mode(mode):
    task = Task.invoice(SAMPLE.pages)

    raw = request_line(CustomId(JOB, 1, 1), task, "gpt-sim", 3000, mode)

    assert raw.endswith(b"\n") and raw.count(b"\n") == 1, "one line, ended"
    request = json.loads(raw)
    assert request == {
        "custom_id": f"{JOB}:1:1",
        "method": "POST",
        "url": "/v1/chat/completions",
        "body": {"model": "gpt-sim", "max_completion_tokens": 3000, **request_options(mode, task)},
    }


# -- output lines ----------------------------------------------------------------------------------------


def test_a_200_with_a_valid_answer_is_the_jobs_output_with_usage_and_request_id():
    result = result_of(line(200, completion(ANSWER)))

    assert result.outcome is OutcomeClass.OK
    assert result.output == expected_invoice(SAMPLE)
    assert (result.input_tokens, result.output_tokens) == (812, 301)
    assert result.model == "gpt-sim-2026"  # the model that answered, as on the immediate path
    assert result.request_id == "req_9"
    assert result.latency_ms == 0


@pytest.mark.parametrize(
    ("body", "outcome", "says"),
    [
        (completion(ANSWER[: len(ANSWER) // 2]), OutcomeClass.INVALID_OUTPUT, "not valid JSON"),
        (completion(f"```json\n{ANSWER}\n```"), OutcomeClass.INVALID_OUTPUT, "code fence"),
        (completion(None, refusal="I can't help with that."), OutcomeClass.REFUSED, "can't help"),
        (completion(ANSWER, finish_reason="length"), OutcomeClass.INVALID_OUTPUT, "cut off at max tokens"),
        (completion(""), OutcomeClass.INVALID_OUTPUT, "no content"),
        ({"unexpected": True}, OutcomeClass.INVALID_OUTPUT, "not a chat completion"),
    ],
    ids=["invalid-json", "code-fence", "refusal", "length", "empty", "not-a-completion"],
)
def test_a_200_that_is_no_usable_answer_ends_as_the_immediate_call_would(body, outcome, says):
    result = result_of(line(200, body))

    assert result.outcome is outcome
    assert result.output is None
    assert says in (result.error or "")


@pytest.mark.parametrize(
    ("status", "outcome"),
    [(500, OutcomeClass.TRANSIENT), (503, OutcomeClass.TRANSIENT), (429, OutcomeClass.THROTTLED)],
)
def test_a_line_the_provider_refused_is_classified_by_its_status_with_the_message(status, outcome):
    body = {"error": {"message": "The server had an error.", "type": "server_error", "code": None}}

    result = result_of(line(status, body))

    assert result.outcome is outcome and result.outcome.retryable
    assert result.error == f"{status}: The server had an error."
    assert result.request_id == "req_9"


def test_a_refused_response_format_pauses_the_pool_as_on_the_immediate_path():
    error = {"message": "Invalid parameter: 'response_format'", "param": "response_format", "code": None}

    result = result_of(line(400, {"error": error}))

    assert result.outcome is OutcomeClass.PROVIDER_FORMAT


@pytest.mark.parametrize("code", [LINE_EXPIRED, LINE_CANCELLED])
def test_a_line_that_never_ran_is_retryable_and_says_so(code):
    parsed = parse_output_line(line(None, error={"code": code, "message": "not run"}))

    result = line_result(parsed, INVOICE_EXTRACTION, "gpt-sim")

    assert parsed.never_ran
    assert result.outcome is OutcomeClass.TRANSIENT
    assert result.error == f"{code}: not run"
    assert result.input_tokens is None  # nothing was spent


def test_a_line_that_ran_is_not_taken_for_one_that_never_ran():
    assert not parse_output_line(line(500, {"error": {"message": "x"}})).never_ran
    assert not parse_output_line(line(200, completion(ANSWER))).never_ran


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        (b"{not json", "not JSON"),
        (b"[1]", "not a JSON object"),
        (b'{"response": null, "error": {"code": "x"}}', "no custom_id"),
        (b'{"custom_id": "a", "response": null, "error": null}', "neither a response nor an error"),
        (b'{"custom_id": "a", "response": {"status_code": "200"}}', "integer status_code"),
        (b'{"custom_id": "a", "response": {"status_code": 200, "body": []}}', "not a JSON object"),
    ],
)
def test_what_is_not_an_output_line_is_refused_saying_why(raw, says):
    with pytest.raises(ValueError, match=says):
        parse_output_line(raw)
