"""Where each invoice field's evidence is: the field paths the policy and reviewers name, resolved with the
shared resolver (``tollgate.jobtypes.evidence``)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from tollgate.jobtypes.evidence import (
    CONTEXT_CHARS,
    ResolvedEvidence,
    Span,
    context,
    locate,
    pages_containing,
    resolve_fields,
)
from tollgate.jobtypes.invoice_extraction.schema import Evidence, Invoice

__all__ = [
    "CONTEXT_CHARS",
    "ResolvedEvidence",
    "Span",
    "context",
    "evidence_fields",
    "locate",
    "pages_containing",
    "resolve_evidence",
]


def evidence_fields(invoice: Invoice) -> Iterator[tuple[str, Evidence | None]]:
    """Every piece of evidence an invoice carries, by the field path it stands for."""
    yield "supplier", invoice.supplier.evidence if invoice.supplier else None
    yield "invoice_number", invoice.invoice_number_evidence
    yield "issue_date", invoice.issue_date_evidence
    yield "due_date", invoice.due_date_evidence
    yield "currency", invoice.currency_evidence
    yield "iban", invoice.iban_evidence
    for index, line in enumerate(invoice.line_items):
        yield f"line_items[{index}]", line.evidence
    yield "subtotal", invoice.subtotal_evidence
    yield "tax", invoice.tax.evidence
    yield "total", invoice.total_evidence


def resolve_evidence(invoice: Invoice, pages: Sequence[str]) -> dict[str, ResolvedEvidence]:
    """Each field's evidence with its span in the document; fields without evidence are absent."""
    return resolve_fields(evidence_fields(invoice), pages)
