"""The summary and classification samples: reproducible, realistic in size and language, every value of the
truth printed where the truth says, requests the acceptance API takes, and faithful answers that the job
types' schemas parse and that a reader would call right."""

from __future__ import annotations

from collections import Counter
from datetime import date
from decimal import Decimal

import pytest

from tollgate.accept.models import CreateJobRequest
from tollgate.jobtypes.base import TenantPolicy
from tollgate.jobtypes.document_classification.schema import ClassificationOptions
from tollgate.jobtypes.registry import JOB_TYPES
from tollgate_dev.document_samples import (
    AMOUNT,
    CLASSIFICATION,
    DATE,
    LABELS,
    SUMMARY,
    SUMMARY_KINDS,
    TENANT_GUIDES,
    carries_cue,
    classification_request_body,
    faithful_classification,
    faithful_summary,
    generate_classifications,
    generate_summaries,
    label_cues,
    summary_request_body,
)

SUMMARIES = generate_summaries(12, seed=15)
CLASSIFICATIONS = generate_classifications(14, seed=15)
NO_MASTER_DATA = TenantPolicy(frozenset(), ())


def test_the_same_seed_gives_the_same_documents_and_another_seed_others():
    assert [s.pages for s in generate_summaries(12, seed=15)] == [s.pages for s in SUMMARIES]
    assert [s.pages for s in generate_classifications(14, seed=15)] == [s.pages for s in CLASSIFICATIONS]
    assert [s.pages for s in generate_summaries(12, seed=16)] != [s.pages for s in SUMMARIES]


def test_a_summary_set_has_every_kind_mostly_english_and_a_prefix_mixes_kinds():
    kinds = Counter(s.truth.kind for s in SUMMARIES)
    assert set(kinds) == set(SUMMARY_KINDS) and min(kinds.values()) == 2
    languages = Counter(s.truth.language for s in SUMMARIES)
    assert languages["en"] >= 9 and languages["de"] >= 1 and languages["fr"] >= 1
    assert len({s.truth.kind for s in SUMMARIES[:6]}) == 6


def test_documents_are_one_or_two_pages_of_ten_to_forty_lines():
    for sample in [*SUMMARIES, *CLASSIFICATIONS]:
        lines = sum(len(page.splitlines()) for page in sample.pages)
        assert 1 <= len(sample.pages) <= 2
        assert 10 <= lines <= 40, lines
    assert any(len(s.pages) == 2 for s in SUMMARIES)


def test_every_value_of_a_summary_truth_is_printed_on_the_line_it_names():
    for sample in SUMMARIES:
        for value in sample.truth.values:
            line = sample.pages[value.at.page - 1].splitlines()[value.at.line - 1]
            assert line == value.at.text
            assert value.printed in line, (sample.truth.kind, value.name)
        kinds = {value.kind for value in sample.truth.values}
        assert {DATE, "party"} <= kinds, sample.truth.kind
        assert all(party in "\n".join(sample.pages) for party in sample.truth.parties)


def test_a_truth_value_is_canonical_whatever_the_print_style():
    for sample in SUMMARIES:
        for value in sample.truth.values:
            if value.kind == DATE:
                date.fromisoformat(value.value)
            if value.kind == AMOUNT:
                assert Decimal(value.value) > 0
                assert value.unit is not None and len(value.unit) == 3, "an ISO 4217 currency code"


def test_classification_documents_have_one_true_label_each_and_mention_other_types():
    assert Counter(s.truth_label for s in CLASSIFICATIONS) == dict.fromkeys(LABELS, 2)
    assert [s.truth_label for s in CLASSIFICATIONS[:7]] == list(LABELS), "a prefix of seven has every label"
    assert all(s.labels == LABELS for s in CLASSIFICATIONS)
    # Given documents of one type that name other types, as real ones do
    mentions = 0
    for sample in CLASSIFICATIONS:
        text = "\n".join(sample.pages).lower()
        others = [label for label in LABELS if label != sample.truth_label]
        mentions += any(label.replace("_", " ") in text or label in text for label in others)
    assert mentions >= 7
    assert {s.language for s in CLASSIFICATIONS} == {"en", "de", "fr"}


def test_some_classification_samples_carry_a_tenant_guide_and_one_shows_no_cue_of_its_label():
    guided = [s for s in CLASSIFICATIONS if s.label_guides]
    assert 0 < len(guided) < len(CLASSIFICATIONS)
    assert all(s.label_guides == TENANT_GUIDES for s in guided)
    # Without a guide the cues are the label's own words; the German receipt has none of them in its title
    assert label_cues("purchase_order", {}) == ("purchase", "order")
    lacking = [
        s
        for s in CLASSIFICATIONS
        if not carries_cue(s.evidence.text, label_cues(s.truth_label, s.label_guides))
    ]
    assert [(s.truth_label, s.language, bool(s.label_guides)) for s in lacking] == [("receipt", "de", False)]


def test_a_cue_matches_at_the_start_of_a_word_in_any_case():
    assert carries_cue("SECOND REMINDER: OVERDUE", ("reminder",))
    assert carries_cue("Zahlungserinnerungen", ("zahlungserinnerung",))
    assert carries_cue("Non-payment", ("payment",)), "a hyphen starts a word"
    assert not carries_cue("prepayment due", ("payment",))


def test_summary_requests_are_accepted_with_the_samples_limits():
    for sample in SUMMARIES:
        body = summary_request_body(sample)
        request = CreateJobRequest.model_validate(body)
        assert request.job_type == SUMMARY
        assert body["options"] == {"max_words": sample.max_words, "max_facts": sample.max_facts}


@pytest.mark.parametrize("send_guides", [False, True])
def test_classification_requests_send_guides_only_when_asked(send_guides):
    if send_guides and "label_guides" not in ClassificationOptions.model_fields:
        pytest.skip("ClassificationOptions has no label_guides yet (policy classification.v2)")
    for sample in CLASSIFICATIONS:
        body = classification_request_body(sample, send_guides=send_guides)
        request = CreateJobRequest.model_validate(body)
        assert request.job_type == CLASSIFICATION
        assert ("label_guides" in body["options"]) == (send_guides and bool(sample.label_guides))
    guided = next(s for s in CLASSIFICATIONS if s.label_guides)
    options = classification_request_body(guided, send_guides=True)["options"]
    assert options["label_guides"]["credit_note"] == {
        "description": TENANT_GUIDES["credit_note"].description,
        "cues": list(TENANT_GUIDES["credit_note"].cues),
    }


def test_faithful_summaries_parse_keep_the_limits_and_quote_their_pages():
    summary = JOB_TYPES[SUMMARY]
    for sample in SUMMARIES:
        answer = summary.output.model_validate(faithful_summary(sample))
        assert len(answer.summary.split()) <= sample.max_words
        assert 1 <= len(answer.key_facts) <= sample.max_facts
        for fact in answer.key_facts:
            assert fact.evidence is not None
            page = " ".join(sample.pages[fact.evidence.page - 1].split())
            assert fact.evidence.quote in page


def test_faithful_answers_pass_the_registered_policies_where_the_document_allows():
    summary, classification = JOB_TYPES[SUMMARY], JOB_TYPES[CLASSIFICATION]
    send = "label_guides" in ClassificationOptions.model_fields
    for sample in SUMMARIES:
        options = summary.parse_options(summary_request_body(sample)["options"])
        report = summary.validate(
            summary.output.model_validate(faithful_summary(sample)), sample.pages, options, NO_MASTER_DATA
        )
        assert report.passed, (sample.truth.kind, report.reasons)
    for document in CLASSIFICATIONS:
        if not carries_cue(document.evidence.text, label_cues(document.truth_label, document.label_guides)):
            continue  # designed to need a reviewer even when the label is right
        options = classification.parse_options(
            classification_request_body(document, send_guides=send)["options"]
        )
        answer = classification.output.model_validate(faithful_classification(document))
        report = classification.validate(answer, document.pages, options, NO_MASTER_DATA)
        assert report.passed, (document.truth_label, report.reasons)
