"""The simulated model reads every sample kind exactly as the ground truth says, treats planted instructions
as text, makes each realistic mistake when told to, and leaves what it cannot read null. The accuracy
comparison scores it accordingly."""

from __future__ import annotations

import random
import unicodedata
from decimal import Decimal

import pytest

from tollgate.jobtypes.invoice_extraction.evidence import evidence_fields, locate
from tollgate.jobtypes.invoice_extraction.normalize import normalize_money, parse_date
from tollgate.jobtypes.invoice_extraction.prompt import build_messages, document_pages
from tollgate.jobtypes.invoice_extraction.schema import Invoice
from tollgate.jobtypes.invoice_extraction.validation import iban_is_valid
from tollgate_dev.accuracy import FIELDS, AccuracyReport, compare_invoice
from tollgate_dev.samples import (
    CURRENCY_NOTE,
    DIRECT_DEBIT,
    EN,
    EXTRAS,
    INJECTION,
    INJECTIONS,
    KINDS,
    LANGUAGES,
    ORDER_LINE,
    SUPPLIERS,
    SampleInvoice,
    expected_invoice,
    generate_invoice,
    generate_invoices,
    grouped_iban,
    wording,
)
from tollgate_dev.simulator.documents import DocumentMistake
from tollgate_dev.simulator.extraction import (
    COMMON_RATES,
    INVENTED_IBAN,
    MISTAKE,
    Mistake,
    extract,
    mistake_applies,
)
from tollgate_dev.simulator.server import Fault

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


# The adversary: one plausible wrong value whose evidence is a real line, or part of one, of the page.

ADVERSARY = (
    Mistake.ISSUE_DATE_IS_DUE_DATE,
    Mistake.DATES_SWAPPED,
    Mistake.INVOICE_NUMBER_FROM_ORDER,
    Mistake.INVOICE_NUMBER_FROM_TAX_ID,
    Mistake.CURRENCY_FROM_NOTE,
    Mistake.IBAN_FROM_DIRECT_DEBIT,
    Mistake.CUT_INVOICE_NUMBER,
    Mistake.CUT_DATE,
    Mistake.LONG_S,
    Mistake.KELVIN_SIGN,
    Mistake.FULLWIDTH_TOTAL,
    Mistake.TAX_RATE_CHANGED,
    Mistake.DESCRIPTIONS_SWAPPED,
    Mistake.DESCRIPTION_INVENTED,
)
# The fields each one changes; nothing else differs from the ground truth.
CHANGES = {
    Mistake.ISSUE_DATE_IS_DUE_DATE: {"issue_date", "issue_date_evidence"},
    Mistake.DATES_SWAPPED: {"issue_date", "issue_date_evidence", "due_date", "due_date_evidence"},
    Mistake.INVOICE_NUMBER_FROM_ORDER: {"invoice_number", "invoice_number_evidence"},
    Mistake.INVOICE_NUMBER_FROM_TAX_ID: {"invoice_number", "invoice_number_evidence"},
    Mistake.CURRENCY_FROM_NOTE: {"currency", "currency_evidence"},
    Mistake.IBAN_FROM_DIRECT_DEBIT: {"iban", "iban_evidence"},
    Mistake.CUT_INVOICE_NUMBER: {"invoice_number", "invoice_number_evidence"},
    Mistake.LONG_S: {"supplier"},
    Mistake.KELVIN_SIGN: {"supplier"},
    Mistake.FULLWIDTH_TOTAL: {"total"},
    Mistake.TAX_RATE_CHANGED: {"tax"},
    Mistake.DESCRIPTIONS_SWAPPED: {"line_items"},
    Mistake.DESCRIPTION_INVENTED: {"line_items"},
}


def documents() -> list[SampleInvoice]:
    """Every layout feature the adversary looks for: each language, with all extras and with none."""
    return [
        sample
        for language in LANGUAGES
        for extras in (frozenset(EXTRAS), frozenset())
        for sample in generate_invoices(20, seed=13, kinds=KINDS, language=language, extras=extras)
    ]


DOCUMENTS = documents()


def changed_fields(got: Invoice, truth: Invoice) -> set[str]:
    got_fields, true_fields = got.model_dump(), truth.model_dump()
    return {name for name in true_fields if got_fields[name] != true_fields[name]}


def printed_date(quote: str) -> str:
    """The date a date's evidence prints, without its label (every layout ends its date labels on ':')."""
    return quote.split(": ", 1)[1]


def profile_of(sample: SampleInvoice):
    return next(p for p in SUPPLIERS if p.name == sample.supplier)


def test_every_mistake_can_be_queued_as_a_fault_of_the_simulated_provider():
    values = {m.value for m in Mistake} | {m.value for m in DocumentMistake}
    assert values <= {f.value for f in Fault}


@pytest.mark.parametrize("mistake", ADVERSARY)
def test_an_adversary_mistake_changes_one_value_and_quotes_a_real_line_for_it(mistake):
    applied = 0
    for sample in DOCUMENTS:
        truth = expected_invoice(sample)
        got = Invoice.model_validate(extract(list(sample.pages), mistake=mistake))
        if not mistake_applies(mistake, sample.pages):
            assert got == truth, "without its feature the answer stays truthful"
            continue
        applied += 1
        changed = changed_fields(got, truth)
        if mistake is Mistake.CUT_DATE:
            assert changed in ({"issue_date", "issue_date_evidence"}, {"due_date", "due_date_evidence"})
        else:
            assert changed == CHANGES[mistake], (sample.supplier, sample.language)
        for name, evidence in evidence_fields(got):
            if evidence is None:
                continue
            if mistake in (Mistake.CUT_INVOICE_NUMBER, Mistake.CUT_DATE) and name in changed:
                # Text of the page, cut inside a token: printed, but not as whole tokens.
                page = " ".join(sample.pages[evidence.page - 1].split())
                assert " ".join(evidence.quote.split()) in page and locate(evidence, sample.pages) is None
            else:
                assert locate(evidence, sample.pages) is not None, (name, evidence)
        check = CHECKS[mistake]
        check(got, truth, sample)
    assert applied >= 10, f"{mistake} applied to only {applied} documents"


def _issue_date_is_due_date(got: Invoice, truth: Invoice, sample: SampleInvoice) -> None:
    assert got.issue_date == truth.due_date != truth.issue_date
    assert got.issue_date_evidence is not None and truth.due_date_evidence is not None
    assert got.issue_date_evidence.quote == printed_date(truth.due_date_evidence.quote)


def _dates_swapped(got: Invoice, truth: Invoice, sample: SampleInvoice) -> None:
    assert (got.issue_date, got.due_date) == (truth.due_date, truth.issue_date)
    assert got.issue_date_evidence is not None and truth.due_date_evidence is not None
    assert got.due_date_evidence is not None and truth.issue_date_evidence is not None
    assert got.issue_date_evidence.quote == printed_date(truth.due_date_evidence.quote)
    assert got.due_date_evidence.quote == printed_date(truth.issue_date_evidence.quote)


def _invoice_number_from_order(got: Invoice, truth: Invoice, sample: SampleInvoice) -> None:
    assert ORDER_LINE in sample.extras
    assert got.invoice_number == sample.order_number
    assert got.invoice_number_evidence is not None
    order_label = wording(profile_of(sample), sample.language).order_label
    assert got.invoice_number_evidence.quote.split() == [*order_label.split(), sample.order_number]


def _invoice_number_from_tax_id(got: Invoice, truth: Invoice, sample: SampleInvoice) -> None:
    tax_id_line = wording(profile_of(sample), sample.language).tax_id
    assert got.invoice_number_evidence is not None
    assert " ".join(got.invoice_number_evidence.quote.split()) == tax_id_line
    assert got.invoice_number and got.invoice_number in tax_id_line and got.invoice_number[:1].isalnum()
    if tax_id_line == "VAT ID DE287561934":
        assert got.invoice_number == "DE287561934"


def _currency_from_note(got: Invoice, truth: Invoice, sample: SampleInvoice) -> None:
    assert CURRENCY_NOTE in sample.extras
    assert got.currency == sample.note_currency != truth.currency
    assert got.currency_evidence is not None and f" {sample.note_currency} " in got.currency_evidence.quote


def _iban_from_direct_debit(got: Invoice, truth: Invoice, sample: SampleInvoice) -> None:
    assert DIRECT_DEBIT in sample.extras and sample.customer_iban is not None
    assert got.iban == sample.customer_iban != truth.iban
    assert iban_is_valid(got.iban)
    assert got.iban_evidence is not None
    assert " ".join(got.iban_evidence.quote.split()).endswith(grouped_iban(sample.customer_iban))


def _cut_invoice_number(got: Invoice, truth: Invoice, sample: SampleInvoice) -> None:
    assert truth.invoice_number is not None and truth.invoice_number_evidence is not None
    assert got.invoice_number == truth.invoice_number[:-1]
    assert got.invoice_number_evidence is not None
    assert got.invoice_number_evidence.quote == truth.invoice_number_evidence.quote[:-1]


def _cut_date(got: Invoice, truth: Invoice, sample: SampleInvoice) -> None:
    field = "issue_date" if got.issue_date != truth.issue_date else "due_date"
    true_quote = getattr(truth, f"{field}_evidence").quote
    quote = getattr(got, f"{field}_evidence").quote
    printed = printed_date(true_quote)
    assert len(printed) == len("24.05.2026") and printed[2] == "."
    assert quote == printed[1:]
    assert getattr(got, field) == parse_date(quote) != getattr(truth, field)


def _long_s(got: Invoice, truth: Invoice, sample: SampleInvoice) -> None:
    assert got.supplier is not None and truth.supplier is not None
    assert got.supplier.name.count("\N{LATIN SMALL LETTER LONG S}") == 1
    assert got.supplier.name.replace("\N{LATIN SMALL LETTER LONG S}", "s") == truth.supplier.name
    assert got.supplier.evidence == truth.supplier.evidence


def _kelvin_sign(got: Invoice, truth: Invoice, sample: SampleInvoice) -> None:
    assert got.supplier is not None and truth.supplier is not None
    name = got.supplier.name
    assert name.count("\N{KELVIN SIGN}") == 1
    at = name.index("\N{KELVIN SIGN}")
    assert truth.supplier.name[at] in "Kk"
    assert name[:at] + truth.supplier.name[at] + name[at + 1 :] == truth.supplier.name
    assert got.supplier.evidence == truth.supplier.evidence


def _fullwidth_total(got: Invoice, truth: Invoice, sample: SampleInvoice) -> None:
    assert got.total is not None and got.total != truth.total
    assert all(not c.isdigit() or 0xFF10 <= ord(c) <= 0xFF19 for c in got.total)
    assert unicodedata.normalize("NFKC", got.total) == truth.total
    assert got.total_evidence == truth.total_evidence


def _tax_rate_changed(got: Invoice, truth: Invoice, sample: SampleInvoice) -> None:
    assert got.tax.rate_percent in COMMON_RATES and got.tax.rate_percent != truth.tax.rate_percent
    assert (got.tax.amount, got.tax.evidence) == (truth.tax.amount, truth.tax.evidence)


def _descriptions_swapped(got: Invoice, truth: Invoice, sample: SampleInvoice) -> None:
    pairs = list(zip(got.line_items, truth.line_items, strict=True))
    different = [(g, t) for g, t in pairs if g != t]
    assert len(different) == 2
    (first, first_truth), (second, second_truth) = different
    assert (first.description, second.description) == (second_truth.description, first_truth.description)
    assert all(
        g.model_dump(exclude={"description"}) == t.model_dump(exclude={"description"}) for g, t in pairs
    )


def _description_invented(got: Invoice, truth: Invoice, sample: SampleInvoice) -> None:
    pairs = list(zip(got.line_items, truth.line_items, strict=True))
    [(line, printed)] = [(g, t) for g, t in pairs if g != t]
    assert line.model_dump(exclude={"description"}) == printed.model_dump(exclude={"description"})
    text = " ".join(" ".join(sample.pages).split()).lower()
    assert line.description.lower() not in text


CHECKS = {
    Mistake.ISSUE_DATE_IS_DUE_DATE: _issue_date_is_due_date,
    Mistake.DATES_SWAPPED: _dates_swapped,
    Mistake.INVOICE_NUMBER_FROM_ORDER: _invoice_number_from_order,
    Mistake.INVOICE_NUMBER_FROM_TAX_ID: _invoice_number_from_tax_id,
    Mistake.CURRENCY_FROM_NOTE: _currency_from_note,
    Mistake.IBAN_FROM_DIRECT_DEBIT: _iban_from_direct_debit,
    Mistake.CUT_INVOICE_NUMBER: _cut_invoice_number,
    Mistake.CUT_DATE: _cut_date,
    Mistake.LONG_S: _long_s,
    Mistake.KELVIN_SIGN: _kelvin_sign,
    Mistake.FULLWIDTH_TOTAL: _fullwidth_total,
    Mistake.TAX_RATE_CHANGED: _tax_rate_changed,
    Mistake.DESCRIPTIONS_SWAPPED: _descriptions_swapped,
    Mistake.DESCRIPTION_INVENTED: _description_invented,
}


@pytest.mark.parametrize(
    ("mistake", "feature"),
    [
        (Mistake.INVOICE_NUMBER_FROM_ORDER, lambda s: ORDER_LINE in s.extras),
        (Mistake.CURRENCY_FROM_NOTE, lambda s: CURRENCY_NOTE in s.extras),
        (Mistake.IBAN_FROM_DIRECT_DEBIT, lambda s: DIRECT_DEBIT in s.extras),
        (Mistake.LONG_S, lambda s: "s" in s.supplier),
        (Mistake.KELVIN_SIGN, lambda s: "k" in s.supplier.lower()),
        (Mistake.DESCRIPTIONS_SWAPPED, lambda s: len({line.description for line in s.lines}) >= 2),
        (
            Mistake.CUT_DATE,
            lambda s: any(
                wording(profile_of(s), s.language).date_style == "dots" and d.day > 10 and d.day % 10
                for d in (s.issue_date, s.due_date)
            ),
        ),
    ],
)
def test_a_mistake_that_needs_a_layout_feature_applies_exactly_where_the_document_has_it(mistake, feature):
    assert [mistake_applies(mistake, s.pages) for s in DOCUMENTS] == [bool(feature(s)) for s in DOCUMENTS]


def test_the_us_supplier_with_a_direct_debit_line_gets_the_customers_iban_from_the_adversary():
    sample = next(s for s in DOCUMENTS if not s.iban and DIRECT_DEBIT in s.extras and s.language == EN)
    truth = expected_invoice(sample)
    got = Invoice.model_validate(extract(list(sample.pages), mistake=Mistake.IBAN_FROM_DIRECT_DEBIT))
    assert truth.iban is None and truth.iban_evidence is None
    assert got.iban == sample.customer_iban
