"""Evidence for a reviewer: where each extracted value is printed in the OCR text, the label that names it
there, and the page text around it, so a person can check the value against the document without opening it.

A result judged by a locating policy (validation.v3, summary.v2, classification.v2) records where the policy
found each value and under which label; the view shows exactly that. A value the policy could not find, and
every value of a result judged by an earlier policy, shows the model's quote where it is printed (the quote
resolver, ``resolve_evidence``). A stored result is read as JSON first: one written under an older schema
(before evidence named its page) does not parse as today's invoice, and its quotes are then looked for on
each page in turn with the same matching.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from tollgate.accept.models import LocatedLabel
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
    located: bool = Field(
        description="Whether the span is where the policy found the value itself (and, for a field with "
        "a label, under its label); false: the span is where the model's quote is printed, if anywhere."
    )
    found: bool = Field(description="Whether a span was found: the located value, or the quote on its page.")
    page: int | None = Field(
        description="The page (from 1) of the span, or the page the evidence names when none was found."
    )
    start: int | None = Field(description="Where the span starts in that page's text (characters).")
    end: int | None = Field(description="Where the span ends in that page's text (characters).")
    label: LocatedLabel | None = Field(
        description="The label that names the value where the policy found it; null when it needs none (a "
        "letterhead) or the value was not located."
    )
    context: EvidenceContext | None = Field(description="The page text around the span; null if not found.")


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
    result: Mapping[str, Any],
    pages: Sequence[str],
    kind: JobType | None = None,
    located: Sequence[Mapping[str, Any]] | None = None,
) -> list[EvidenceView]:
    """Each value with its span: where the policy located it (``located``, as the result recorded it), else
    where the model's quote is printed."""
    if kind is not None and kind.output is not Invoice:
        claims, spans = _claims_of_type(kind, result, pages)
    else:
        claims, spans = list(evidence_claims(result)), locate_evidence(result, pages)
    by_field = {str(entry["field"]): entry for entry in located or () if _fits(entry, pages)}
    views = []
    for claim in claims:
        entry = by_field.pop(claim.field, None)
        if entry is not None:
            views.append(_located_view(claim, entry, pages))
            continue
        span = spans.get(claim.field)
        views.append(
            EvidenceView(
                field=claim.field,
                value=claim.value,
                quote=claim.quote,
                located=False,
                found=span is not None,
                page=span.page if span else claim.page,
                start=span.start if span else None,
                end=span.end if span else None,
                label=None,
                context=EvidenceContext(**context(span, pages)) if span else None,
            )
        )
    # Values located apart from a claim of their own (an invoice's tax rate).
    for name, entry in by_field.items():
        views.append(_located_view(EvidenceClaim(name, _value_at(result, name), None, None), entry, pages))
    return views


def _fits(entry: Mapping[str, Any], pages: Sequence[str]) -> bool:
    """A recorded span that still lies within its page (the document of a job never changes)."""
    page, start, end = entry.get("page"), entry.get("start"), entry.get("end")
    return (
        isinstance(page, int)
        and isinstance(start, int)
        and isinstance(end, int)
        and 1 <= page <= len(pages)
        and 0 <= start <= end <= len(pages[page - 1])
    )


def _located_view(claim: EvidenceClaim, entry: Mapping[str, Any], pages: Sequence[str]) -> EvidenceView:
    span = Span(entry["page"], entry["start"], entry["end"])
    label = entry.get("label")
    return EvidenceView(
        field=claim.field,
        value=claim.value,
        quote=claim.quote,
        located=True,
        found=True,
        page=span.page,
        start=span.start,
        end=span.end,
        label=LocatedLabel.model_validate(label) if isinstance(label, Mapping) else None,
        context=EvidenceContext(**context(span, pages)),
    )
