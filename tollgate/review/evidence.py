"""Evidence for a reviewer: where each extracted value's evidence is in the OCR text, and the page text around
it, so a person can check the value against the document without opening it.

The spans come from the extraction package's resolver (``resolve_evidence``), the same one the policy judges
by, so a reviewer sees evidence exactly where validation found it, or did not. A stored result is read as
JSON first: one written under an older schema (before evidence named its page) does not parse as today's
invoice, and its quotes are then looked for on each page in turn with the same matching.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from tollgate.jobtypes.base import JobType
from tollgate.jobtypes.invoice_extraction.evidence import (
    CONTEXT_CHARS,
    Span,
    context,
    locate,
    pages_containing,
    resolve_evidence,
)
from tollgate.jobtypes.invoice_extraction.schema import Evidence, Invoice


@dataclass(frozen=True)
class EvidenceClaim:
    """One extracted value and the evidence the model gave for it."""

    field: str
    value: str | None
    quote: str | None
    page: int | None


class EvidenceContext(BaseModel):
    before: str = Field(description=f"Up to {CONTEXT_CHARS} characters printed before the quote on its page.")
    text: str = Field(description="The quote as the page prints it.")
    after: str = Field(description=f"Up to {CONTEXT_CHARS} characters printed after it.")


class EvidenceView(BaseModel):
    field: str = Field(description="The field, as validation reasons name it: total, line_items[0], …")
    value: str | None = Field(description="The extracted value, as text.")
    quote: str | None = Field(description="The evidence the extraction gave; null when it gave none.")
    found: bool = Field(description="Whether the quote is printed on the page it names.")
    page: int | None = Field(
        description="The page (from 1) the evidence names, or where the quote was found."
    )
    start: int | None = Field(description="Where the quote starts in that page's text (characters).")
    end: int | None = Field(description="Where the quote ends in that page's text (characters).")
    context: EvidenceContext | None = Field(description="The page text around the quote; null if not found.")


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def _object(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _evidence(value: Any) -> tuple[str | None, int | None]:
    """A quote and its page, from either way evidence has been written: {page, quote}, or a plain quote."""
    if isinstance(value, Mapping):
        page = value.get("page")
        return _text(value.get("quote")), page if isinstance(page, int) else None
    return _text(value), None


def evidence_claims(result: Mapping[str, Any]) -> Iterator[EvidenceClaim]:
    """Every value that reaches an ERP with the evidence given for it, in the resolver's field order."""
    supplier, tax = _object(result.get("supplier")), _object(result.get("tax"))
    fields: list[tuple[str, Any, Any]] = [
        ("supplier", supplier.get("name"), supplier.get("evidence")),
        ("invoice_number", result.get("invoice_number"), result.get("invoice_number_evidence")),
        ("issue_date", result.get("issue_date"), result.get("issue_date_evidence")),
        ("due_date", result.get("due_date"), result.get("due_date_evidence")),
        ("currency", result.get("currency"), result.get("currency_evidence")),
        ("iban", result.get("iban"), result.get("iban_evidence")),
    ]
    lines = result.get("line_items")
    for index, line in enumerate(lines if isinstance(lines, list) else []):
        item = _object(line)
        value = f"{item.get('quantity')} x {item.get('unit_price')} = {item.get('amount')}"
        fields.append((f"line_items[{index}]", f"{value} ({item.get('description')})", item.get("evidence")))
    fields += [
        ("subtotal", result.get("subtotal"), result.get("subtotal_evidence")),
        ("tax", tax.get("amount"), tax.get("evidence")),
        ("total", result.get("total"), result.get("total_evidence")),
    ]
    for name, value, evidence in fields:
        quote, page = _evidence(evidence)
        if value is None and quote is None:
            continue  # nothing was extracted and nothing claimed: no value reaches an ERP from here
        yield EvidenceClaim(name, _text(value), quote, page)


def locate_evidence(result: Mapping[str, Any], pages: Sequence[str]) -> dict[str, Span | None]:
    """Field -> the span its evidence resolves to; None when it gave none or it is not where it says."""
    try:
        invoice = Invoice.model_validate(result)
    except ValidationError:
        return {claim.field: _locate_older(claim, pages) for claim in evidence_claims(result)}
    resolved = resolve_evidence(invoice, pages)
    return {
        claim.field: resolved[claim.field].span if claim.field in resolved else None
        for claim in evidence_claims(result)
    }


def _locate_older(claim: EvidenceClaim, pages: Sequence[str]) -> Span | None:
    """A result of an older schema: a quote without its page is looked for on the first page that has it."""
    if claim.quote is None:
        return None
    page = claim.page
    if page is None:
        found = pages_containing(claim.quote, pages)
        page = found[0] if found else None
    try:
        return locate(Evidence(page=page, quote=claim.quote), pages) if page is not None else None
    except ValidationError:
        return None


def _value_at(result: Mapping[str, Any], path: str) -> str | None:
    """The value a field path (``key_facts[2]``, ``label``) names in a result; for an object, its first
    text other than the evidence (a fact's wording)."""
    value: Any = result
    for name, index in re.findall(r"(\w+)(?:\[(\d+)\])?", path):
        value = _object(value).get(name)
        if index:
            value = value[int(index)] if isinstance(value, list) and int(index) < len(value) else None
    if isinstance(value, Mapping):
        value = next((v for k, v in value.items() if k != "evidence" and isinstance(v, str)), None)
    return _text(value)


def _claims_of_type(
    kind: JobType, result: Mapping[str, Any], pages: Sequence[str]
) -> tuple[list[EvidenceClaim], dict[str, Span | None]]:
    """A result of a type other than invoices: its evidence by the type's own field paths."""
    try:
        output = kind.output.model_validate(result)
    except ValidationError:
        return [], {}
    claims, spans = [], {}
    for name, evidence in kind.evidence_fields(output):
        claims.append(
            EvidenceClaim(
                name,
                _value_at(result, name),
                evidence.quote if evidence else None,
                evidence.page if evidence else None,
            )
        )
        spans[name] = locate(evidence, pages) if evidence else None
    return claims, spans


def evidence_views(
    result: Mapping[str, Any], pages: Sequence[str], kind: JobType | None = None
) -> list[EvidenceView]:
    if kind is not None and kind.output is not Invoice:
        claims, spans = _claims_of_type(kind, result, pages)
    else:
        claims, spans = list(evidence_claims(result)), locate_evidence(result, pages)
    views = []
    for claim in claims:
        span = spans.get(claim.field)
        views.append(
            EvidenceView(
                field=claim.field,
                value=claim.value,
                quote=claim.quote,
                found=span is not None,
                page=span.page if span else claim.page,
                start=span.start if span else None,
                end=span.end if span else None,
                context=EvidenceContext(**context(span, pages)) if span else None,
            )
        )
    return views
