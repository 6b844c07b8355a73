"""The job types' bundles: each type's request options, its policy, the simulated provider's answers to it,
and the request identity that covers the type."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from tollgate.accept.models import CreateJobRequest
from tollgate.accept.service import request_hash
from tollgate.core.documents import canonicalize
from tollgate.execution.llm.client import Task, parse_output, request_options
from tollgate.execution.llm.output import StructuredOutput
from tollgate.jobtypes.base import TenantPolicy
from tollgate.jobtypes.document_classification.schema import ClassificationOptions, DocumentClassification
from tollgate.jobtypes.document_summary.schema import DocumentSummary, SummaryOptions
from tollgate.jobtypes.registry import DOCUMENT_CLASSIFICATION, DOCUMENT_SUMMARY, JOB_TYPES
from tollgate_dev.simulator.documents import DocumentMistake, classify, summarize

PAGES = (
    "Service agreement between Acme GmbH and Nordwind Logistik\nThe term is twelve months from 2026-01-01.",
    "Either party may end the agreement with three months notice.\nSigned in Hamburg",
)
NO_POLICY = TenantPolicy(frozenset(), ())
DOC = {"pages": [{"text": p} for p in PAGES]}


def summary_request(**options):
    return CreateJobRequest.model_validate(
        {"job_type": "document_summary", "document": DOC, "options": options}
    )


def answer(task: Task, mistake: DocumentMistake | None = None):
    """What the simulated provider answers to this task's request, parsed as the worker parses it."""
    body = request_options(StructuredOutput.JSON_SCHEMA, task)
    prompt = "".join(m["content"] for m in body["messages"])
    reader = summarize if task.job_type is DOCUMENT_SUMMARY else classify
    return parse_output(task.job_type, json.dumps(reader(PAGES, prompt, mistake)))


def test_every_type_has_its_own_queue_schema_and_a_schema_the_model_can_be_sent():
    assert len({t.queue for t in JOB_TYPES.values()}) == len(JOB_TYPES)
    assert len({t.schema_name for t in JOB_TYPES.values()}) == len(JOB_TYPES)
    for kind in JOB_TYPES.values():
        schema = json.loads(kind.json_schema)
        assert schema["additionalProperties"] is False and set(schema["required"]) == set(
            schema["properties"]
        )


def test_a_faithful_summary_passes_and_each_mistake_fails_with_its_reason():
    options = SummaryOptions(max_words=25, max_facts=3)
    task = Task(DOCUMENT_SUMMARY, PAGES, options)
    faithful = answer(task)
    assert isinstance(faithful, DocumentSummary) and len(faithful.summary.split()) <= 25
    assert DOCUMENT_SUMMARY.validate(faithful, PAGES, options, NO_POLICY).passed

    long = answer(task, DocumentMistake.OVER_WORD_LIMIT)
    assert [r.code for r in DOCUMENT_SUMMARY.validate(long, PAGES, options, NO_POLICY).reasons] == [
        "over_word_limit"
    ]
    invented = answer(task, DocumentMistake.UNSUPPORTED_FACT)
    reasons = DOCUMENT_SUMMARY.validate(invented, PAGES, options, NO_POLICY).reasons
    assert [(r.code, r.field) for r in reasons] == [("evidence_not_found", "key_facts[2]")]


def test_a_summary_without_facts_fails_and_a_fact_on_the_wrong_page_is_found_where_it_is():
    options = SummaryOptions()
    empty = DocumentSummary(summary="An agreement.", key_facts=[])
    assert [r.code for r in DOCUMENT_SUMMARY.validate(empty, PAGES, options, NO_POLICY).reasons] == [
        "no_key_facts"
    ]
    misplaced = DocumentSummary.model_validate(
        {
            "summary": "Signed.",
            "key_facts": [
                {"fact": "Signed in Hamburg", "evidence": {"page": 1, "quote": "Signed in Hamburg"}}
            ],
        }
    )
    report = DOCUMENT_SUMMARY.validate(misplaced, PAGES, options, NO_POLICY)
    assert report.passed and report.located["key_facts[0]"].span.page == 2
    missing = DocumentSummary.model_validate({"summary": "x", "key_facts": [{"fact": "f", "evidence": None}]})
    assert [r.code for r in DOCUMENT_SUMMARY.validate(missing, PAGES, options, NO_POLICY).reasons] == [
        "evidence_missing"
    ]


def test_a_classification_picks_a_label_of_the_set_and_a_label_outside_it_fails():
    options = ClassificationOptions(labels=["invoice", "service_agreement", "receipt"])
    task = Task(DOCUMENT_CLASSIFICATION, PAGES, options)
    chosen = answer(task)
    assert isinstance(chosen, DocumentClassification) and chosen.label == "service_agreement"
    assert DOCUMENT_CLASSIFICATION.validate(chosen, PAGES, options, NO_POLICY).passed
    outside = answer(task, DocumentMistake.LABEL_OUTSIDE_SET)
    assert [r.code for r in DOCUMENT_CLASSIFICATION.validate(outside, PAGES, options, NO_POLICY).reasons] == [
        "label_not_allowed"
    ]


def test_the_request_is_validated_by_its_types_options():
    assert summary_request().options == SummaryOptions()
    assert summary_request().schema_version == "summary.v1"
    with pytest.raises(ValidationError) as raised:
        summary_request(max_words=5)
    assert raised.value.errors()[0]["loc"] == ("options", "max_words")
    with pytest.raises(ValidationError, match="labels"):
        CreateJobRequest.model_validate({"job_type": "document_classification", "document": DOC})
    with pytest.raises(ValidationError, match="each label may be named only once"):
        CreateJobRequest.model_validate(
            {"job_type": "document_classification", "document": DOC, "options": {"labels": ["a", "a"]}}
        )
    with pytest.raises(ValidationError, match="currency_hint"):
        summary_request(currency_hint="EUR")  # another type's option is not this type's
    with pytest.raises(ValidationError, match="unknown job type"):
        CreateJobRequest.model_validate({"job_type": "translation", "document": DOC})
    with pytest.raises(ValidationError, match="schema version"):
        CreateJobRequest.model_validate(
            {"job_type": "document_summary", "schema_version": "invoice.v1", "document": DOC}
        )


def test_the_request_hash_covers_the_type_and_its_options_but_not_the_label_order():
    document = canonicalize(list(PAGES))

    def classification(labels):
        request = CreateJobRequest.model_validate(
            {"job_type": "document_classification", "document": DOC, "options": {"labels": labels}}
        )
        return request_hash(request, document)

    invoice = request_hash(CreateJobRequest.model_validate({"document": DOC}), document)
    assert request_hash(summary_request(), document) != invoice
    assert request_hash(summary_request(max_words=40), document) != request_hash(summary_request(), document)
    assert classification(["a", "b"]) == classification(["b", "a"])
    assert classification(["a", "b"]) != classification(["a", "c"])
