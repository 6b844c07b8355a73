"""The simulated readers of summaries and classifications make the adversary's mistakes: one wrong number,
name or label whose evidence still quotes a printed line, and nothing else changed. Classification follows
the tenant's label guide when the prompt carries one."""

from __future__ import annotations

import json
import re

import pytest

from tollgate.jobtypes.document_classification.prompt import system_prompt as classification_prompt
from tollgate.jobtypes.document_classification.schema import ClassificationOptions
from tollgate.jobtypes.document_summary.prompt import system_prompt as summary_prompt
from tollgate.jobtypes.document_summary.schema import SummaryOptions
from tollgate_dev.simulator.documents import (
    DocumentMistake,
    classify,
    document_mistake_applies,
    summarize,
)

PAGES = (
    "Service agreement between Acme GmbH and Nordwind Logistik\nThe term is twelve months from 2026-01-01.",
    "Either party may end the agreement with three months notice.\nSigned in Hamburg on 14 March 2026",
)
SUMMARY = summary_prompt(SummaryOptions(max_words=20, max_facts=3))
LABELS = ["invoice", "service_agreement", "receipt"]
CLASSIFICATION = classification_prompt(ClassificationOptions(labels=LABELS))


def numbers(text: str) -> set[str]:
    return set(re.findall(r"\d+", text))


def printed(pages: tuple[str, ...]) -> str:
    return " ".join(" ".join(pages).split())


def test_a_changed_fact_number_differs_from_the_line_it_still_quotes():
    truth = summarize(PAGES, SUMMARY)
    got = summarize(PAGES, SUMMARY, DocumentMistake.FACT_NUMBER_CHANGED)
    assert got["summary"] == truth["summary"]
    changed = [(g, t) for g, t in zip(got["key_facts"], truth["key_facts"], strict=True) if g != t]
    [(fact, true_fact)] = changed
    assert fact["evidence"] == true_fact["evidence"]
    assert numbers(fact["fact"]) - numbers(fact["evidence"]["quote"]), "a number the quote does not print"


def test_a_changed_fact_number_is_never_one_its_quote_prints_elsewhere():
    pages = ("Page 1 of 2 of the delivery schedule",)
    got = summarize(pages, SUMMARY, DocumentMistake.FACT_NUMBER_CHANGED)
    [fact] = got["key_facts"]
    assert fact["fact"] != pages[0]
    assert numbers(fact["fact"]) - numbers(pages[0])


def test_a_changed_fact_name_is_printed_nowhere_and_the_quote_is_unchanged():
    truth = summarize(PAGES, SUMMARY)
    got = summarize(PAGES, SUMMARY, DocumentMistake.FACT_NAME_CHANGED)
    changed = [(g, t) for g, t in zip(got["key_facts"], truth["key_facts"], strict=True) if g != t]
    [(fact, true_fact)] = changed
    assert fact["evidence"] == true_fact["evidence"]
    new_words = set(fact["fact"].split()) - set(true_fact["fact"].split())
    [name] = new_words
    assert name[0].isupper() and name.lower() not in printed(PAGES).lower()
    assert len(fact["fact"].split()) == len(true_fact["fact"].split())


def test_an_invented_summary_number_is_printed_nowhere_and_the_summary_keeps_its_word_limit():
    truth = summarize(PAGES, SUMMARY)
    got = summarize(PAGES, SUMMARY, DocumentMistake.SUMMARY_NUMBER_INVENTED)
    assert got["key_facts"] == truth["key_facts"]
    facts = " ".join(f["fact"] for f in got["key_facts"])
    invented = numbers(got["summary"]) - numbers(printed(PAGES)) - numbers(facts)
    assert invented and all(n not in re.sub(r"\D", "", printed(PAGES) + facts) for n in invented)
    assert len(got["summary"].split()) <= 20


def test_a_label_without_cue_is_of_the_set_and_its_words_are_not_in_the_evidence():
    truth = classify(PAGES, CLASSIFICATION)
    got = classify(PAGES, CLASSIFICATION, DocumentMistake.LABEL_WITHOUT_CUE)
    assert truth["label"] == "service_agreement"
    assert got["label"] in LABELS and got["label"] != truth["label"]
    assert got["evidence"] == truth["evidence"]
    assert not any(word in got["evidence"]["quote"].lower() for word in got["label"].split("_"))


@pytest.mark.parametrize(
    ("mistake", "pages", "prompt"),
    [
        (DocumentMistake.FACT_NUMBER_CHANGED, ("No numbers are printed on this page at all",), SUMMARY),
        (DocumentMistake.FACT_NAME_CHANGED, ("no capitalised name is printed here", "nor here"), SUMMARY),
        # Every other label's word is printed on the evidence line: none can be taken without its cue.
        (
            DocumentMistake.LABEL_WITHOUT_CUE,
            ("invoice receipt service agreement",),
            CLASSIFICATION,
        ),
    ],
)
def test_a_document_mistake_without_what_it_needs_leaves_the_answer_truthful(mistake, pages, prompt):
    assert not document_mistake_applies(mistake, pages, prompt)


@pytest.mark.parametrize(
    "mistake",
    [
        DocumentMistake.FACT_NUMBER_CHANGED,
        DocumentMistake.FACT_NAME_CHANGED,
        DocumentMistake.SUMMARY_NUMBER_INVENTED,
        DocumentMistake.LABEL_WITHOUT_CUE,
    ],
)
def test_each_document_mistake_applies_to_a_document_that_has_what_it_needs(mistake):
    prompt = CLASSIFICATION if mistake is DocumentMistake.LABEL_WITHOUT_CUE else SUMMARY
    assert document_mistake_applies(mistake, PAGES, prompt)


def guided(guide: dict[str, object]) -> str:
    return f"{CLASSIFICATION}\nLabel guide: {json.dumps(guide)}"


def test_the_label_guide_cues_decide_the_label_and_its_evidence():
    pages = ("Nordwind Logistik GmbH", "Amount paid by card: 120.00 EUR\nThank you for shopping with us")
    guide = {
        "invoice": {"description": None, "cues": ["amount due", "invoice no"]},
        "receipt": {"description": "Proof of a payment already made", "cues": ["paid by card", "thank you"]},
    }
    # By the labels' own words nothing is printed, and the first label wins the tie.
    assert classify(pages, CLASSIFICATION)["label"] == "invoice"
    answer = classify(pages, guided(guide))
    assert answer["label"] == "receipt"
    assert answer["evidence"] == {"page": 2, "quote": "Amount paid by card: 120.00 EUR"}


def test_a_label_the_guide_gives_no_cues_keeps_the_words_of_its_name():
    guide = {"service_agreement": {"description": "A contract for services", "cues": []}}
    answer = classify(PAGES, guided(guide))
    assert answer == classify(PAGES, CLASSIFICATION)
    assert answer["label"] == "service_agreement"


def test_a_label_without_cue_goes_by_the_guides_cues():
    guide = {
        "invoice": {"description": None, "cues": ["twelve"]},
        "receipt": {"description": None, "cues": ["signed"]},
        "service_agreement": {"description": None, "cues": ["term", "notice", "months"]},
    }
    truth = classify(PAGES, guided(guide))
    assert truth == {
        "label": "service_agreement",
        "evidence": {"page": 1, "quote": "The term is twelve months from 2026-01-01."},
    }
    got = classify(PAGES, guided(guide), DocumentMistake.LABEL_WITHOUT_CUE)
    # The evidence prints "twelve", the invoice's cue (though not the word "invoice"): the receipt is taken.
    assert got == {**truth, "label": "receipt"}
