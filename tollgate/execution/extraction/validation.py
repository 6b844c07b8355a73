"""Validation policy v1: the rules an extraction must pass before it counts as done.

Any failure sends the job to REVIEW_REQUIRED with machine-readable reasons; nothing is corrected or nulled
silently. Money is compared as Decimal to the cent. The policy is versioned: results are stored with the
version that judged them.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal

from tollgate.execution.extraction.schema import Invoice

POLICY_VERSION = "validation.v1"
CENT = Decimal("0.01")


@dataclass(frozen=True)
class KnownSupplier:
    name: str
    iban: str | None = None


@dataclass(frozen=True)
class TenantPolicy:
    allowed_currencies: frozenset[str]
    suppliers: tuple[KnownSupplier, ...]


@dataclass(frozen=True)
class Reason:
    code: str
    field: str
    detail: str

    def as_dict(self) -> dict[str, str]:
        return {"code": self.code, "field": self.field, "detail": self.detail}


@dataclass
class ValidationReport:
    policy_version: str = POLICY_VERSION
    reasons: list[Reason] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.reasons

    def fail(self, code: str, field_name: str, detail: str) -> None:
        self.reasons.append(Reason(code, field_name, detail))


def _normalize_space(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def normalize_name(name: str) -> str:
    """Supplier names compare without case, accents, punctuation or legal-form spacing differences."""
    decomposed = unicodedata.normalize("NFKD", name)
    stripped = "".join(c for c in decomposed if not unicodedata.combining(c))
    return re.sub(r"[^a-z0-9]+", " ", stripped.lower()).strip()


def iban_is_valid(iban: str) -> bool:
    """ISO 13616 check digits: move the first four characters to the end, letters to numbers, mod 97 = 1."""
    compact = iban.replace(" ", "").upper()
    if not re.fullmatch(r"[A-Z]{2}\d{2}[A-Z0-9]{11,30}", compact):
        return False
    rearranged = compact[4:] + compact[:4]
    digits = "".join(str(int(c, 36)) for c in rearranged)
    return int(digits) % 97 == 1


def _money(value: str | None) -> Decimal | None:
    return Decimal(value) if value is not None else None


def _evidence(invoice: Invoice) -> Iterable[tuple[str, str | None]]:
    yield "supplier", invoice.supplier.evidence if invoice.supplier else None
    yield "invoice_number", invoice.invoice_number_evidence
    yield "subtotal", invoice.subtotal_evidence
    yield "tax", invoice.tax.evidence
    yield "total", invoice.total_evidence
    for index, line in enumerate(invoice.line_items):
        yield f"line_items[{index}]", line.evidence


def validate_invoice(invoice: Invoice, pages: Iterable[str], policy: TenantPolicy) -> ValidationReport:
    report = ValidationReport()
    _check_presence(invoice, policy, report)
    _check_arithmetic(invoice, report)
    _check_identity(invoice, policy, report)
    _check_evidence(invoice, _normalize_space("\n".join(pages)), report)
    return report


def _check_presence(invoice: Invoice, policy: TenantPolicy, report: ValidationReport) -> None:
    money = (("subtotal", invoice.subtotal), ("total", invoice.total), ("tax.amount", invoice.tax.amount))
    for name, value in money:
        if value is None:
            report.fail("missing_money_field", name, f"{name} was not extracted; a person must read it")
    if invoice.currency is None:
        report.fail("missing_currency", "currency", "no currency was extracted")
    elif invoice.currency not in policy.allowed_currencies:
        allowed = ", ".join(sorted(policy.allowed_currencies))
        report.fail("currency_not_allowed", "currency", f"{invoice.currency} is not one of {allowed}")
    if not invoice.line_items:
        report.fail("no_line_items", "line_items", "no line items were extracted")


def _check_arithmetic(invoice: Invoice, report: ValidationReport) -> None:
    line_sum = Decimal("0.00")
    for index, line in enumerate(invoice.line_items):
        expected = (Decimal(line.quantity) * Decimal(line.unit_price)).quantize(CENT, rounding=ROUND_HALF_UP)
        amount = Decimal(line.amount)
        line_sum += amount
        if expected != amount:
            report.fail(
                "line_amount_mismatch",
                f"line_items[{index}].amount",
                f"{line.quantity} x {line.unit_price} = {expected}, but the line says {amount}",
            )
    subtotal, tax, total = _money(invoice.subtotal), _money(invoice.tax.amount), _money(invoice.total)
    if subtotal is not None and invoice.line_items and line_sum != subtotal:
        report.fail(
            "subtotal_mismatch", "subtotal", f"lines add up to {line_sum}, the subtotal says {subtotal}"
        )
    if subtotal is not None and tax is not None and total is not None and subtotal + tax != total:
        report.fail(
            "total_mismatch", "total", f"{subtotal} + {tax} = {subtotal + tax}, the total says {total}"
        )


def _check_identity(invoice: Invoice, policy: TenantPolicy, report: ValidationReport) -> None:
    if invoice.iban is not None and not iban_is_valid(invoice.iban):
        report.fail("iban_checksum_invalid", "iban", "the IBAN's check digits do not verify")
    if invoice.supplier is None:
        report.fail("missing_supplier", "supplier", "no supplier was extracted")
        return
    supplier = normalize_name(invoice.supplier.name)
    known = [s for s in policy.suppliers if normalize_name(s.name) == supplier]
    if not known:
        report.fail(
            "supplier_unknown", "supplier", f"{invoice.supplier.name!r} is not in the tenant's suppliers"
        )
    elif invoice.iban is not None and known[0].iban and known[0].iban.replace(" ", "") != invoice.iban:
        report.fail(
            "supplier_iban_mismatch", "iban", "the IBAN differs from the one on file for this supplier"
        )


def _check_evidence(invoice: Invoice, text: str, report: ValidationReport) -> None:
    for name, span in _evidence(invoice):
        if span is not None and _normalize_space(span) not in text:
            report.fail("evidence_not_found", name, "the evidence text does not occur in the document")
