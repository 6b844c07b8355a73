"""A reviewer's corrections: JSON Merge Patch as RFC 7396 defines it, and a cleared field read as null."""

from __future__ import annotations

import pytest

from tollgate.jobtypes.invoice_extraction.schema import Invoice
from tollgate.review.merge_patch import absent_as_null, merge_patch

# RFC 7396, Appendix A: every example, target and patch to result.
RFC_EXAMPLES = [
    ({"a": "b"}, {"a": "c"}, {"a": "c"}),
    ({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}),
    ({"a": "b"}, {"a": None}, {}),
    ({"a": "b", "b": "c"}, {"a": None}, {"b": "c"}),
    ({"a": ["b"]}, {"a": "c"}, {"a": "c"}),
    ({"a": "c"}, {"a": ["b"]}, {"a": ["b"]}),
    ({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}),
    ({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}),
    (["a", "b"], ["c", "d"], ["c", "d"]),
    ({"a": "b"}, ["c"], ["c"]),
    ({"a": "foo"}, None, None),
    ({"a": "foo"}, "bar", "bar"),
    ({"e": None}, {"a": 1}, {"e": None, "a": 1}),
    ([1, 2], {"a": "b", "c": None}, {"a": "b"}),
    ({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}),
]


@pytest.mark.parametrize(("target", "patch", "expected"), RFC_EXAMPLES)
def test_every_example_of_the_rfc(target, patch, expected):
    assert merge_patch(target, patch) == expected


def test_neither_the_target_nor_the_patch_is_changed():
    target = {"tax": {"amount": "1.00", "rate_percent": "19"}, "line_items": [{"amount": "1.00"}]}
    patch = {"tax": {"amount": "2.00"}, "line_items": [{"amount": "3.00"}]}
    merged = merge_patch(target, patch)
    merged["line_items"][0]["amount"] = "9.99"
    assert target == {"tax": {"amount": "1.00", "rate_percent": "19"}, "line_items": [{"amount": "1.00"}]}
    assert patch == {"tax": {"amount": "2.00"}, "line_items": [{"amount": "3.00"}]}


# As stored, less the evidence of dates, currency and IBAN: absent fields that may be null are read as null.
INVOICE = {
    "supplier": {
        "name": "Nordwind Logistik GmbH",
        "evidence": {"page": 1, "quote": "Nordwind Logistik GmbH"},
    },
    "invoice_number": "DE-2026-00001",
    "invoice_number_evidence": {"page": 1, "quote": "Invoice no. DE-2026-00001"},
    "issue_date": None,
    "due_date": None,
    "currency": "EUR",
    "iban": "DE89370400440532013000",
    "line_items": [
        {
            "description": "Pallet transport",
            "quantity": "2",
            "unit_price": "420.00",
            "amount": "840.00",
            "evidence": {"page": 1, "quote": "Pallet transport  2  420.00  840.00 EUR"},
        }
    ],
    "subtotal": "840.00",
    "subtotal_evidence": {"page": 1, "quote": "Subtotal 840.00 EUR"},
    "tax": {
        "rate_percent": "19.0",
        "amount": "159.60",
        "evidence": {"page": 1, "quote": "VAT 19.0% 159.60 EUR"},
    },
    "total": "999.60",
    "total_evidence": {"page": 1, "quote": "Total due 999.60 EUR"},
}


def test_a_cleared_field_that_may_be_null_is_read_as_null():
    cleared = merge_patch(INVOICE, {"iban": None, "tax": {"evidence": None}})
    assert "iban" not in cleared and "evidence" not in cleared["tax"]

    invoice = Invoice.model_validate(absent_as_null(Invoice, cleared))

    assert invoice.iban is None and invoice.tax.evidence is None
    assert invoice.total == "999.60", "what the patch did not name stays as it was"


def test_a_cleared_field_that_may_not_be_null_stays_absent_for_the_schema_to_refuse():
    line = {k: v for k, v in INVOICE["line_items"][0].items() if k != "amount"}
    filled = absent_as_null(Invoice, {**INVOICE, "line_items": [line]})
    assert "amount" not in filled["line_items"][0]
    with pytest.raises(ValueError, match="amount"):
        Invoice.model_validate(filled)


def test_a_cleared_object_that_may_be_null_is_null_and_its_fields_are_not_invented():
    filled = absent_as_null(Invoice, merge_patch(INVOICE, {"supplier": None}))
    assert filled["supplier"] is None
    assert Invoice.model_validate(filled).supplier is None
