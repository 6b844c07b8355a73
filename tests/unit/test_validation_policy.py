"""Validation policy v2: each rule has a failing and a passing case, every value's evidence must resolve to
its page and say that value, and every realistic model mistake ends in review."""

from __future__ import annotations

import copy
import random
from typing import Any

import pytest

from tollgate.jobtypes.invoice_extraction.evidence import context, locate, resolve_evidence
from tollgate.jobtypes.invoice_extraction.normalize import dates_in, number_readings
from tollgate.jobtypes.invoice_extraction.schema import Evidence, Invoice
from tollgate.jobtypes.invoice_extraction.validation import (
    POLICY_VERSION,
    KnownSupplier,
    TenantPolicy,
    iban_is_valid,
    normalize_name,
    validate_invoice,
)
from tollgate_dev.samples import SUPPLIERS, generate_invoice
from tollgate_dev.simulator.extraction import Mistake, extract

PAGE_1 = """Nordwind Logistik GmbH
Hafenstrasse 12, 20457 Hamburg
Invoice no. DE-2026-00001
Invoice date: 01.03.2026    Due: 31 March 2026

Description                    Qty    Unit price       Amount
Pallet transport                 2      1.234,56     2.469,12 EUR
Toner cartridge, pack of 10      3         61,50       184,50 EUR"""

PAGE_2 = """DE-2026-00001 page 2
Subtotal 2.653,62 EUR
VAT 19% 504,19 EUR
Total due EUR 3.157,81
IBAN DE89 3704 0044 0532 0130 00"""

PAGES = (PAGE_1, PAGE_2)

POLICY = TenantPolicy(
    allowed_currencies=frozenset({"EUR", "USD"}),
    suppliers=(KnownSupplier("Nordwind Logistik GmbH", "DE89370400440532013000"),),
)


def ev(page: int, quote: str) -> dict[str, Any]:
    return {"page": page, "quote": quote}


FAITHFUL: dict[str, Any] = {
    "supplier": {"name": "Nordwind Logistik GmbH", "evidence": ev(1, "Nordwind Logistik GmbH")},
    "invoice_number": "DE-2026-00001",
    "invoice_number_evidence": ev(1, "Invoice no. DE-2026-00001"),
    "issue_date": "2026-03-01",
    "issue_date_evidence": ev(1, "Invoice date: 01.03.2026"),
    "due_date": "2026-03-31",
    "due_date_evidence": ev(1, "Due: 31 March 2026"),
    "currency": "EUR",
    "currency_evidence": ev(2, "Total due EUR 3.157,81"),
    "iban": "DE89370400440532013000",
    "iban_evidence": ev(2, "IBAN DE89 3704 0044 0532 0130 00"),
    "line_items": [
        {
            "description": "Pallet transport",
            "quantity": "2",
            "unit_price": "1234.56",
            "amount": "2469.12",
            "evidence": ev(1, "Pallet transport 2 1.234,56 2.469,12 EUR"),
        },
        {
            "description": "Toner cartridge, pack of 10",
            "quantity": "3",
            "unit_price": "61.50",
            "amount": "184.50",
            "evidence": ev(1, "Toner cartridge, pack of 10      3         61,50       184,50 EUR"),
        },
    ],
    "subtotal": "2653.62",
    "subtotal_evidence": ev(2, "Subtotal 2.653,62 EUR"),
    "tax": {"rate_percent": "19", "amount": "504.19", "evidence": ev(2, "VAT 19% 504,19 EUR")},
    "total": "3157.81",
    "total_evidence": ev(2, "Total due EUR 3.157,81"),
}


def invoice(**changes: Any) -> Invoice:
    data = copy.deepcopy(FAITHFUL)
    data.update(changes)
    return Invoice.model_validate(data)


def with_line(index: int, **changes: Any) -> Invoice:
    lines = copy.deepcopy(FAITHFUL["line_items"])
    lines[index].update(changes)
    return invoice(line_items=lines)


def reasons(
    inv: Invoice, policy: TenantPolicy = POLICY, pages: tuple[str, ...] = PAGES
) -> list[tuple[str, str]]:
    return [(r.code, r.field) for r in validate_invoice(inv, pages, policy).reasons]


def test_a_faithful_extraction_passes_under_policy_v2():
    report = validate_invoice(invoice(), PAGES, POLICY)
    assert report.reasons == []
    assert report.policy_version == POLICY_VERSION == "validation.v2"


# Arithmetic, presence and identity rules (carried over from v1).


def test_a_line_amount_that_is_not_quantity_times_price_fails():
    got = reasons(with_line(1, amount="184.51"))
    assert ("line_amount_mismatch", "line_items[1].amount") in got


def test_lines_that_do_not_add_up_to_the_subtotal_fail():
    got = reasons(invoice(subtotal="2653.52", subtotal_evidence=ev(2, "Subtotal 2.653,62 EUR")))
    assert ("subtotal_mismatch", "subtotal") in got


def test_subtotal_plus_tax_must_equal_the_total_to_the_cent():
    assert ("total_mismatch", "total") in reasons(invoice(total="3157.82"))


@pytest.mark.parametrize("field", ["subtotal", "total"])
def test_a_missing_money_field_is_flagged_never_ignored(field):
    assert ("missing_money_field", field) in reasons(invoice(**{field: None, f"{field}_evidence": None}))


def test_a_missing_tax_amount_is_flagged():
    got = reasons(invoice(tax={"rate_percent": None, "amount": None, "evidence": None}))
    assert ("missing_money_field", "tax.amount") in got


@pytest.mark.parametrize("field", ["invoice_number", "issue_date"])
def test_a_missing_invoice_number_or_issue_date_is_flagged(field):
    assert reasons(invoice(**{field: None, f"{field}_evidence": None})) == [("missing_field", field)]


def test_a_currency_outside_the_tenants_list_fails_and_one_inside_passes():
    eur_only = TenantPolicy(frozenset({"USD"}), POLICY.suppliers)
    assert reasons(invoice(), eur_only) == [("currency_not_allowed", "currency")]
    assert reasons(invoice(currency=None, currency_evidence=None)) == [("missing_currency", "currency")]


def test_an_iban_with_bad_check_digits_fails():
    assert iban_is_valid("DE89370400440532013000")
    assert iban_is_valid("GB29NWBK60161331926819")
    assert not iban_is_valid("DE89370400440532013001")
    no_iban_on_file = TenantPolicy(POLICY.allowed_currencies, (KnownSupplier("Nordwind Logistik GmbH"),))
    got = reasons(invoice(iban="DE89370400440532013001"), no_iban_on_file)
    assert ("iban_checksum_invalid", "iban") in got


def test_the_supplier_must_be_in_the_tenants_master_data():
    other = TenantPolicy(POLICY.allowed_currencies, (KnownSupplier("Nordwind Logistics Ltd"),))
    assert reasons(invoice(), other) == [("supplier_unknown", "supplier")]
    assert normalize_name("NORDWIND  Logistik-GmbH") == normalize_name("Nordwind Logistik GmbH")


def test_an_iban_other_than_the_one_on_file_fails():
    got = reasons(invoice(iban="GB29NWBK60161331926819"))
    assert ("supplier_iban_mismatch", "iban") in got


def test_no_line_items_fails():
    assert ("no_line_items", "line_items") in reasons(invoice(line_items=[]))


# Evidence: present, on its page, and saying the value.

EVIDENCED = [
    "supplier",
    "invoice_number",
    "issue_date",
    "due_date",
    "currency",
    "iban",
    "line_items[0]",
    "line_items[1]",
    "subtotal",
    "tax",
    "total",
]


def _without_evidence(field: str) -> Invoice:
    data = copy.deepcopy(FAITHFUL)
    if field == "supplier":
        data["supplier"]["evidence"] = None
    elif field == "tax":
        data["tax"]["evidence"] = None
    elif field.startswith("line_items["):
        data["line_items"][int(field[11])]["evidence"] = None
    else:
        data[f"{field}_evidence"] = None
    return Invoice.model_validate(data)


@pytest.mark.parametrize("field", EVIDENCED)
def test_every_value_that_reaches_an_erp_without_evidence_fails(field):
    assert reasons(_without_evidence(field)) == [("evidence_missing", field)]


def test_every_evidenced_field_is_resolved_to_a_span_of_its_page():
    resolved = resolve_evidence(invoice(), PAGES)
    assert sorted(resolved) == sorted(EVIDENCED)
    for name, item in resolved.items():
        assert item.span is not None, name
        page = PAGES[item.span.page - 1]
        assert " ".join(page[item.span.start : item.span.end].split()) == " ".join(
            item.evidence.quote.split()
        )
    iban = resolved["iban"].span
    assert iban is not None and PAGE_2[iban.start : iban.end] == "IBAN DE89 3704 0044 0532 0130 00"
    shown = context(iban, PAGES, chars=10)
    assert shown["text"].startswith("IBAN") and shown["before"] == " 3.157,81\n"


def test_a_quote_printed_nowhere_is_not_found():
    got = reasons(invoice(total_evidence=ev(2, "Total due EUR 3.157,81 (paid)")))
    assert got == [("evidence_not_found", "total")]


def test_a_quote_on_another_page_than_it_names_is_not_found_and_says_where_it_is():
    report = validate_invoice(invoice(total_evidence=ev(1, "Total due EUR 3.157,81")), PAGES, POLICY)
    assert [(r.code, r.field) for r in report.reasons] == [("evidence_not_found", "total")]
    assert "page 2" in report.reasons[0].detail


def test_a_page_past_the_document_is_not_found():
    assert reasons(invoice(total_evidence=ev(3, "Total due EUR 3.157,81"))) == [
        ("evidence_not_found", "total")
    ]


def test_ocr_spacing_in_a_quote_is_not_a_difference():
    spaced = ev(2, "Total   due\nEUR 3.157,81")
    assert reasons(invoice(total_evidence=spaced, currency_evidence=spaced)) == []


@pytest.mark.parametrize(
    ("printed", "value"),
    [
        ("1.234,56", "1234.56"),
        ("1,234.56", "1234.56"),
        ("1'234.56", "1234.56"),
        ("1234,56", "1234.56"),
        ("1234.56", "1234.56"),
        ("12.345.678,90", "12345678.90"),
        ("-5,00", "-5.00"),
    ],
)
def test_amount_formats_normalize_to_the_extracted_value(printed, value):
    pages = (PAGE_1, PAGE_2.replace("3.157,81", printed))
    total = invoice(total=value, total_evidence=ev(2, f"Total due EUR {printed}"))
    assert "evidence_contradicts" not in [code for code, _ in reasons(total, pages=pages)]


@pytest.mark.parametrize("printed", ["1.150.00", "1,15,0.00"])
def test_an_ambiguous_amount_is_not_read_as_any_value(printed):
    assert all(r not in number_readings(printed) for r in (1150, 115))


@pytest.mark.parametrize(
    ("printed", "iso"),
    [
        ("2026-03-01", "2026-03-01"),
        ("01.03.2026", "2026-03-01"),
        ("1-3-2026", "2026-03-01"),
        ("01/03/2026", "2026-03-01"),
        ("1 March 2026", "2026-03-01"),
        ("March 1, 2026", "2026-03-01"),
    ],
)
def test_date_formats_normalize_to_the_iso_date(printed, iso):
    assert dates_in(f"Invoice date: {printed}") == {iso}
    pages = (PAGE_1.replace("01.03.2026", printed), PAGE_2)
    got = reasons(invoice(issue_date=iso, issue_date_evidence=ev(1, f"Invoice date: {printed}")), pages=pages)
    assert got == []


def test_an_impossible_date_is_no_evidence_for_any_date():
    assert dates_in("Invoice date: 31.02.2026") == set()


def test_iban_spacing_and_case_do_not_matter_but_a_digit_does():
    assert reasons(invoice(iban_evidence=ev(2, "DE89 3704 0044 0532 0130 00"))) == []
    lower = (PAGE_1, PAGE_2.replace("DE89 3704", "de89 3704"))
    assert reasons(invoice(iban_evidence=ev(2, "IBAN de89 3704 0044 0532 0130 00")), pages=lower) == []
    other = invoice(iban="DE89370400440532013001", iban_evidence=ev(2, "IBAN DE89 3704 0044 0532 0130 00"))
    got = reasons(other, TenantPolicy(POLICY.allowed_currencies, (KnownSupplier("Nordwind Logistik GmbH"),)))
    assert ("evidence_contradicts", "iban") in got


@pytest.mark.parametrize(
    ("field", "value", "quote"),
    [
        ("invoice_number", "DE-2026-0001", "Invoice no. DE-2026-00001"),
        ("issue_date", "2026-03-31", "Invoice date: 01.03.2026"),
        ("due_date", "2026-03-01", "Due: 31 March 2026"),
        ("currency", "USD", "Total due EUR 3.157,81"),
        ("total", "3157.18", "Total due EUR 3.157,81"),
        ("subtotal", "2653.26", "Subtotal 2.653,62 EUR"),
    ],
)
def test_evidence_that_says_another_value_contradicts_it(field, value, quote):
    page = 1 if field in {"invoice_number", "issue_date", "due_date"} else 2
    got = reasons(invoice(**{field: value, f"{field}_evidence": ev(page, quote)}))
    assert ("evidence_contradicts", field) in got


def test_a_supplier_name_must_be_printed_in_its_quote():
    got = reasons(invoice(supplier={"name": "Nordwind Logistik GmbH", "evidence": ev(1, "Hafenstrasse 12")}))
    assert got == [("evidence_contradicts", "supplier")]


def test_the_tax_quote_must_print_both_rate_and_amount():
    tax = {"rate_percent": "7", "amount": "504.19", "evidence": ev(2, "VAT 19% 504,19 EUR")}
    assert ("evidence_contradicts", "tax") in reasons(invoice(tax=tax))


def test_a_line_quote_must_print_quantity_price_and_amount_in_that_order():
    swapped = with_line(0, quantity="1234.56", unit_price="2.00")
    assert reasons(swapped) == [("evidence_contradicts", "line_items[0]")]
    # The "10" in the description sits before the numbers and does not confuse the order.
    assert reasons(with_line(1, description="Toner cartridge, pack of 10")) == []


def test_a_line_quoting_another_line_contradicts_it():
    got = reasons(with_line(0, evidence=ev(1, "Toner cartridge, pack of 10 3 61,50 184,50 EUR")))
    assert got == [("evidence_contradicts", "line_items[0]")]


# Every realistic mistake a model makes, as the simulated provider makes it, on every sample layout.

ALL_CURRENCIES = TenantPolicy(
    frozenset({s.currency for s in SUPPLIERS} | {"USD", "EUR"}),
    tuple(KnownSupplier(s.name) for s in SUPPLIERS),
)
EXPECTED_CODES = {
    Mistake.ARITHMETIC: {"line_amount_mismatch", "subtotal_mismatch"},
    Mistake.INVENTED_IBAN: {"evidence_contradicts", "evidence_missing"},
    Mistake.SWAPPED_QUANTITY_PRICE: {"evidence_contradicts"},
    Mistake.DROPPED_LINE: {"subtotal_mismatch", "no_line_items"},
    Mistake.WRONG_CURRENCY: {"evidence_contradicts"},
    Mistake.EVIDENCE_ELSEWHERE: {"evidence_contradicts"},
    Mistake.EVIDENCE_INVENTED: {"evidence_not_found"},
}


@pytest.mark.parametrize("mistake", list(Mistake))
def test_every_realistic_mistake_fails_the_policy_on_every_layout(mistake):
    rng = random.Random(mistake.value)
    for number in range(1, 40):
        sample = generate_invoice(rng, number, "clean" if number % 2 else "multi_page")
        faithful = Invoice.model_validate(extract(list(sample.pages)))
        assert validate_invoice(faithful, sample.pages, ALL_CURRENCIES).passed
        wrong = Invoice.model_validate(extract(list(sample.pages), mistake=mistake))
        report = validate_invoice(wrong, sample.pages, ALL_CURRENCIES)
        assert not report.passed, (mistake, sample.supplier)
        assert {r.code for r in report.reasons} & EXPECTED_CODES[mistake], report.reasons


def test_an_invented_iban_with_valid_check_digits_and_no_evidence_for_the_money_fails():
    """The case that passed policy v1: a checksum-valid IBAN from nowhere, money fields unevidenced."""
    got = reasons(
        invoice(
            iban="GB33BUKB20201555555555",
            iban_evidence=None,
            subtotal_evidence=None,
            total_evidence=None,
            tax={"rate_percent": "19", "amount": "504.19", "evidence": None},
        ),
        TenantPolicy(POLICY.allowed_currencies, (KnownSupplier("Nordwind Logistik GmbH"),)),
    )
    assert set(got) >= {
        ("evidence_missing", "iban"),
        ("evidence_missing", "subtotal"),
        ("evidence_missing", "tax"),
        ("evidence_missing", "total"),
    }


def test_locate_finds_the_first_place_a_quote_is_printed():
    span = locate(Evidence(page=1, quote="DE-2026-00001"), PAGES)
    assert span is not None and (span.page, PAGE_1[span.start : span.end]) == (1, "DE-2026-00001")
    assert locate(Evidence(page=2, quote="DE-2026-00001"), PAGES) is not None
