"""Evidence for a reviewer: each value's quote located in the OCR text, with the page text around it, for
evidence written as a plain quote or as {page, quote}."""

from __future__ import annotations

from tollgate.review.evidence import CONTEXT_CHARS, Span, evidence_claims, evidence_views, find_quote

PAGES = (
    "Nordwind Logistik GmbH\nInvoice no. DE-2026-00001\nPallet transport  2  420.00  840.00 EUR",
    "Subtotal 840.00 EUR\nVAT 19.0% 159.60 EUR\nTotal due\n999.60 EUR\nIBAN DE89370400440532013000",
)


def test_an_exact_quote_is_found_on_its_page_with_offsets_into_that_page():
    span = find_quote("Subtotal 840.00 EUR", PAGES)
    assert span == Span(page=2, start=0, end=19, quote="Subtotal 840.00 EUR")
    assert PAGES[span.page - 1][span.start : span.end] == "Subtotal 840.00 EUR"


def test_a_quote_whose_spaces_the_ocr_broke_into_lines_is_found_as_printed():
    span = find_quote("Total due 999.60 EUR", PAGES)
    assert span is not None and span.page == 2
    assert PAGES[1][span.start : span.end] == "Total due\n999.60 EUR"


def test_a_quote_that_is_not_in_the_document_is_not_found():
    assert find_quote("Total due 1,000.00 EUR", PAGES) is None
    assert find_quote("   ", PAGES) is None


def test_the_page_the_evidence_names_is_searched_first():
    pages = ("Total 10.00", "Total 10.00")
    assert find_quote("Total 10.00", pages, page=2) == Span(2, 0, 11, "Total 10.00")
    assert find_quote("Total 10.00", pages, page=7) == Span(1, 0, 11, "Total 10.00"), "a page out of range"


def test_every_value_that_reaches_an_erp_is_listed_with_its_evidence_in_both_formats():
    result = {
        "supplier": {"name": "Nordwind Logistik GmbH", "evidence": "Nordwind Logistik GmbH"},
        "invoice_number": "DE-2026-00001",
        "invoice_number_evidence": "Invoice no. DE-2026-00001",
        "issue_date": None,
        "currency": "EUR",
        "currency_evidence": {"page": 1, "quote": "840.00 EUR"},
        "iban": "DE89370400440532013000",
        "line_items": [
            {
                "description": "Pallet transport",
                "quantity": "2",
                "unit_price": "420.00",
                "amount": "840.00",
                "evidence": {"page": 1, "quote": "Pallet transport  2"},
            }
        ],
        "subtotal": "840.00",
        "subtotal_evidence": None,
        "tax": {"amount": "159.60", "evidence": "VAT 19.0% 159.60 EUR"},
        "total": "999.60",
        "total_evidence": "Total due 999.60 EUR",
    }
    claims = {c.field: c for c in evidence_claims(result)}

    assert list(claims) == [
        "supplier",
        "invoice_number",
        "currency",
        "iban",
        "subtotal",
        "tax",
        "total",
        "line_items[0]",
    ], "issue_date has neither a value nor evidence"
    assert (claims["iban"].quote, claims["subtotal"].quote) == (None, None), "values without evidence"
    assert (claims["currency"].quote, claims["currency"].page) == ("840.00 EUR", 1)
    assert claims["line_items[0]"].value == "2 x 420.00 = 840.00 (Pallet transport)"


def test_each_view_carries_the_page_text_around_the_span_or_says_it_was_not_found():
    long_page = "x" * 500 + " Total due 999.60 EUR " + "y" * 500
    views = {
        v.field: v
        for v in evidence_views(
            {
                "total": "999.60",
                "total_evidence": "Total due 999.60 EUR",
                "subtotal": "840.00",
                "subtotal_evidence": "Subtotal 850.00 EUR",
                "iban": "DE89370400440532013000",
            },
            (long_page,),
        )
    }

    total = views["total"]
    assert total.found and total.page == 1
    assert long_page[total.start : total.end] == "Total due 999.60 EUR"
    assert total.context_start == total.start - CONTEXT_CHARS
    assert total.context == long_page[total.context_start : total.end + CONTEXT_CHARS]
    assert not views["subtotal"].found and views["subtotal"].context is None
    assert views["iban"].quote is None and not views["iban"].found
