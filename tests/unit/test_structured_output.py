"""Provider capabilities: each structured-output mode sends the schema the way its providers take it, and the
answer is read the same strict way in all of them: exactly one JSON object, nothing repaired."""

from __future__ import annotations

import json
import random

import pytest

from tollgate.execution.llm.client import (
    OutcomeClass,
    Task,
    parse_invoice,
    refuses_response_format,
    request_options,
)
from tollgate.execution.llm.output import InvalidOutput, StructuredOutput, single_json_object
from tollgate.jobtypes.invoice_extraction.prompt import (
    PROMPT_ONLY_VERSION,
    PROMPT_VERSION,
    SYSTEM,
    build_messages,
    document_pages,
)
from tollgate.jobtypes.invoice_extraction.schema import Invoice, invoice_json_schema, response_format
from tollgate.jobtypes.registry import JOB_TYPES
from tollgate.settings import WorkerSettings
from tollgate_dev.samples import expected_invoice, generate_invoice
from tollgate_dev.simulator.extraction import extract

SAMPLE = generate_invoice(random.Random(5), 5, "clean")
ANSWER = json.dumps(extract(list(SAMPLE.pages)))
SCHEMA = json.loads(invoice_json_schema())


# -- strict parsing --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "content",
    [ANSWER, f"  \n{ANSWER}\n\t", json.dumps(json.loads(ANSWER), indent=2)],
    ids=["bare", "surrounding-whitespace", "pretty-printed"],
)
def test_one_json_object_with_only_whitespace_around_it_is_the_invoice(content):
    assert parse_invoice(content) == expected_invoice(SAMPLE)


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (f"```json\n{ANSWER}\n```", "wrapped in a code fence"),
        (f"```\n{ANSWER}\n```", "wrapped in a code fence"),
        (f"Here is the extracted invoice data:\n\n{ANSWER}", "text before the JSON object"),
        (f"Sure! ```json\n{ANSWER}\n```", "text before the JSON object"),
        (f"{ANSWER}\n\nLet me know if you need anything else.", "text after the JSON object"),
        (f"{ANSWER}\n```", "text after the JSON object"),
        (f"{ANSWER}\n{ANSWER}", "more than one JSON object"),
        (f"{ANSWER}{ANSWER}", "more than one JSON object"),
        (f"[{ANSWER}]", "a JSON array, not an object"),
        ('"an invoice"', "a JSON string, not an object"),
        (ANSWER[: len(ANSWER) // 2], "not valid JSON"),
        ("", "empty"),
        ("  \n ", "empty"),
        ('{"total": "1.00", "total": "2.00"}', "repeats the key(s) 'total'"),
    ],
    ids=[
        "json-fence",
        "bare-fence",
        "leading-prose",
        "prose-then-fence",
        "trailing-prose",
        "stray-closing-fence",
        "two-objects",
        "two-objects-adjacent",
        "array",
        "string",
        "cut-off",
        "empty",
        "whitespace-only",
        "duplicate-key",
    ],
)
def test_anything_but_exactly_one_json_object_is_invalid_output_saying_which(content, says):
    with pytest.raises(InvalidOutput, match=r"^(the answer|the JSON object)") as refused:
        parse_invoice(content)
    assert says in str(refused.value)


def test_nothing_is_repaired_the_object_inside_a_fence_is_not_taken():
    inner = single_json_object(ANSWER)
    assert inner == json.loads(ANSWER)
    with pytest.raises(InvalidOutput):
        single_json_object(f"```json\n{ANSWER}\n```")


def test_one_object_of_the_wrong_shape_fails_the_schema_as_invalid_output():
    with pytest.raises(InvalidOutput, match="does not match the schema"):
        parse_invoice(json.dumps({"vendor": "Nordwind", "amount_due": 12.5}))


def test_the_leading_text_shown_in_the_error_is_cut_short():
    with pytest.raises(InvalidOutput) as refused:
        single_json_object("x" * 5000 + ANSWER)
    assert len(str(refused.value)) < 120


# -- what each mode sends --------------------------------------------------------------------------------


def test_json_schema_mode_sends_todays_request():
    options = request_options(StructuredOutput.JSON_SCHEMA, Task.invoice(SAMPLE.pages))

    assert options == {"messages": build_messages(SAMPLE.pages), "response_format": response_format()}


def test_json_object_mode_sends_the_same_strict_schema_beside_the_type():
    options = request_options(StructuredOutput.JSON_OBJECT, Task.invoice(SAMPLE.pages))

    assert options["messages"] == build_messages(SAMPLE.pages)
    assert options["response_format"] == {"type": "json_object", "schema": SCHEMA}
    assert options["response_format"]["schema"] == response_format()["json_schema"]["schema"]


def test_prompt_mode_sends_no_response_format_and_puts_the_schema_and_the_answers_form_in_the_prompt():
    options = request_options(StructuredOutput.PROMPT, Task.invoice(SAMPLE.pages))

    assert set(options) == {"messages"}
    system, user = options["messages"]
    assert system["role"] == "system" and system["content"].startswith(SYSTEM)
    assert invoice_json_schema() in system["content"]
    assert "exactly one JSON object" in system["content"] and "no code fence" in system["content"]
    assert user == build_messages(SAMPLE.pages)[1], "the document is sent exactly as in the other modes"
    assert document_pages(options["messages"]) == list(SAMPLE.pages)


def test_the_prompt_only_prompt_has_its_own_version():
    assert PROMPT_ONLY_VERSION != PROMPT_VERSION


# -- a refused format is the pool's, not the job's --------------------------------------------------------


class _Error:
    def __init__(self, message: str, param: str | None = None) -> None:
        self.message, self.param = message, param


@pytest.mark.parametrize(
    ("status", "error", "refused"),
    [
        (400, _Error("Invalid parameter: 'response_format' of type 'json_schema' is not supported."), True),
        (400, _Error("Invalid value.", param="response_format"), True),
        # FastAPI's validation error, as llama-cpp-python's server answers an unknown format type.
        (422, _Error("[{'loc': ['body', 'response_format', 'type'], 'msg': 'Input should be'}]"), True),
        (400, _Error("This model's maximum context length is 128000 tokens."), False),
        (500, _Error("response_format handler crashed"), False),
    ],
)
def test_only_a_refusal_of_the_response_format_is_the_pools(status, error, refused):
    assert refuses_response_format(status, error) is refused


def test_a_refused_format_is_retried_and_pauses_the_pool_like_a_refused_key():
    assert OutcomeClass.PROVIDER_FORMAT.retryable and OutcomeClass.PROVIDER_FORMAT.pauses_pool
    assert OutcomeClass.PROVIDER_AUTH.pauses_pool
    assert not OutcomeClass.TERMINAL.pauses_pool and not OutcomeClass.INVALID_OUTPUT.pauses_pool


# -- the setting ------------------------------------------------------------------------------------------

REQUIRED = {
    "job_queue_urls": {name: "q" for name in JOB_TYPES},
    "documents_bucket": "b",
    "database_url": "postgresql://x",
}


def test_the_pool_setting_defaults_to_json_schema_and_takes_the_three_modes():
    # The field's default, not a settings object: the process environment could set the variable.
    assert WorkerSettings.model_fields["provider_structured_output"].default is StructuredOutput.JSON_SCHEMA
    for mode in ("json_schema", "json_object", "prompt"):
        settings = WorkerSettings(**REQUIRED, openai_api_key="k", provider_structured_output=mode)
        assert settings.provider_structured_output is StructuredOutput(mode)


def test_an_unknown_mode_is_refused_at_start():
    with pytest.raises(ValueError, match="provider_structured_output"):
        WorkerSettings(**REQUIRED, openai_api_key="k", provider_structured_output="grammar")


def test_the_sample_answer_is_an_invoice():
    # Guards the fixtures above: the cases fail for their own reason, not because ANSWER is no invoice.
    assert Invoice.model_validate_json(ANSWER) == expected_invoice(SAMPLE)


def test_the_schema_sent_to_the_model_asks_for_evidence_on_every_value_and_the_parser_still_admits_null():
    import json as _json
    from typing import get_args

    from tollgate.jobtypes.invoice_extraction.schema import Invoice, invoice_json_schema

    sent = _json.loads(invoice_json_schema())
    evidence_properties = [
        (name, spec)
        for part in (sent, *sent["$defs"].values())
        for name, spec in part.get("properties", {}).items()
        if name == "evidence" or name.endswith("_evidence")
    ]
    assert len(evidence_properties) == 10
    assert all(
        spec.get("$ref") == "#/$defs/Evidence" and "anyOf" not in spec for _, spec in evidence_properties
    )
    assert type(None) in get_args(Invoice.model_fields["total_evidence"].annotation)
