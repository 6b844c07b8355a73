"""Validation policy v1: each rule has a failing and a passing case."""

from __future__ import annotations

import pytest

from tollgate.execution.extraction.schema import Invoice
from tollgate.execution.extraction.validation import (
    KnownSupplier,
    TenantPolicy,
    iban_is_valid,
    normalize_name,
    validate_invoice,
)

PAGE = """Nordwind Logistik GmbH
Invoice no. DE-2026-00001
Pallet transport  2  420.00  840.00 EUR
Toner cartridge  3  61.50  184.50 EUR
Subtotal 1024.50 EUR
VAT 19.0% 194.66 EUR
Total due 1219.16 EUR
IBAN DE89370400440532013000"""

POLICY = TenantPolicy(
    allowed_currencies=frozenset({"EUR", "USD"}),
    suppliers=(KnownSupplier("Nordwind Logistik GmbH", "DE89370400440532013000"),),
)


def invoice(**changes) -> Invoice:
    data = {
        "supplier": {"name": "Nordwind Logistik GmbH", "evidence": "Nordwind Logistik GmbH"},
        "invoice_number": "DE-2026-00001",
        "invoice_number_evidence": "Invoice no. DE-2026-00001",
        "issue_date": "2026-03-01",
        "due_date": "2026-03-31",
        "currency": "EUR",
        "iban": "DE89370400440532013000",
        "line_items": [
            {
                "description": "Pallet transport",
                "quantity": "2",
                "unit_price": "420.00",
                "amount": "840.00",
                "evidence": "Pallet transport  2  420.00  840.00 EUR",
            },
            {
                "description": "Toner cartridge",
                "quantity": "3",
                "unit_price": "61.50",
                "amount": "184.50",
                "evidence": "Toner cartridge  3  61.50  184.50 EUR",
            },
        ],
        "subtotal": "1024.50",
        "subtotal_evidence": "Subtotal 1024.50 EUR",
        "tax": {"rate_percent": "19.0", "amount": "194.66", "evidence": "VAT 19.0% 194.66 EUR"},
        "total": "1219.16",
        "total_evidence": "Total due 1219.16 EUR",
    }
    data.update(changes)
    return Invoice.model_validate(data)


def codes(inv: Invoice, policy: TenantPolicy = POLICY) -> list[str]:
    return [r.code for r in validate_invoice(inv, [PAGE], policy).reasons]


def test_a_consistent_invoice_passes():
    report = validate_invoice(invoice(), [PAGE], POLICY)
    assert report.passed
    assert report.policy_version == "validation.v1"


def test_a_line_amount_that_is_not_quantity_times_price_fails():
    lines = invoice().model_dump()["line_items"]
    lines[1]["amount"] = "184.51"
    assert "line_amount_mismatch" in codes(invoice(line_items=lines))


def test_lines_that_do_not_add_up_to_the_subtotal_fail():
    assert codes(invoice(subtotal="1024.40")) == ["subtotal_mismatch", "total_mismatch"]


def test_subtotal_plus_tax_must_equal_the_total_to_the_cent():
    assert codes(invoice(total="1219.17")) == ["total_mismatch"]


@pytest.mark.parametrize("field", ["subtotal", "total"])
def test_a_missing_money_field_is_flagged_never_ignored(field):
    assert "missing_money_field" in codes(invoice(**{field: None}))


def test_a_missing_tax_amount_is_flagged():
    assert "missing_money_field" in codes(
        invoice(tax={"rate_percent": None, "amount": None, "evidence": None})
    )


def test_a_currency_outside_the_tenants_list_fails_and_one_inside_passes():
    assert codes(invoice(currency="CHF")) == ["currency_not_allowed"]
    assert codes(invoice(currency="USD")) == []
    assert codes(invoice(currency=None)) == ["missing_currency"]


def test_an_iban_with_bad_check_digits_fails():
    assert iban_is_valid("DE89370400440532013000")
    assert iban_is_valid("GB29NWBK60161331926819")
    assert not iban_is_valid("DE89370400440532013001")
    unknown_iban_policy = TenantPolicy(POLICY.allowed_currencies, (KnownSupplier("Nordwind Logistik GmbH"),))
    assert codes(invoice(iban="DE89370400440532013001"), unknown_iban_policy) == ["iban_checksum_invalid"]


def test_the_supplier_must_be_in_the_tenants_master_data():
    assert codes(
        invoice(supplier={"name": "Nordwind Logistics Ltd", "evidence": "Nordwind Logistik GmbH"})
    ) == ["supplier_unknown"]
    assert normalize_name("NORDWIND  Logistik-GmbH") == normalize_name("Nordwind Logistik GmbH")


def test_an_iban_other_than_the_one_on_file_fails():
    assert codes(invoice(iban="GB29NWBK60161331926819")) == ["supplier_iban_mismatch"]


def test_evidence_that_does_not_occur_in_the_document_fails():
    assert codes(invoice(total_evidence="Total due 9999.99 EUR")) == ["evidence_not_found"]
    assert codes(invoice(total_evidence="Total   due 1219.16\nEUR")) == [], (
        "whitespace differences are OCR noise"
    )


def test_no_line_items_fails():
    assert "no_line_items" in codes(invoice(line_items=[], subtotal="0.00", total="194.66"))
