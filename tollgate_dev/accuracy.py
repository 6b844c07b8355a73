"""Field-level accuracy of extractions against ground truth, the same measure for any model.

Values are compared as a reader would judge them: money, quantities and rates as decimals, text with its
whitespace collapsed, nulls equal to nulls. Evidence spans are not compared to the truth's (two faithful
readers may quote different spans); whether they resolve to their page is counted separately. Line items
are compared by position: a skipped line misaligns the ones after it, as it would in a ledger.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

from tollgate.jobtypes.invoice_extraction.evidence import resolve_evidence
from tollgate.jobtypes.invoice_extraction.schema import Invoice, LineItem

DOCUMENT_FIELDS = (
    "supplier_name",
    "invoice_number",
    "issue_date",
    "due_date",
    "currency",
    "iban",
    "subtotal",
    "tax_rate",
    "tax_amount",
    "total",
    "line_count",
)
LINE_FIELDS = ("line_description", "line_quantity", "line_unit_price", "line_amount")
FIELDS = (*DOCUMENT_FIELDS, *LINE_FIELDS)


def _text(value: str | None) -> str | None:
    return " ".join(value.split()) if value is not None else None


def _number(value: str | None) -> Decimal | str | None:
    if value is None:
        return None
    try:
        return Decimal(value)
    except InvalidOperation:
        return value


_DOCUMENT_VALUES: dict[str, Callable[[Invoice], object]] = {
    "supplier_name": lambda i: _text(i.supplier.name) if i.supplier else None,
    "invoice_number": lambda i: _text(i.invoice_number),
    "issue_date": lambda i: i.issue_date,
    "due_date": lambda i: i.due_date,
    "currency": lambda i: i.currency,
    "iban": lambda i: i.iban.replace(" ", "") if i.iban else None,
    "subtotal": lambda i: _number(i.subtotal),
    "tax_rate": lambda i: _number(i.tax.rate_percent),
    "tax_amount": lambda i: _number(i.tax.amount),
    "total": lambda i: _number(i.total),
    "line_count": lambda i: len(i.line_items),
}
_LINE_VALUES: dict[str, Callable[[LineItem], object]] = {
    "line_description": lambda line: _text(line.description),
    "line_quantity": lambda line: _number(line.quantity),
    "line_unit_price": lambda line: _number(line.unit_price),
    "line_amount": lambda line: _number(line.amount),
}


@dataclass(frozen=True)
class FieldScore:
    matched: int = 0
    total: int = 0

    @property
    def rate(self) -> float | None:
        return self.matched / self.total if self.total else None

    def __add__(self, other: FieldScore) -> FieldScore:
        return FieldScore(self.matched + other.matched, self.total + other.total)


@dataclass(frozen=True)
class Comparison:
    """One document: per field, how many values matched out of how many compared."""

    fields: dict[str, FieldScore]
    mismatches: tuple[str, ...]
    evidence: FieldScore = FieldScore()

    @property
    def exact(self) -> bool:
        return not self.mismatches


def compare_invoice(
    extracted: Invoice | None, truth: Invoice, pages: Iterable[str] | None = None
) -> Comparison:
    """Scores ``extracted`` against ``truth``; ``None`` (no usable answer) misses every field. With
    ``pages``, also counts how many of the extraction's evidence spans occur in the document."""
    scores: dict[str, FieldScore] = {}
    mismatches: list[str] = []
    for name, value in _DOCUMENT_VALUES.items():
        hit = extracted is not None and value(extracted) == value(truth)
        scores[name] = FieldScore(int(hit), 1)
        if not hit:
            mismatches.append(name)
    got = extracted.line_items if extracted is not None else []
    want = truth.line_items
    for name, line_value in _LINE_VALUES.items():
        compared = max(len(got), len(want))
        hits = sum(
            1
            for index in range(min(len(got), len(want)))
            if line_value(got[index]) == line_value(want[index])
        )
        scores[name] = FieldScore(hits, compared)
        if hits < compared:
            mismatches.append(name)
    evidence = FieldScore()
    if pages is not None and extracted is not None:
        # Resolved as the validation policy resolves evidence: on its page, whitespace runs as one space.
        resolved = resolve_evidence(extracted, tuple(pages)).values()
        evidence = FieldScore(sum(1 for r in resolved if r.span is not None), len(resolved))
    return Comparison(scores, tuple(mismatches), evidence)


@dataclass
class AccuracyReport:
    """Comparisons summed over a sample set, overall and per sample kind, with each call's outcome."""

    fields: dict[str, FieldScore] = field(default_factory=lambda: {name: FieldScore() for name in FIELDS})
    evidence: FieldScore = FieldScore()
    documents: int = 0
    exact_documents: int = 0
    by_kind: dict[str, FieldScore] = field(default_factory=dict)
    outcomes: Counter[str] = field(default_factory=Counter)

    def add(self, comparison: Comparison, kind: str = "all", outcome: str = "ok") -> None:
        for name, score in comparison.fields.items():
            self.fields[name] = self.fields.get(name, FieldScore()) + score
        self.evidence += comparison.evidence
        self.documents += 1
        self.exact_documents += int(comparison.exact)
        self.by_kind[kind] = self.by_kind.get(kind, FieldScore()) + FieldScore(int(comparison.exact), 1)
        self.outcomes[outcome] += 1

    @property
    def field_accuracy(self) -> float | None:
        """Matched values over compared values, all fields together (each line field counted per line)."""
        return sum(self.fields.values(), FieldScore()).rate

    def as_dict(self) -> dict[str, Any]:
        def score(s: FieldScore) -> dict[str, Any]:
            return {"matched": s.matched, "total": s.total, "rate": s.rate}

        return {
            "documents": self.documents,
            "exact_documents": self.exact_documents,
            "document_accuracy": self.exact_documents / self.documents if self.documents else None,
            "field_accuracy": self.field_accuracy,
            "fields": {name: score(s) for name, s in self.fields.items()},
            "evidence_resolves": score(self.evidence),
            "exact_documents_by_kind": {kind: score(s) for kind, s in sorted(self.by_kind.items())},
            "outcomes": dict(sorted(self.outcomes.items())),
        }
