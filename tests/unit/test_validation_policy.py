"""Validation policy v3, tried as an adversary would: every value that reaches an ERP must be printed on the
page with exactly its characters, as whole tokens, under a label of its own field. Each adversary below is a
plausible wrong value whose evidence is a real line of the page; each must fail with a named reason while
the truthful extraction of the same page passes. The last tests plant bugs in the policy and show these
adversaries catch them."""

from __future__ import annotations

import copy
import random
from collections.abc import Callable
from typing import Any

import pytest

from tollgate.jobtypes import printed
from tollgate.jobtypes.invoice_extraction import validation
from tollgate.jobtypes.invoice_extraction.evidence import locate
from tollgate.jobtypes.invoice_extraction.normalize import number_readings
from tollgate.jobtypes.invoice_extraction.schema import Evidence, Invoice
from tollgate.jobtypes.invoice_extraction.validation import (
    POLICY_VERSION,
    KnownSupplier,
    TenantPolicy,
    iban_is_valid,
    normalize_name,
    validate_invoice,
)
from tollgate_dev.samples import (
    CLEAN,
    EXTRAS,
    INCONSISTENT_TOTAL,
    KINDS,
    LANGUAGES,
    MULTI_PAGE,
    NOTE_CURRENCIES,
    OCR_NOISE,
    SUPPLIERS,
    generate_invoice,
    generate_invoices,
)
from tollgate_dev.simulator.extraction import Mistake, extract, mistake_applies

CONSISTENT = (CLEAN, MULTI_PAGE, OCR_NOISE)

PAGE_1 = """Nordwind Logistik GmbH
Hafenstrasse 12, 20457 Hamburg
VAT ID DE287561934
Invoice no. DE-2026-00014    Order no. PO-7781
Invoice date: 24.02.2026    Due: 26 March 2026

Bill to: Harbor Retail Group Ltd

Description                    Qty    Unit price       Amount
Pallet transport                 2      1.234,56     2.469,12 EUR
Toner cartridge, pack of 10      3         61,50       184,50 EUR"""

PAGE_2 = """DE-2026-00014 page 2
Subtotal 2.653,62 EUR
VAT 19% 504,19 EUR
Total due EUR 3.157,81
Payable also in USD at the daily exchange rate.
IBAN DE89 3704 0044 0532 0130 00
Direct debit from customer account IBAN GB29 NWBK 6016 1331 9268 19"""

PAGES = (PAGE_1, PAGE_2)
CUSTOMER_IBAN = "GB29NWBK60161331926819"

POLICY = TenantPolicy(
    allowed_currencies=frozenset({"EUR", "USD"}),
    suppliers=(KnownSupplier("Nordwind Logistik GmbH", "DE89370400440532013000"),),
)
NO_IBAN_ON_FILE = TenantPolicy(POLICY.allowed_currencies, (KnownSupplier("Nordwind Logistik GmbH"),))


def ev(page: int, quote: str) -> dict[str, Any]:
    return {"page": page, "quote": quote}


FAITHFUL: dict[str, Any] = {
    "supplier": {"name": "Nordwind Logistik GmbH", "evidence": ev(1, "Nordwind Logistik GmbH")},
    "invoice_number": "DE-2026-00014",
    "invoice_number_evidence": ev(1, "Invoice no. DE-2026-00014"),
    "issue_date": "2026-02-24",
    "issue_date_evidence": ev(1, "Invoice date: 24.02.2026"),
    "due_date": "2026-03-26",
    "due_date_evidence": ev(1, "Due: 26 March 2026"),
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


def located(inv: Invoice, pages: tuple[str, ...] = PAGES) -> dict[str, dict[str, Any]]:
    report = validate_invoice(inv, pages, POLICY)
    return {entry["field"]: entry for entry in report.located_json(pages)}


def test_a_faithful_extraction_passes_under_policy_v3_and_records_where_each_value_is_printed():
    report = validate_invoice(invoice(), PAGES, POLICY)
    assert report.reasons == []
    assert report.policy_version == POLICY_VERSION == "validation.v3"

    found = {entry["field"]: entry for entry in report.located_json(PAGES)}
    shown = {field: (e["page"], e["text"], e["label"] and e["label"]["text"]) for field, e in found.items()}
    assert shown == {
        "supplier": (1, "Nordwind Logistik GmbH", None),
        "invoice_number": (1, "DE-2026-00014", "Invoice no."),
        "issue_date": (1, "24.02.2026", "Invoice date"),
        "due_date": (1, "26 March 2026", "Due"),
        "subtotal": (2, "2.653,62", "Subtotal"),
        "total": (2, "3.157,81", "Total due"),
        "tax": (2, "504,19", "VAT"),
        "tax.rate_percent": (2, "19", "VAT"),
        "line_items[0]": (1, "Pallet transport                 2      1.234,56     2.469,12", "Description"),
        "line_items[1]": (1, "Toner cartridge, pack of 10      3         61,50       184,50", "Description"),
        "iban": (2, "DE89 3704 0044 0532 0130 00", "IBAN"),
        "currency": (2, "EUR", "Total due"),
    }
    label = found["due_date"]["label"]
    assert PAGE_1[label["start"] : label["end"]] == "Due" and label["field"] == "due_date"


# Rules between fields (arithmetic, presence, identity), as before, and the new cross-field rules.


def test_a_line_amount_that_is_not_quantity_times_price_fails():
    assert ("line_amount_mismatch", "line_items[1].amount") in reasons(with_line(1, amount="184.51"))


def test_lines_that_do_not_add_up_to_the_subtotal_fail():
    assert ("subtotal_mismatch", "subtotal") in reasons(invoice(subtotal="2653.52"))


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


def test_a_currency_outside_the_tenants_list_fails():
    assert reasons(invoice(), TenantPolicy(frozenset({"USD"}), POLICY.suppliers)) == [
        ("currency_not_allowed", "currency")
    ]
    assert reasons(invoice(currency=None, currency_evidence=None)) == [("missing_currency", "currency")]


def test_an_iban_with_bad_check_digits_fails():
    assert iban_is_valid("DE89370400440532013000") and iban_is_valid(CUSTOMER_IBAN)
    assert not iban_is_valid("DE89370400440532013001")
    assert ("iban_checksum_invalid", "iban") in reasons(
        invoice(iban="DE89370400440532013001"), NO_IBAN_ON_FILE
    )


def test_the_supplier_must_be_in_the_tenants_master_data():
    other = TenantPolicy(POLICY.allowed_currencies, (KnownSupplier("Nordwind Logistics Ltd"),))
    assert reasons(invoice(), other) == [("supplier_unknown", "supplier")]
    assert normalize_name("NORDWIND  Logistik-GmbH") == normalize_name("Nordwind Logistik GmbH")


def test_an_iban_other_than_the_one_on_file_fails():
    assert ("supplier_iban_mismatch", "iban") in reasons(invoice(iban=CUSTOMER_IBAN))


def test_no_line_items_fails():
    assert ("no_line_items", "line_items") in reasons(invoice(line_items=[]))


def test_the_tax_must_be_the_subtotal_times_the_rate_within_the_documents_rounding():
    # 2653.62 x 19% = 504.1878: 504.19 as printed, and a cent off either way per line is rounding.
    assert reasons(invoice()) == []
    pages = (PAGE_1, PAGE_2.replace("504,19", "504,20").replace("3.157,81", "3.157,82"))
    rounded = invoice(total="3157.82", tax={"rate_percent": "19", "amount": "504.20", "evidence": None})
    assert reasons(rounded, pages=pages) == []
    pages = (PAGE_1, PAGE_2.replace("19%", "16%"))
    stale = invoice(tax={"rate_percent": "16", "amount": "504.19", "evidence": ev(2, "VAT 16% 504,19 EUR")})
    assert reasons(stale, pages=pages) == [("tax_rate_mismatch", "tax")]


def test_a_rate_is_not_an_amount_and_the_currency_is_the_one_beside_a_labelled_amount():
    # "19" of "VAT 19%" is the rate: a tax amount of 19.00 is not printed under the tax's label.
    rate_as_amount = invoice(
        tax={"rate_percent": "19", "amount": "19.00", "evidence": ev(2, "VAT 19% 504,19 EUR")}
    )
    assert ("value_not_labelled", "tax") in reasons(rate_as_amount)
    # A misread total does not make the currency printed beside the real one unlabelled.
    assert reasons(invoice(total="3157.18")) == [("total_mismatch", "total"), ("value_not_printed", "total")]


def test_an_issue_date_after_the_due_date_fails():
    pages = (PAGE_1.replace("24.02.2026", "27.03.2026"), PAGE_2)
    got = reasons(invoice(issue_date="2026-03-27"), pages=pages)
    assert got == [("dates_out_of_order", "due_date")]


def test_an_iban_the_master_data_cannot_confirm_goes_to_review_unless_the_tenant_accepts_it():
    assert reasons(invoice(), NO_IBAN_ON_FILE) == [("iban_unverified", "iban")]
    accepting = TenantPolicy(
        POLICY.allowed_currencies, NO_IBAN_ON_FILE.suppliers, accept_unverified_iban=True
    )
    assert reasons(invoice(), accepting) == []
    assert reasons(invoice(iban=None, iban_evidence=None), NO_IBAN_ON_FILE) == []


# The model's evidence is a hint: a right value passes wherever the model pointed; the policy records where
# the value really is.


def test_a_right_value_passes_without_evidence_or_with_evidence_that_points_elsewhere():
    assert (
        reasons(
            invoice(total_evidence=None, subtotal_evidence=None, tax={**FAITHFUL["tax"], "evidence": None})
        )
        == []
    )
    pointing_elsewhere = invoice(total_evidence=ev(2, "Subtotal 2.653,62 EUR"))
    assert reasons(pointing_elsewhere) == []
    assert located(pointing_elsewhere)["total"]["text"] == "3.157,81"
    assert reasons(invoice(total_evidence=ev(1, "Total due EUR 3.157,81"))) == [], "the wrong page"
    assert reasons(invoice(total_evidence=ev(7, "the total, trust me"))) == [], "a page past the end"


def test_the_hint_chooses_among_places_that_all_print_the_value_under_its_label():
    pages = (PAGE_1, PAGE_2 + "\nTotal due EUR 3.157,81 (repeated for your records)")
    second = invoice(total_evidence=ev(2, "Total due EUR 3.157,81 (repeated for your records)"))
    first, later = located(invoice(), pages)["total"], located(second, pages)["total"]
    assert first["start"] < later["start"]


# Values printed exactly: whole tokens, the page's own characters.


def test_a_value_cut_out_of_a_longer_token_is_not_printed():
    cut_number = invoice(
        invoice_number="DE-2026-0001", invoice_number_evidence=ev(1, "Invoice no. DE-2026-0001")
    )
    assert reasons(cut_number) == [("value_not_printed", "invoice_number")]
    cut_date = invoice(issue_date="2026-02-04", issue_date_evidence=ev(1, "4.02.2026"))
    assert reasons(cut_date) == [("value_not_printed", "issue_date")]
    assert locate(Evidence(page=1, quote="4.02.2026"), PAGES) is None
    assert locate(Evidence(page=1, quote="24.02.2026"), PAGES) is not None


@pytest.mark.parametrize(
    ("name", "changes", "field"),
    [
        ("long s", {"supplier": {"name": "Nordwind Logi\u017ftik GmbH", "evidence": None}}, "supplier"),
        (
            "Kelvin sign",
            {"supplier": {"name": "Nordwind Logistik GmbH".replace("k", "\u212a"), "evidence": None}},
            "supplier",
        ),
        ("fullwidth digits", {"total": "\uff13\uff11\uff15\uff17.\uff18\uff11"}, "total"),
        ("lower case", {"invoice_number": "de-2026-00014"}, "invoice_number"),
    ],
)
def test_a_value_with_look_alike_characters_is_not_what_the_page_prints(name, changes, field):
    report = validate_invoice(invoice(**changes), PAGES, POLICY)
    assert ("value_not_printed", field) in [(r.code, r.field) for r in report.reasons], name
    if name != "lower case":
        detail = next(r.detail for r in report.reasons if r.code == "value_not_printed")
        assert "look like" in detail and "U+" in detail


def test_ocr_spacing_is_not_a_difference():
    spaced = (
        PAGE_1.replace("Nordwind Logistik", "Nordwind   Logistik"),
        PAGE_2.replace("0532 0130", "0532    0130"),
    )
    assert reasons(invoice(), pages=spaced) == []


@pytest.mark.parametrize(
    ("printed_amount", "value"),
    [
        ("1.234,56", "1234.56"),
        ("1,234.56", "1234.56"),
        ("1'234.56", "1234.56"),
        ("1234,56", "1234.56"),
        ("1234.56", "1234.56"),
        ("12.345.678,90", "12345678.90"),
    ],
)
def test_amount_formats_read_as_the_extracted_value(printed_amount, value):
    pages = (PAGE_1, PAGE_2.replace("3.157,81", printed_amount))
    got = reasons(invoice(total=value), pages=pages)
    assert ("value_not_printed", "total") not in got and ("value_not_labelled", "total") not in got


@pytest.mark.parametrize("printed_amount", ["1.150.00", "1,15,0.00"])
def test_an_ambiguous_amount_is_not_read_as_any_value(printed_amount):
    assert all(r not in number_readings(printed_amount) for r in (1150, 115))


@pytest.mark.parametrize(
    ("printed_date", "iso"),
    [
        ("2026-02-24", "2026-02-24"),
        ("24.02.2026", "2026-02-24"),
        ("24-2-2026", "2026-02-24"),
        ("24/02/2026", "2026-02-24"),
        ("24 February 2026", "2026-02-24"),
        ("February 24, 2026", "2026-02-24"),
    ],
)
def test_date_formats_read_as_the_iso_date(printed_date, iso):
    pages = (PAGE_1.replace("24.02.2026", printed_date), PAGE_2)
    assert reasons(invoice(issue_date=iso), pages=pages) == []


def test_an_impossible_date_is_no_date():
    pages = (PAGE_1.replace("24.02.2026", "31.02.2026"), PAGE_2)
    assert reasons(invoice(issue_date="2026-03-03"), pages=pages) == [("value_not_printed", "issue_date")]


# Labels: a value counts only where a label of its own field names it.


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        # The issue date set to the due date, quoting the due date's text.
        (
            {"issue_date": "2026-03-26", "issue_date_evidence": ev(1, "Due: 26 March 2026")},
            {("value_not_labelled", "issue_date")},
        ),
        # Issue and due dates swapped, each quoting the other's real text.
        (
            {
                "issue_date": "2026-03-26",
                "issue_date_evidence": ev(1, "Due: 26 March 2026"),
                "due_date": "2026-02-24",
                "due_date_evidence": ev(1, "Invoice date: 24.02.2026"),
            },
            {
                ("value_not_labelled", "issue_date"),
                ("value_not_labelled", "due_date"),
                ("dates_out_of_order", "due_date"),
            },
        ),
        # The invoice number taken from the order number or from the supplier's tax id.
        (
            {"invoice_number": "PO-7781", "invoice_number_evidence": ev(1, "Order no. PO-7781")},
            {("value_not_labelled", "invoice_number")},
        ),
        (
            {"invoice_number": "DE287561934", "invoice_number_evidence": ev(1, "VAT ID DE287561934")},
            {("value_not_labelled", "invoice_number")},
        ),
        # The total taken from the subtotal's line, and the tax from a line amount.
        (
            {"total": "2653.62", "total_evidence": ev(2, "Subtotal 2.653,62 EUR")},
            {("value_not_labelled", "total"), ("total_mismatch", "total")},
        ),
        (
            {"tax": {"rate_percent": "19", "amount": "184.50", "evidence": None}},
            {("value_not_labelled", "tax"), ("tax_rate_mismatch", "tax"), ("total_mismatch", "total")},
        ),
        # The currency taken from a note about paying in another currency.
        (
            {
                "currency": "USD",
                "currency_evidence": ev(2, "Payable also in USD at the daily exchange rate."),
            },
            {("value_not_labelled", "currency")},
        ),
    ],
    ids=[
        "issue=due",
        "dates swapped",
        "number from order",
        "number from tax id",
        "total from subtotal",
        "tax from a line",
        "currency from note",
    ],
)
def test_a_real_line_under_another_fields_label_is_no_evidence(changes, expected):
    assert set(reasons(invoice(**changes))) == expected


def test_the_customers_direct_debit_line_never_holds_the_suppliers_iban():
    taken = invoice(
        iban=CUSTOMER_IBAN,
        iban_evidence=ev(2, "Direct debit from customer account IBAN GB29 NWBK 6016 1331 9268 19"),
    )
    assert set(reasons(taken, NO_IBAN_ON_FILE)) == {
        ("value_not_labelled", "iban"),
        ("iban_unverified", "iban"),
    }
    accepting = TenantPolicy(
        POLICY.allowed_currencies, NO_IBAN_ON_FILE.suppliers, accept_unverified_iban=True
    )
    assert reasons(taken, accepting) == [("value_not_labelled", "iban")]
    detail = validate_invoice(taken, PAGES, accepting).reasons[0].detail
    assert "under 'IBAN', but on a line about the customer, direct debit" in detail


def test_an_iban_under_a_direct_debit_heading_is_the_customers():
    headed = (PAGE_1, PAGE_2.replace("Direct debit from customer account IBAN", "Direct debit:\nIBAN"))
    assert reasons(invoice(), pages=headed) == []
    assert reasons(invoice(iban=CUSTOMER_IBAN), ACCEPTS_UNVERIFIED, headed) == [
        ("value_not_labelled", "iban")
    ]


def test_the_reason_names_the_label_that_governs_the_wrong_value():
    report = validate_invoice(invoice(issue_date="2026-03-26"), PAGES, POLICY)
    (reason,) = report.reasons
    assert reason.code == "value_not_labelled"
    assert "under 'Due', a label of the due date, not of the issue date" in reason.detail


def test_a_supplier_under_a_customer_label_is_not_the_supplier():
    customer = TenantPolicy(
        POLICY.allowed_currencies,
        (*POLICY.suppliers, KnownSupplier("Harbor Retail Group Ltd", "DE89370400440532013000")),
    )
    got = reasons(
        invoice(
            supplier={
                "name": "Harbor Retail Group Ltd",
                "evidence": ev(1, "Bill to: Harbor Retail Group Ltd"),
            }
        ),
        customer,
    )
    assert got == [("value_not_labelled", "supplier")]


def test_a_value_alone_on_its_line_is_named_by_the_label_above_it():
    columns = """Nordwind Logistik GmbH
Invoice no.        Invoice date      Due date
DE-2026-00014      24.02.2026        26.03.2026
Description  Qty  Unit price  Amount
Pallet transport  2  1.234,56  2.469,12 EUR
Toner cartridge, pack of 10  3  61,50  184,50 EUR
Subtotal 2.653,62 EUR
VAT 19% 504,19 EUR
Total due
EUR 3.157,81
IBAN DE89 3704 0044 0532 0130 00"""
    assert reasons(invoice(), pages=(columns,)) == []
    swapped = invoice(issue_date="2026-03-26", due_date="2026-02-24")
    assert set(reasons(swapped, pages=(columns,))) == {
        ("value_not_labelled", "issue_date"),
        ("value_not_labelled", "due_date"),
        ("dates_out_of_order", "due_date"),
    }


@pytest.mark.parametrize(
    "page",
    [
        """Nordwind Logistik GmbH
USt-IdNr. DE287561934
Rechnungsnummer: DE-2026-00014   Bestellnummer: PO-7781
Rechnungsdatum: 24.02.2026   Fällig am: 26.03.2026
Rechnungsempfänger: Harbor Retail Group Ltd
Beschreibung                   Menge  Einzelpreis   Betrag
Pallet transport                 2      1.234,56     2.469,12 EUR
Toner cartridge, pack of 10      3         61,50       184,50 EUR
Zwischensumme 2.653,62 EUR
MwSt 19% 504,19 EUR
Gesamtbetrag 3.157,81 EUR
IBAN DE89 3704 0044 0532 0130 00
SEPA-Lastschrift vom Konto des Kunden, IBAN GB29 NWBK 6016 1331 9268 19""",
        """Nordwind Logistik GmbH
N° TVA DE287561934
Facture n° DE-2026-00014   N° de commande PO-7781
Date de facture : 24.02.2026   Échéance : 26.03.2026
Facturé à : Harbor Retail Group Ltd
Désignation                    Quantité  Prix unitaire  Montant
Pallet transport                 2      1.234,56     2.469,12 EUR
Toner cartridge, pack of 10      3         61,50       184,50 EUR
Sous-total 2.653,62 EUR
TVA 19% 504,19 EUR
Net à payer 3.157,81 EUR
IBAN DE89 3704 0044 0532 0130 00
Prélèvement SEPA sur le compte du client IBAN GB29 NWBK 6016 1331 9268 19""",
    ],
    ids=["de", "fr"],
)
def test_german_and_french_labels_name_their_fields(page):
    pages = (page,)
    assert reasons(invoice(), pages=pages) == []
    assert reasons(invoice(invoice_number="PO-7781"), pages=pages) == [
        ("value_not_labelled", "invoice_number")
    ]
    assert reasons(invoice(issue_date="2026-03-26"), pages=pages) == [("value_not_labelled", "issue_date")]
    assert ("value_not_labelled", "iban") in reasons(invoice(iban=CUSTOMER_IBAN), NO_IBAN_ON_FILE, pages)


# Line items: each is one printed row, description included.


def test_two_lines_descriptions_swapped_are_not_printed_rows():
    lines = copy.deepcopy(FAITHFUL["line_items"])
    lines[0]["description"], lines[1]["description"] = lines[1]["description"], lines[0]["description"]
    assert set(reasons(invoice(line_items=lines))) == {
        ("line_not_printed", "line_items[0]"),
        ("line_not_printed", "line_items[1]"),
    }


def test_a_description_printed_nowhere_or_cut_short_is_not_a_row():
    assert reasons(with_line(0, description="Pallet transport and storage")) == [
        ("value_not_printed", "line_items[0]")
    ]
    assert reasons(with_line(1, description="Toner cartridge, pack of")) == [
        ("line_not_printed", "line_items[1]")
    ]
    assert reasons(with_line(1, description="cartridge, pack of 10")) == [
        ("line_not_printed", "line_items[1]")
    ]


def test_a_row_wrapped_over_two_lines_is_one_row_read_whole():
    wrapped = (PAGE_1.replace("Toner cartridge, pack of 10     ", "Toner cartridge,\npack of 10"), PAGE_2)
    assert reasons(invoice(), pages=wrapped) == []
    assert reasons(with_line(1, description="pack of 10"), pages=wrapped) == [
        ("line_not_printed", "line_items[1]")
    ]


def test_a_row_prints_its_numbers_in_order_and_is_claimed_once():
    assert reasons(with_line(0, quantity="1234.56", unit_price="2.00")) == [
        ("line_not_printed", "line_items[0]")
    ]
    twice = copy.deepcopy(FAITHFUL["line_items"])
    twice[1] = copy.deepcopy(twice[0])
    got = reasons(
        invoice(line_items=twice, subtotal="4938.24"), pages=(PAGE_1, PAGE_2.replace("2.653,62", "4.938,24"))
    )
    assert ("line_not_printed", "line_items[1]") in got
    repeated = (PAGE_1 + "\nPallet transport                 2      1.234,56     2.469,12 EUR", PAGE_2)
    got = reasons(
        invoice(line_items=twice, subtotal="4938.24"),
        pages=(repeated[0], PAGE_2.replace("2.653,62", "4.938,24")),
    )
    assert ("line_not_printed", "line_items[1]") not in got, "a row printed twice may be extracted twice"


# Every mistake the simulated provider makes, realistic and adversarial, on every sample layout, language and
# extra line: each ends in review with its named reason, and the truthful answer to the same page passes.

ALL_CURRENCIES = TenantPolicy(
    frozenset({s.currency for s in SUPPLIERS} | set(NOTE_CURRENCIES)),
    tuple(KnownSupplier(s.name, s.iban or None) for s in SUPPLIERS),
)
EXPECTED_CODES = {
    Mistake.ARITHMETIC: {"line_amount_mismatch"},
    Mistake.INVENTED_IBAN: {"value_not_printed", "value_not_labelled"},
    Mistake.SWAPPED_QUANTITY_PRICE: {"line_not_printed"},
    Mistake.DROPPED_LINE: {"subtotal_mismatch", "no_line_items"},
    Mistake.WRONG_CURRENCY: {"value_not_printed", "value_not_labelled"},
    Mistake.EVIDENCE_INVENTED: {"value_not_printed"},
    Mistake.ISSUE_DATE_IS_DUE_DATE: {"value_not_labelled"},
    Mistake.DATES_SWAPPED: {"value_not_labelled"},
    Mistake.INVOICE_NUMBER_FROM_ORDER: {"value_not_labelled"},
    Mistake.INVOICE_NUMBER_FROM_TAX_ID: {"value_not_labelled"},
    Mistake.CURRENCY_FROM_NOTE: {"value_not_labelled"},
    Mistake.IBAN_FROM_DIRECT_DEBIT: {"value_not_labelled"},
    Mistake.CUT_INVOICE_NUMBER: {"value_not_printed"},
    Mistake.CUT_DATE: {"value_not_printed"},
    Mistake.LONG_S: {"value_not_printed"},
    Mistake.KELVIN_SIGN: {"value_not_printed"},
    Mistake.FULLWIDTH_TOTAL: {"value_not_printed"},
    Mistake.TAX_RATE_CHANGED: {"tax_rate_mismatch"},
    Mistake.DESCRIPTIONS_SWAPPED: {"line_not_printed"},
    Mistake.DESCRIPTION_INVENTED: {"value_not_printed"},
}


@pytest.mark.parametrize("language", LANGUAGES)
@pytest.mark.parametrize("extras", [(), EXTRAS], ids=["plain", "with extra lines"])
def test_the_truthful_answer_to_every_sample_passes_and_every_value_is_located(language, extras):
    for sample in generate_invoices(40, seed=3, kinds=KINDS, language=language, extras=extras):
        answer = Invoice.model_validate(extract(list(sample.pages)))
        report = validate_invoice(answer, sample.pages, ALL_CURRENCIES)
        expected = {"total_mismatch"} if sample.kind == INCONSISTENT_TOTAL else set()
        assert {r.code for r in report.reasons} == expected, (report.reasons, sample.pages)
        values = {
            "supplier",
            "invoice_number",
            "issue_date",
            "due_date",
            "currency",
            "subtotal",
            "tax",
            "total",
        }
        values |= {f"line_items[{i}]" for i in range(len(sample.lines))} | (
            {"iban"} if sample.iban else set()
        )
        assert values <= set(report.located), sample.kind


def test_every_mistake_but_a_misplaced_quote_is_expected_to_fail():
    assert set(EXPECTED_CODES) == set(Mistake) - {Mistake.EVIDENCE_ELSEWHERE}


@pytest.mark.parametrize("mistake", list(EXPECTED_CODES))
def test_every_mistake_fails_the_policy_on_every_layout_and_language(mistake):
    applied = 0
    for language in LANGUAGES:
        samples = generate_invoices(
            10, seed=len(mistake.value), kinds=CONSISTENT, language=language, extras=EXTRAS
        )
        for sample in samples:
            faithful = Invoice.model_validate(extract(list(sample.pages)))
            assert validate_invoice(faithful, sample.pages, ALL_CURRENCIES).passed, sample.pages
            if not mistake_applies(mistake, sample.pages):
                continue
            applied += 1
            wrong = Invoice.model_validate(extract(list(sample.pages), mistake=mistake))
            report = validate_invoice(wrong, sample.pages, ALL_CURRENCIES)
            assert {r.code for r in report.reasons} & EXPECTED_CODES[mistake], (report.reasons, sample.pages)
    assert applied >= 3, "the samples give the mistake something to work on"


def test_a_right_total_whose_evidence_quotes_another_line_passes_and_is_located_where_printed():
    for number in range(1, 20):
        sample = generate_invoice(random.Random(number), number, "clean")
        answer = Invoice.model_validate(extract(list(sample.pages), mistake=Mistake.EVIDENCE_ELSEWHERE))
        report = validate_invoice(answer, sample.pages, ALL_CURRENCIES)
        assert report.passed
        total = report.located["total"]
        assert total.label is not None and total.label.field == "total"


# The adversaries catch a broken policy: each planted bug lets at least one of them through.

WRAPPED = (PAGE_1.replace("Toner cartridge, pack of 10     ", "Toner cartridge,\npack of 10"), PAGE_2)
ACCEPTS_UNVERIFIED = TenantPolicy(
    POLICY.allowed_currencies, NO_IBAN_ON_FILE.suppliers, accept_unverified_iban=True
)
SWAPPED_DESCRIPTIONS = [
    {**FAITHFUL["line_items"][0], "description": "Toner cartridge, pack of 10"},
    {**FAITHFUL["line_items"][1], "description": "Pallet transport"},
]
# name -> (extraction, tenant policy, pages): one plausible wrong value each, its quote a real line.
ADVERSARIES: dict[str, Callable[[], tuple[Invoice, TenantPolicy, tuple[str, ...]]]] = {
    "issue date = due date": lambda: (invoice(issue_date="2026-03-26"), POLICY, PAGES),
    "invoice number from the order": lambda: (invoice(invoice_number="PO-7781"), POLICY, PAGES),
    "currency from a note": lambda: (invoice(currency="USD"), POLICY, PAGES),
    "customer's iban": lambda: (invoice(iban=CUSTOMER_IBAN), ACCEPTS_UNVERIFIED, PAGES),
    "cut invoice number": lambda: (invoice(invoice_number="DE-2026-0001"), POLICY, PAGES),
    "cut date": lambda: (invoice(issue_date="2026-02-04"), POLICY, PAGES),
    "long s": lambda: (
        invoice(supplier={"name": "Nordwind Logi\u017ftik GmbH", "evidence": None}),
        POLICY,
        PAGES,
    ),
    "fullwidth total": lambda: (invoice(total="\uff13\uff11\uff15\uff17.\uff18\uff11"), POLICY, PAGES),
    "swapped descriptions": lambda: (invoice(line_items=SWAPPED_DESCRIPTIONS), POLICY, PAGES),
    "cut description": lambda: (with_line(1, description="Toner cartridge, pack of"), POLICY, PAGES),
    "tail of a wrapped description": lambda: (with_line(1, description="pack of 10"), POLICY, WRAPPED),
}


def passing_adversaries() -> set[str]:
    passing = set()
    for name, make in ADVERSARIES.items():
        inv, policy, pages = make()
        if validate_invoice(inv, pages, policy).passed:
            passing.add(name)
    return passing


def test_no_adversary_passes_the_policy():
    assert passing_adversaries() == set()
    assert validate_invoice(invoice(), PAGES, POLICY).passed
    assert validate_invoice(invoice(), WRAPPED, POLICY).passed


def _label_blind(self: Any, field: str, glue: Any) -> Callable[[Any], Any]:
    return lambda span: True


def _anywhere(text: str, start: int, end: int) -> bool:
    return start < end


@pytest.mark.parametrize(
    ("bugs", "caught"),
    [
        (
            [(validation._Locator, "labelled", _label_blind)],
            {"issue date = due date", "invoice number from the order"},
        ),
        ([(validation._Locator, "currency_at", lambda self, span: True)], {"currency from a note"}),
        ([(validation._Locator, "iban_at", lambda self, span: True)], {"customer's iban"}),
        ([(printed, "whole_token", _anywhere)], {"cut invoice number"}),
        ([(validation._Locator, "continues", lambda self, above: False)], {"tail of a wrapped description"}),
    ],
    ids=["label-blind", "currency anywhere", "iban anywhere", "tokens cut", "wrapped rows"],
)
def test_each_planted_bug_lets_an_adversary_through(monkeypatch, bugs, caught):
    for target, name, broken in bugs:
        monkeypatch.setattr(target, name, broken)
    assert passing_adversaries() >= caught


def test_folding_look_alikes_would_let_them_through(monkeypatch):
    folded = {"\u017f": "s", "\u212a": "K", **{chr(0xFF10 + d): str(d) for d in range(10)}}
    find_text, amounts = printed.PrintedDocument.find_text, validation._Locator.amounts

    def fold(value: str) -> str:
        return "".join(folded.get(c, c) for c in value)

    monkeypatch.setattr(
        printed.PrintedDocument, "find_text", lambda self, v, **kw: find_text(self, fold(v), **kw)
    )
    monkeypatch.setattr(validation._Locator, "amounts", lambda self, value: amounts(self, fold(value)))
    assert {"long s", "fullwidth total"} <= passing_adversaries()
