"""Evidence for a reviewer: where each extracted value's evidence is in the OCR text, and the page text around
it, so a person can check the value against the document without opening it.

It reads a stored result as JSON, not as the current schema's model, so a result written under an older
schema version still shows. ``locate_evidence`` is the one place that knows how evidence is written: a
quote (with a 1-based page when the result has one). When the extraction package's own resolver of evidence
spans lands, ``locate_evidence`` becomes a call to it and nothing else here changes.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, Field

# Characters of page text shown on each side of an evidence span.
CONTEXT_CHARS = 160


@dataclass(frozen=True)
class Span:
    """Where a quote is: page (1-based) and character offsets into that page's text."""

    page: int
    start: int
    end: int
    quote: str


@dataclass(frozen=True)
class EvidenceClaim:
    """One extracted value and the evidence the model gave for it."""

    field: str
    value: str | None
    quote: str | None
    page: int | None


class EvidenceView(BaseModel):
    field: str = Field(description="The field, as validation reasons name it: total, line_items[0], …")
    value: str | None = Field(description="The extracted value, as text.")
    quote: str | None = Field(description="The evidence the extraction gave; null when it gave none.")
    found: bool = Field(description="Whether the quote occurs in the document's OCR text.")
    page: int | None = Field(description="The 1-based page the quote was found on.")
    start: int | None = Field(description="Where the quote starts in that page's text (characters).")
    end: int | None = Field(description="Where the quote ends in that page's text (characters).")
    context: str | None = Field(
        description=f"The page text around the quote, {CONTEXT_CHARS} characters each side."
    )
    context_start: int | None = Field(description="Where the context starts in that page's text.")


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def _evidence(value: Any) -> tuple[str | None, int | None]:
    """A quote and its page, from either way evidence is written: a plain quote, or {page, quote}."""
    if isinstance(value, Mapping):
        page = value.get("page")
        return _text(value.get("quote")), page if isinstance(page, int) else None
    return _text(value), None


def _object(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def evidence_claims(result: Mapping[str, Any]) -> Iterator[EvidenceClaim]:
    """Every value that reaches an ERP with the evidence given for it, in the order of the invoice."""
    supplier = _object(result.get("supplier"))
    tax = _object(result.get("tax"))
    fields: list[tuple[str, Any, Any]] = [
        ("supplier", supplier.get("name"), supplier.get("evidence")),
        ("invoice_number", result.get("invoice_number"), result.get("invoice_number_evidence")),
        ("issue_date", result.get("issue_date"), result.get("issue_date_evidence")),
        ("due_date", result.get("due_date"), result.get("due_date_evidence")),
        ("currency", result.get("currency"), result.get("currency_evidence")),
        ("iban", result.get("iban"), result.get("iban_evidence")),
        ("subtotal", result.get("subtotal"), result.get("subtotal_evidence")),
        ("tax", tax.get("amount"), tax.get("evidence")),
        ("total", result.get("total"), result.get("total_evidence")),
    ]
    lines = result.get("line_items")
    for index, line in enumerate(lines if isinstance(lines, list) else []):
        if isinstance(line, Mapping):
            value = f"{line.get('quantity')} x {line.get('unit_price')} = {line.get('amount')}"
            fields.append(
                (f"line_items[{index}]", f"{value} ({line.get('description')})", line.get("evidence"))
            )
    for name, value, evidence in fields:
        quote, page = _evidence(evidence)
        if value is None and quote is None:
            continue  # nothing was extracted and nothing claimed: no value reaches an ERP from here
        yield EvidenceClaim(name, _text(value), quote, page)


def find_quote(quote: str, pages: Sequence[str], page: int | None = None) -> Span | None:
    """Where ``quote`` occurs: exactly, else with any run of whitespace matching any other (OCR breaks
    lines where the model wrote spaces). The given page is searched first, then the others in order."""
    words = quote.split()
    if not words:
        return None
    flexible = re.compile(r"\s+".join(re.escape(word) for word in words))
    order = list(range(len(pages)))
    if page is not None and 1 <= page <= len(pages):
        order.remove(page - 1)
        order.insert(0, page - 1)
    for index in order:
        at = pages[index].find(quote)
        if at >= 0:
            return Span(index + 1, at, at + len(quote), quote)
        match = flexible.search(pages[index])
        if match:
            return Span(index + 1, match.start(), match.end(), match.group(0))
    return None


def locate_evidence(result: Mapping[str, Any], pages: Sequence[str]) -> dict[str, Span | None]:
    """Field -> the span its evidence resolves to, or None when it gave none or it does not resolve."""
    return {
        claim.field: find_quote(claim.quote, pages, claim.page) if claim.quote else None
        for claim in evidence_claims(result)
    }


def evidence_views(result: Mapping[str, Any], pages: Sequence[str]) -> list[EvidenceView]:
    spans = locate_evidence(result, pages)
    views = []
    for claim in evidence_claims(result):
        span = spans.get(claim.field)
        if span is None:
            views.append(
                EvidenceView(
                    field=claim.field,
                    value=claim.value,
                    quote=claim.quote,
                    found=False,
                    page=None,
                    start=None,
                    end=None,
                    context=None,
                    context_start=None,
                )
            )
            continue
        text = pages[span.page - 1]
        begin = max(0, span.start - CONTEXT_CHARS)
        views.append(
            EvidenceView(
                field=claim.field,
                value=claim.value,
                quote=claim.quote,
                found=True,
                page=span.page,
                start=span.start,
                end=span.end,
                context=text[begin : span.end + CONTEXT_CHARS],
                context_start=begin,
            )
        )
    return views
