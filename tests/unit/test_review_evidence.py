"""Evidence for a reviewer: each value's quote located by the policy's own resolver, with the page text
around it; results of the older schema (plain quotes, no page) still show."""

from __future__ import annotations

from tollgate.jobtypes.invoice_extraction.evidence import CONTEXT_CHARS, Span
from tollgate.review.evidence import evidence_claims, evidence_views, locate_evidence

PAGES = (
    "Nordwind Logistik GmbH\nInvoice no. DE-2026-00001\nPallet transport  2  420.00  840.00 EUR",
    "Subtotal 840.00 EUR\nVAT 19.0% 159.60 EUR\nTotal due\n999.60 EUR\nIBAN DE89370400440532013000",
)


def on(page: int, quote: str) -> dict[str, object]:
    return {"page": page, "quote": quote}


RESULT = {
    "supplier": {"name": "Nordwind Logistik GmbH", "evidence": on(1, "Nordwind Logistik GmbH")},
    "invoice_number": "DE-2026-00001",
    "invoice_number_evidence": on(1, "Invoice no. DE-2026-00001"),
    "issue_date": None,
    "issue_date_evidence": None,
    "due_date": None,
    "due_date_evidence": None,
    "currency": "EUR",
    "currency_evidence": on(2, "Total due 999.60 EUR"),
    "iban": "DE89370400440532013000",
    "iban_evidence": None,
    "line_items": [
        {
            "description": "Pallet transport",
            "quantity": "2",
            "unit_price": "420.00",
            "amount": "840.00",
            "evidence": on(1, "Pallet transport 2 420.00 840.00 EUR"),
        }
    ],
    "subtotal": "840.00",
    "subtotal_evidence": on(1, "Subtotal 840.00 EUR"),
    "tax": {"rate_percent": "19.0", "amount": "159.60", "evidence": on(2, "VAT 19.0% 159.60 EUR")},
    "total": "999.60",
    "total_evidence": on(2, "Total due 999.60 EUR"),
}


def test_every_value_that_reaches_an_erp_is_listed_in_the_resolvers_order():
    claims = {c.field: c for c in evidence_claims(RESULT)}

    assert list(claims) == [
        "supplier",
        "invoice_number",
        "currency",
        "iban",
        "line_items[0]",
        "subtotal",
        "tax",
        "total",
    ], "issue_date and due_date have neither a value nor evidence"
    assert claims["iban"].quote is None, "a value without evidence is listed, and says so"
    assert (claims["currency"].quote, claims["currency"].page) == ("Total due 999.60 EUR", 2)
    assert claims["line_items[0]"].value == "2 x 420.00 = 840.00 (Pallet transport)"


def test_spans_are_the_policys_whitespace_runs_match_and_a_quote_off_its_page_is_not_found():
    spans = locate_evidence(RESULT, PAGES)

    total = spans["total"]
    assert total is not None and total.page == 2
    assert PAGES[1][total.start : total.end] == "Total due\n999.60 EUR", "OCR broke the line; still found"
    assert spans["line_items[0]"] is not None, "double spaces on the page, single in the quote"
    assert spans["subtotal"] is None, "printed on page 2, but the evidence says page 1"
    assert spans["iban"] is None


def test_each_view_carries_the_page_text_around_the_span_or_says_it_was_not_found():
    long_page = "x" * 500 + " Total due 999.60 EUR " + "y" * 500
    result = {**RESULT, "total_evidence": on(1, "Total due 999.60 EUR")}
    views = {v.field: v for v in evidence_views(result, (long_page,))}

    total = views["total"]
    assert total.found and total.page == 1
    assert long_page[total.start : total.end] == "Total due 999.60 EUR"
    assert total.context is not None
    assert total.context.text == "Total due 999.60 EUR"
    assert total.context.before == long_page[total.start - CONTEXT_CHARS : total.start]
    assert total.context.after == long_page[total.end : total.end + CONTEXT_CHARS]
    assert not views["tax"].found and views["tax"].context is None and views["tax"].page == 2
    assert views["iban"].quote is None and not views["iban"].found


def test_a_result_of_the_older_schema_shows_its_plain_quotes_where_they_are_printed():
    older = {
        "supplier": {"name": "Nordwind Logistik GmbH", "evidence": "Nordwind Logistik GmbH"},
        "invoice_number": "DE-2026-00001",
        "invoice_number_evidence": "Invoice no. DE-2026-00001",
        "total": "999.60",
        "total_evidence": "Total due 999.60 EUR",
        "subtotal": "840.00",
        "subtotal_evidence": "Subtotal 850.00 EUR",
        "tax": {"amount": "159.60", "evidence": "VAT 19.0% 159.60 EUR"},
        "line_items": [],
    }

    spans = locate_evidence(older, PAGES)

    assert spans["total"] == Span(2, 41, 61)
    assert spans["supplier"] == Span(1, 0, 22)
    assert spans["subtotal"] is None, "a quote printed nowhere"
