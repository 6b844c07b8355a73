"""The simulated model reads every sample kind exactly as the ground truth says, treats planted instructions
as text, makes each realistic mistake when told to, and leaves what it cannot read null. The accuracy
comparison scores it accordingly."""

from __future__ import annotations

import random
from decimal import Decimal

import pytest

from tollgate.jobtypes.invoice_extraction.normalize import normalize_money, parse_date
from tollgate.jobtypes.invoice_extraction.prompt import build_messages, document_pages
from tollgate.jobtypes.invoice_extraction.schema import Invoice
from tollgate.jobtypes.invoice_extraction.validation import iban_is_valid
from tollgate_dev.accuracy import FIELDS, AccuracyReport, compare_invoice
from tollgate_dev.samples import (
    EXTRAS,
    INJECTION,
    INJECTIONS,
    KINDS,
    LANGUAGES,
    expected_invoice,
    generate_invoice,
    generate_invoices,
)
from tollgate_dev.simulator.extraction import INVENTED_IBAN, MISTAKE, Mistake, extract

# Each extra alone, all of them, and none, in turn.
EXTRA_SETS = (frozenset(), *(frozenset({extra}) for extra in EXTRAS), frozenset(EXTRAS))


@pytest.mark.parametrize("language", LANGUAGES)
@pytest.mark.parametrize("kind", KINDS)
def test_every_sample_kind_extracts_to_exactly_its_ground_truth(kind, language):
    """In every language and with every extra: the order number, the customer's IBAN and the note's
    currency are printed, and none of them is taken."""
    rng = random.Random(kind)
    for number in range(1, 80):
        extras = EXTRA_SETS[number % len(EXTRA_SETS)]
        sample = generate_invoice(rng, number, kind, language=language, extras=extras)
        assert Invoice.model_validate(extract(list(sample.pages))) == expected_invoice(sample), (
            number,
            extras,
        )


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
        assert all(
            sample.injection not in (line.evidence.quote if line.evidence else "")
            for line in extracted.line_items
        )
    assert seen == set(INJECTIONS)


def test_an_arithmetic_mistake_makes_exactly_one_line_amount_wrong():
    sample = generate_invoice(random.Random(3), 3, "clean")
    truth = expected_invoice(sample)
    extracted = Invoice.model_validate(extract(list(sample.pages), mistake=Mistake.ARITHMETIC))
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
        "issue_date_evidence": None,
        "due_date": None,
        "due_date_evidence": None,
        "currency": None,
        "currency_evidence": None,
        "iban": None,
        "iban_evidence": None,
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
    pages = [page.replace(sample.spans.total.quote, "Total due ###,## ~~~") for page in sample.pages]
    extracted = Invoice.model_validate(extract(pages))
    truth = expected_invoice(sample)
    assert extracted.total is None
    assert extracted.total_evidence is None
    assert extracted.subtotal == truth.subtotal
    assert extracted.line_items == truth.line_items


def _changed(mistake: Mistake, seed: int = 4) -> tuple[Invoice, Invoice]:
    sample = generate_invoice(random.Random(seed), seed, "clean")
    return Invoice.model_validate(extract(list(sample.pages), mistake=mistake)), expected_invoice(sample)


def test_an_invented_iban_has_valid_check_digits_and_keeps_quoting_the_printed_one():
    got, truth = _changed(Mistake.INVENTED_IBAN)
    assert got.iban in {INVENTED_IBAN, "DE89370400440532013000"} and got.iban != truth.iban
    assert iban_is_valid(got.iban)
    assert got.iban_evidence == truth.iban_evidence
    assert got.model_dump(exclude={"iban"}) == truth.model_dump(exclude={"iban"})


def test_a_swap_keeps_the_line_amount_so_the_arithmetic_still_adds_up():
    got, truth = _changed(Mistake.SWAPPED_QUANTITY_PRICE)
    changed = [(g, t) for g, t in zip(got.line_items, truth.line_items, strict=True) if g != t]
    assert len(changed) == 1
    line, printed = changed[0]
    assert Decimal(line.quantity) == Decimal(printed.unit_price)
    assert Decimal(line.unit_price) == Decimal(printed.quantity)
    assert line.amount == printed.amount


def test_a_dropped_line_leaves_the_others_and_the_totals_as_printed():
    got, truth = _changed(Mistake.DROPPED_LINE, seed=8)
    assert len(got.line_items) == len(truth.line_items) - 1
    assert all(line in truth.line_items for line in got.line_items)
    assert (got.subtotal, got.total) == (truth.subtotal, truth.total)


def test_a_wrong_currency_keeps_the_evidence_that_prints_the_right_one():
    got, truth = _changed(Mistake.WRONG_CURRENCY)
    assert got.currency != truth.currency
    assert got.currency_evidence == truth.currency_evidence


def test_evidence_elsewhere_quotes_another_printed_line_for_a_correct_total():
    got, truth = _changed(Mistake.EVIDENCE_ELSEWHERE)
    assert got.total == truth.total
    assert got.total_evidence == truth.subtotal_evidence != truth.total_evidence


def test_invented_evidence_quotes_text_that_is_printed_nowhere():
    got, truth = _changed(Mistake.EVIDENCE_INVENTED)
    sample = generate_invoice(random.Random(4), 4, "clean")
    assert got.total != truth.total
    assert got.total_evidence is not None and got.total in got.total_evidence.quote
    assert all(got.total_evidence.quote not in page for page in sample.pages)


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
        extracted = Invoice.model_validate(
            extract(list(sample.pages), mistake=Mistake.ARITHMETIC if index == 0 else None)
        )
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
