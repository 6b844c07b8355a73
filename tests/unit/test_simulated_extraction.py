"""The simulated model reads every sample kind exactly as the ground truth says, treats planted instructions
as text, makes an arithmetic mistake when told to, and leaves what it cannot read null. The accuracy
comparison scores it accordingly."""

from __future__ import annotations

import random
from decimal import Decimal

import pytest

from tollgate.execution.extraction.prompt import build_messages, document_pages
from tollgate.execution.extraction.schema import Invoice
from tollgate_dev.accuracy import FIELDS, AccuracyReport, compare_invoice
from tollgate_dev.samples import (
    INJECTION,
    INJECTIONS,
    KINDS,
    expected_invoice,
    generate_invoice,
    generate_invoices,
)
from tollgate_dev.simulator.extraction import MISTAKE, extract, normalize_money, parse_date


@pytest.mark.parametrize("kind", KINDS)
def test_every_sample_kind_extracts_to_exactly_its_ground_truth(kind):
    rng = random.Random(kind)
    for number in range(1, 80):
        sample = generate_invoice(rng, number, kind)
        assert Invoice.model_validate(extract(list(sample.pages))) == expected_invoice(sample)


def test_the_pages_a_provider_reads_back_out_of_the_prompt_extract_the_same():
    for sample in generate_invoices(30, seed=9, kinds=KINDS):
        pages = document_pages(build_messages(sample.pages))
        assert extract(pages) == extract(list(sample.pages))


def test_an_injected_instruction_is_read_as_data_not_obeyed():
    seen = set()
    for seed in range(60):
        sample = generate_invoice(random.Random(seed), seed, INJECTION)
        seen.add(sample.injection)
        extracted = Invoice.model_validate(extract(list(sample.pages)))
        assert extracted == expected_invoice(sample)
        assert extracted.total == f"{sample.total:.2f}" != "0.00"
        assert extracted.currency == sample.currency
        assert extracted.iban == (sample.iban or None)
        assert all(sample.injection not in line.evidence for line in extracted.line_items)
    assert seen == set(INJECTIONS)


def test_an_arithmetic_mistake_makes_exactly_one_line_amount_wrong():
    sample = generate_invoice(random.Random(3), 3, "clean")
    truth = expected_invoice(sample)
    extracted = Invoice.model_validate(extract(list(sample.pages), arithmetic_mistake=True))
    wrong = [
        (got, want) for got, want in zip(extracted.line_items, truth.line_items, strict=True) if got != want
    ]
    assert len(wrong) == 1
    got, want = wrong[0]
    assert Decimal(got.amount) - Decimal(want.amount) == MISTAKE >= Decimal("0.01")
    assert Decimal(got.quantity) * Decimal(got.unit_price) != Decimal(got.amount)
    assert got.evidence == want.evidence  # misread, not invented: the evidence still points at the line
    assert extracted.model_dump(exclude={"line_items"}) == truth.model_dump(exclude={"line_items"})
    assert compare_invoice(extracted, truth).mismatches == ("line_amount",)


@pytest.mark.parametrize(
    "pages",
    [
        [],
        [""],
        ["lorem ipsum dolor sit amet"],
        ["Quarterly report\nRevenue grew 12.5% to 1,234.00 this year"],
    ],
)
def test_text_that_is_not_an_invoice_gives_nulls_not_guesses(pages):
    assert extract(pages) == {
        "supplier": None,
        "invoice_number": None,
        "invoice_number_evidence": None,
        "issue_date": None,
        "due_date": None,
        "currency": None,
        "iban": None,
        "line_items": [],
        "subtotal": None,
        "subtotal_evidence": None,
        "tax": {"rate_percent": None, "amount": None, "evidence": None},
        "total": None,
        "total_evidence": None,
    }


def test_a_smudged_total_is_null_while_the_rest_is_still_read():
    sample = generate_invoice(random.Random(6), 6, "clean")
    assert sample.spans is not None
    pages = [page.replace(sample.spans.total, "Total due ###,## ~~~") for page in sample.pages]
    extracted = Invoice.model_validate(extract(pages))
    truth = expected_invoice(sample)
    assert extracted.total is None
    assert extracted.total_evidence is None
    assert extracted.subtotal == truth.subtotal
    assert extracted.line_items == truth.line_items


@pytest.mark.parametrize(
    ("printed", "read"),
    [
        ("1150.00", "1150.00"),
        ("1,150.00", "1150.00"),
        ("1.150,00", "1150.00"),
        ("1'150.00", "1150.00"),
        ("1150,00", "1150.00"),
        ("12.345.678,90", "12345678.90"),
        ("1.150.00", None),
        ("1,15,0.00", None),
        ("11.5", None),
    ],
)
def test_printed_money_is_read_only_when_unambiguous(printed, read):
    assert normalize_money(printed) == read


@pytest.mark.parametrize(
    ("printed", "read"),
    [
        ("2026-03-14", "2026-03-14"),
        ("14.03.2026", "2026-03-14"),
        ("14-03-2026", "2026-03-14"),
        ("14 March 2026", "2026-03-14"),
        ("March 14, 2026", "2026-03-14"),
        ("31.02.2026", None),
        ("14 Brumaire 2026", None),
    ],
)
def test_printed_dates_are_read_as_iso_dates(printed, read):
    assert parse_date(printed) == read


def test_a_faithful_extraction_matches_every_field_and_no_answer_matches_none():
    sample = generate_invoice(random.Random(12), 12, "multi_page")
    truth = expected_invoice(sample)
    faithful = compare_invoice(Invoice.model_validate(extract(list(sample.pages))), truth, sample.pages)
    assert faithful.exact
    assert faithful.evidence.matched == faithful.evidence.total > 0
    missing = compare_invoice(None, truth, sample.pages)
    assert set(missing.mismatches) == set(FIELDS)
    assert all(score.matched == 0 for score in missing.fields.values())


def test_the_accuracy_report_sums_fields_kinds_and_outcomes():
    report = AccuracyReport()
    samples = generate_invoices(5, seed=2, kinds=KINDS)
    for index, sample in enumerate(samples):
        extracted = Invoice.model_validate(extract(list(sample.pages), arithmetic_mistake=index == 0))
        report.add(compare_invoice(extracted, expected_invoice(sample), sample.pages), sample.kind)
    report.add(
        compare_invoice(None, expected_invoice(samples[1]), samples[1].pages), samples[1].kind, "invalid_json"
    )
    summary = report.as_dict()
    lines = sum(len(s.lines) for s in samples) + len(samples[1].lines)
    assert summary["documents"] == 6
    assert summary["exact_documents"] == 4
    assert summary["fields"]["total"] == {"matched": 5, "total": 6, "rate": 5 / 6}
    assert summary["fields"]["line_amount"]["matched"] == lines - len(samples[1].lines) - 1
    assert summary["exact_documents_by_kind"][samples[0].kind]["matched"] == 0
    assert summary["outcomes"] == {"ok": 5, "invalid_json": 1}
