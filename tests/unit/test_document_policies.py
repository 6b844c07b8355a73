"""Policies summary.v2 and classification.v2, tried as an adversary would: a fact whose figure, date or name
differs from the very line it quotes, a number in the summary that nothing prints, a label of the allowed
set whose evidence does not show it. Each fails with a named reason; the faithful answer passes; and bugs
planted in the policies let the adversaries through."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from tollgate.jobtypes import statements
from tollgate.jobtypes.base import TenantPolicy
from tollgate.jobtypes.document_classification import policy as classification_policy
from tollgate.jobtypes.document_classification.prompt import system_prompt
from tollgate.jobtypes.document_classification.schema import ClassificationOptions, DocumentClassification
from tollgate.jobtypes.document_summary import policy as summary_policy
from tollgate.jobtypes.document_summary.schema import DocumentSummary, SummaryOptions

PAGES = (
    "SERVICE AGREEMENT\nbetween Acme GmbH, Hamburg, and Nordwind Logistik GmbH, Bremen\n"
    "The term is 12 months from 01.03.2026.\nThe monthly fee is EUR 1.450,00, payable by the 5th.",
    "Either party may end the agreement with 3 months notice.\nSigned in Hamburg on 14 February 2026\n"
    "Receipt of the signed copy is confirmed by email.",
)
NO_POLICY = TenantPolicy(frozenset(), ())
OPTIONS = SummaryOptions(max_words=60, max_facts=5)


def fact(text: str, quote: str, page: int = 1) -> dict[str, Any]:
    return {"fact": text, "evidence": {"page": page, "quote": quote}}


FAITHFUL_FACTS = [
    fact(
        "Acme GmbH and Nordwind Logistik GmbH are the parties.",
        "between Acme GmbH, Hamburg, and Nordwind Logistik GmbH",
    ),
    fact("The term is 12 months from 2026-03-01.", "The term is 12 months from 01.03.2026."),
    fact("The fee is 1,450.00 EUR a month.", "The monthly fee is EUR 1.450,00"),
    fact(
        "Either party may give notice of 3 months.",
        "Either party may end the agreement with 3 months notice.",
        2,
    ),
    fact("It was signed on February 14, 2026.", "Signed in Hamburg on 14 February 2026", 2),
]
FAITHFUL_SUMMARY = "A 12-month service agreement from 1 March 2026 at EUR 1,450.00 a month, 3 months notice."


def summary(text: str = FAITHFUL_SUMMARY, facts: list[dict[str, Any]] | None = None) -> DocumentSummary:
    return DocumentSummary.model_validate(
        {"summary": text, "key_facts": FAITHFUL_FACTS if facts is None else facts}
    )


def summary_reasons(answer: DocumentSummary) -> set[tuple[str, str]]:
    return {
        (r.code, r.field) for r in summary_policy.validate_summary(answer, PAGES, OPTIONS, NO_POLICY).reasons
    }


def replace_fact(index: int, new: dict[str, Any]) -> DocumentSummary:
    facts = list(FAITHFUL_FACTS)
    facts[index] = new
    return summary(facts=facts)


def test_a_faithful_summary_passes_and_records_where_each_quote_is_printed():
    report = summary_policy.validate_summary(summary(), PAGES, OPTIONS, NO_POLICY)
    assert report.reasons == [] and report.policy_version == "summary.v2"
    found = {entry["field"]: entry for entry in report.located_json(PAGES)}
    assert found["key_facts[2]"]["text"] == "The monthly fee is EUR 1.450,00"
    assert found["key_facts[4]"]["page"] == 2


SUMMARY_ADVERSARIES = {
    "a fact's number differs from its quote": replace_fact(
        1, fact("The term is 24 months from 2026-03-01.", "The term is 12 months from 01.03.2026.")
    ),
    "a fact's amount differs from its quote": replace_fact(
        2, fact("The fee is 1,540.00 EUR a month.", "The monthly fee is EUR 1.450,00")
    ),
    "a fact's date differs from its quote": replace_fact(
        4, fact("It was signed on February 15, 2026.", "Signed in Hamburg on 14 February 2026", 2)
    ),
    "a fact names someone its quote does not": replace_fact(
        0,
        fact(
            "Acme GmbH and Polder Techniek B.V. are the parties.",
            "between Acme GmbH, Hamburg, and Nordwind Logistik GmbH",
        ),
    ),
    "a fact's number in fullwidth digits": replace_fact(
        1, fact("The term is \uff11\uff12 months.", "The term is 12 months from 01.03.2026.")
    ),
    "a number in the summary that nothing prints": summary(
        FAITHFUL_SUMMARY.replace("3 months notice", "6 months notice")
    ),
    "a date in the summary that nothing prints": summary(
        FAITHFUL_SUMMARY.replace("1 March 2026", "1 April 2026")
    ),
    "a quote cut out of a longer token": replace_fact(1, fact("The term runs from 2026-03-01.", "1.03.2026")),
}
EXPECTED = {
    "a fact's number differs from its quote": {("fact_not_in_quote", "key_facts[1]")},
    "a fact's amount differs from its quote": {("fact_not_in_quote", "key_facts[2]")},
    "a fact's date differs from its quote": {("fact_not_in_quote", "key_facts[4]")},
    "a fact names someone its quote does not": {("fact_not_in_quote", "key_facts[0]")},
    "a fact's number in fullwidth digits": {("fact_not_in_quote", "key_facts[1]")},
    "a number in the summary that nothing prints": {("summary_number_unsupported", "summary")},
    "a date in the summary that nothing prints": {("summary_number_unsupported", "summary")},
    "a quote cut out of a longer token": {("evidence_not_found", "key_facts[1]")},
}


@pytest.mark.parametrize("name", list(SUMMARY_ADVERSARIES))
def test_each_summary_adversary_fails_with_its_reason(name):
    assert summary_reasons(SUMMARY_ADVERSARIES[name]) == EXPECTED[name]


def test_the_reason_says_what_the_quote_does_not_print():
    report = summary_policy.validate_summary(
        SUMMARY_ADVERSARIES["a fact names someone its quote does not"], PAGES, OPTIONS, NO_POLICY
    )
    details = [r.detail for r in report.reasons]
    assert details == [
        "the fact names 'Polder', which its quote does not print",
        "the fact names 'Techniek', which its quote does not print",
    ]


def test_a_paraphrase_that_keeps_every_figure_date_and_name_passes():
    paraphrased = replace_fact(
        3,
        fact(
            "Notice: 3 months, for either party.",
            "Either party may end the agreement with 3 months notice.",
            2,
        ),
    )
    assert summary_reasons(paraphrased) == set()


@pytest.mark.parametrize(
    ("stated", "quote"),
    [
        ("It was signed on 14 February.", "Signed in Hamburg on 14 February 2026"),
        ("It was signed on Saturday, 14. Februar 2026.", "Signed in Hamburg on 14 February 2026"),
        ("Signed on 14/02/2026 by Mr Bello.", "Signed in Hamburg on 14 February 2026 by Aisha Bello"),
        (
            "Nordwind Logistik GmbH's fee is EUR 1,450.00.",
            "The monthly fee is EUR 1.450,00, Nordwind Logistik GmbH",
        ),
    ],
    ids=["day without year", "German date and weekday", "title and numeric date", "possessive"],
)
def test_a_fact_may_state_a_date_and_a_name_as_a_reader_would(stated, quote):
    pages = (quote,)
    answer = summary("Signed.", [fact(stated, quote)])
    report = summary_policy.validate_summary(answer, pages, OPTIONS, NO_POLICY)
    assert report.reasons == []
    if "14" in stated:
        wrong_day = summary("Signed.", [fact(stated.replace("14", "15"), quote)])
        report = summary_policy.validate_summary(wrong_day, pages, OPTIONS, NO_POLICY)
        assert [r.code for r in report.reasons] == ["fact_not_in_quote"]


def test_the_word_and_fact_limits_still_hold():
    assert ("over_word_limit", "summary") in summary_reasons(summary(" ".join(["word"] * 61)))
    assert summary_reasons(summary(facts=[])) >= {("no_key_facts", "key_facts")}


def test_a_summary_check_that_skips_the_facts_would_let_them_through(monkeypatch):
    monkeypatch.setattr(summary_policy, "_check_fact", lambda *args: None)
    monkeypatch.setattr(summary_policy, "_check_summary_text", lambda *args: None)
    passing = {name for name, answer in SUMMARY_ADVERSARIES.items() if not summary_reasons(answer)}
    assert passing == set(SUMMARY_ADVERSARIES) - {"a quote cut out of a longer token"}


def test_names_are_matched_without_case_but_never_through_look_alikes():
    assert statements.prints_name("the notice period", "Notice")
    assert not statements.prints_name("Kattegat Design", "\u212aattegat")
    assert not statements.prints_name("\u212aattegat Design", "Kattegat")
    assert statements.names_in("The fee is due. Payment goes to Acme B.V. in Bremen.") == ["Acme", "Bremen"]
    assert statements.names_in("Polder Techniek signed. Customer number is 4.") == ["Polder", "Techniek"]


# Classification


LABELS = ["invoice", "purchase_order", "receipt", "service_agreement"]


def classification(label: str, quote: str, page: int = 1) -> DocumentClassification:
    return DocumentClassification.model_validate({"label": label, "evidence": {"page": page, "quote": quote}})


def classification_reasons(
    answer: DocumentClassification, options: ClassificationOptions | None = None
) -> list[tuple[str, str]]:
    chosen = options or ClassificationOptions(labels=LABELS)
    report = classification_policy.validate_classification(answer, PAGES, chosen, NO_POLICY)
    return [(r.code, r.field) for r in report.reasons]


def test_a_label_whose_evidence_prints_its_words_passes_and_records_the_cue():
    answer = classification("service_agreement", "SERVICE AGREEMENT")
    report = classification_policy.validate_classification(
        answer, PAGES, ClassificationOptions(labels=LABELS), NO_POLICY
    )
    assert report.passed and report.policy_version == "classification.v2"
    (entry,) = report.located_json(PAGES)
    assert entry["text"] == "SERVICE AGREEMENT" and entry["label"]["text"] == "SERVICE"


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (classification("invoice", "SERVICE AGREEMENT"), [("label_not_evidenced", "label")]),
        (
            classification("purchase_order", "The monthly fee is EUR 1.450,00, payable by the 5th."),
            [("label_not_evidenced", "label")],
        ),
        (classification("contract", "SERVICE AGREEMENT"), [("label_not_allowed", "label")]),
        (classification("service_agreement", "SERVICE AGREEMEN"), [("evidence_not_found", "label")]),
    ],
    ids=["another label, real line", "a label of the set, any line", "outside the set", "quote cut"],
)
def test_a_label_its_evidence_does_not_show_fails(answer, expected):
    assert classification_reasons(answer) == expected


def test_a_receipt_is_not_shown_by_a_line_that_only_mentions_a_receipt_when_the_tenant_says_what_shows_one():
    guided = ClassificationOptions(
        labels=LABELS,
        label_guides={
            "receipt": {
                "description": "proof of a payment received",
                "cues": ["amount received", "paid in full"],
            }
        },
    )
    mentions = classification("receipt", "Receipt of the signed copy is confirmed by email.", 2)
    assert classification_reasons(mentions) == [], "the label's own word is its cue by default"
    assert classification_reasons(mentions, guided) == [("label_not_evidenced", "label")]
    assert "proof of a payment received" in system_prompt(guided) and "Labels: [" in system_prompt(guided)


def test_a_cue_that_cites_another_document_does_not_show_this_ones_kind():
    options = ClassificationOptions(labels=["invoice", "payment_reminder"])
    pages = (
        "SECOND REMINDER: OVERDUE ACCOUNT\nInvoice INV-42892 of 2026-09-11, amount 5255.00 EUR.\n"
        "Please quote invoice no. 42892.",
    )
    for quote in ("Invoice INV-42892 of 2026-09-11, amount 5255.00 EUR.", "Please quote invoice no. 42892."):
        report = classification_policy.validate_classification(
            classification("invoice", quote), pages, options, NO_POLICY
        )
        assert [r.code for r in report.reasons] == ["label_not_evidenced"], quote
    title = classification("payment_reminder", "SECOND REMINDER: OVERDUE ACCOUNT")
    assert classification_policy.validate_classification(title, pages, options, NO_POLICY).passed
    own_number = classification("invoice", "INVOICE No. 2026-774")
    assert classification_policy.validate_classification(
        own_number, ("INVOICE No. 2026-774",), options, NO_POLICY
    ).passed


def test_a_quote_is_found_whatever_its_case_and_a_quote_of_lines_by_the_lines_that_are_printed():
    assert classification_reasons(classification("service_agreement", "Service Agreement")) == []
    merged = (
        "SERVICE AGREEMENT\nbetween Acme GmbH, Hamburg, and Nordwind Logistik GmbH, Bremen\nSigned by nobody"
    )
    assert classification_reasons(classification("service_agreement", merged)) == []
    assert classification_reasons(classification("service_agreement", "A SERVICE AGREEMENT")) == [
        ("evidence_not_found", "label")
    ]
    quote = (
        "The term is 12 months from 01.03.2026.\nThe monthly fee is EUR 1.450,00, payable by the 5th.\n"
        "A line printed nowhere"
    )
    assert summary_reasons(replace_fact(1, fact("The fee is EUR 1.450,00 a month.", quote))) == set()
    joined = summary_policy.validate_summary(
        replace_fact(1, fact("The term is 12 months at EUR 1.450,00.", quote)), PAGES, OPTIONS, NO_POLICY
    )
    assert [(r.code, r.detail) for r in joined.reasons] == [
        ("fact_not_in_quote", "the fact joins '12', '1.450,00', which no one line of its quote prints")
    ]


def test_a_short_cue_is_a_whole_word_and_a_long_one_may_start_a_word():
    options = ClassificationOptions(labels=["po", "service_agreement"], label_guides={"po": {"cues": ["po"]}})
    pages = ("Postal address: Hamburg\nThe agreements are attached",)
    assert (
        classification_policy.validate_classification(
            classification("po", "Postal address: Hamburg"), pages, options, NO_POLICY
        )
        .reasons[0]
        .code
        == "label_not_evidenced"
    )
    assert classification_policy.validate_classification(
        classification("service_agreement", "The agreements are attached"), pages, options, NO_POLICY
    ).passed


def test_guides_name_only_the_jobs_labels_and_leave_the_identity_of_requests_without_them_unchanged():
    with pytest.raises(ValidationError, match="label_guides names labels the job does not: memo"):
        ClassificationOptions(labels=LABELS, label_guides={"memo": {"cues": ["memo"]}})
    with pytest.raises(ValidationError):
        ClassificationOptions(labels=LABELS, label_guides={"receipt": {"cues": []}})
    # The request hash and the stored options are this dump: without guides it is what it was before them.
    assert ClassificationOptions(labels=["b", "a"]).model_dump(mode="json") == {
        "labels": ["a", "b"],
        "language_hint": None,
    }
    guided = ClassificationOptions(labels=LABELS, label_guides={"receipt": {"cues": ["paid"]}})
    assert guided.model_dump(mode="json")["label_guides"] == {
        "receipt": {"description": None, "cues": ["paid"]}
    }


def test_a_classification_check_blind_to_cues_would_let_another_label_through(monkeypatch):
    monkeypatch.setattr(
        classification_policy,
        "_first_cue",
        lambda document, span, cues: classification_policy.Label("cue", span, ""),
    )
    assert classification_reasons(classification("invoice", "SERVICE AGREEMENT")) == []
