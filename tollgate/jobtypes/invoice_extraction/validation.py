"""Validation policy v2: the rules an extraction must pass before it counts as done.

Any failure sends the job to REVIEW_REQUIRED with machine-readable reasons; nothing is corrected or nulled
silently. Money is compared as Decimal to the cent. Every value that reaches an ERP must carry evidence
that resolves to its page of the OCR text and says that value once normalized (amount formats, IBAN
spacing, date formats): a value without evidence, or whose evidence says something else, fails. The
policy is versioned: results are stored with the version that judged them (v1 did not check evidence).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from functools import partial

from tollgate.jobtypes.base import KnownSupplier, Reason, TenantPolicy, ValidationReport
from tollgate.jobtypes.invoice_extraction.evidence import locate, pages_containing
from tollgate.jobtypes.invoice_extraction.normalize import (
    compact_iban,
    currencies_in,
    dates_in,
    normalize_name,
    normalize_space,
    numbers_in,
)
from tollgate.jobtypes.invoice_extraction.schema import Evidence, Invoice, LineItem

__all__ = [
    "POLICY_VERSION",
    "KnownSupplier",
    "Reason",
    "TenantPolicy",
    "ValidationReport",
    "iban_is_valid",
    "normalize_name",
    "validate_invoice",
]

POLICY_VERSION = "validation.v2"
CENT = Decimal("0.01")


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


def validate_invoice(invoice: Invoice, pages: Sequence[str], policy: TenantPolicy) -> ValidationReport:
    report = ValidationReport(POLICY_VERSION)
    _check_presence(invoice, policy, report)
    _check_arithmetic(invoice, report)
    _check_identity(invoice, policy, report)
    _check_evidence(invoice, tuple(pages), report)
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
    for name, value in (("invoice_number", invoice.invoice_number), ("issue_date", invoice.issue_date)):
        if value is None:
            report.fail("missing_field", name, f"no {name.replace('_', ' ')} was extracted")


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


# What each kind of value must look like in its quote, once normalized.


def _says_name(name: str, quote: str) -> bool:
    wanted = normalize_name(name)
    return bool(wanted) and f" {wanted} " in f" {normalize_name(quote)} "


def _says_token(value: str, quote: str) -> bool:
    pattern = rf"(?<![A-Za-z0-9]){re.escape(normalize_space(value))}(?![A-Za-z0-9])"
    return re.search(pattern, normalize_space(quote), re.IGNORECASE) is not None


def _says_date(value: str, quote: str) -> bool:
    return value in dates_in(quote)


def _says_currency(value: str, quote: str) -> bool:
    return value in currencies_in(quote)


def _says_iban(value: str, quote: str) -> bool:
    return compact_iban(value) in compact_iban(quote)


def _says_number(value: str, quote: str) -> bool:
    return any(Decimal(value) in readings for readings in numbers_in(quote))


def _says_in_order(values: Sequence[str], quote: str) -> bool:
    """The quote prints these numbers in this order (others may sit between them: a description's "10")."""
    wanted = [Decimal(v) for v in values]
    found = 0
    for readings in numbers_in(quote):
        if found < len(wanted) and wanted[found] in readings:
            found += 1
    return found == len(wanted)


def _line_says(line: LineItem, quote: str) -> bool:
    return _says_in_order((line.quantity, line.unit_price, line.amount), quote)


def _tax_says(invoice: Invoice, quote: str) -> bool:
    tax = invoice.tax
    return all(_says_number(v, quote) for v in (tax.amount, tax.rate_percent) if v is not None)


@dataclass(frozen=True)
class _Claim:
    """A value that reaches an ERP, the evidence given for it, and how its quote must say it."""

    field: str
    shown: str  # the value as a reviewer reads it in a reason
    evidence: Evidence | None
    says: Callable[[str], bool]


def _claims(invoice: Invoice) -> list[_Claim]:
    claims: list[_Claim] = []
    if invoice.supplier is not None:
        name = invoice.supplier.name
        claims.append(_Claim("supplier", name, invoice.supplier.evidence, partial(_says_name, name)))
    singles: tuple[tuple[str, str | None, Evidence | None, Callable[[str, str], bool]], ...] = (
        ("invoice_number", invoice.invoice_number, invoice.invoice_number_evidence, _says_token),
        ("issue_date", invoice.issue_date, invoice.issue_date_evidence, _says_date),
        ("due_date", invoice.due_date, invoice.due_date_evidence, _says_date),
        ("currency", invoice.currency, invoice.currency_evidence, _says_currency),
        ("iban", invoice.iban, invoice.iban_evidence, _says_iban),
    )
    for name, value, evidence, says in singles:
        if value is not None:
            claims.append(_Claim(name, value, evidence, partial(says, value)))
    for index, line in enumerate(invoice.line_items):
        shown = f"{line.quantity} x {line.unit_price} = {line.amount}"
        claims.append(_Claim(f"line_items[{index}]", shown, line.evidence, partial(_line_says, line)))
    for name, value, evidence in (
        ("subtotal", invoice.subtotal, invoice.subtotal_evidence),
        ("total", invoice.total, invoice.total_evidence),
    ):
        if value is not None:
            claims.append(_Claim(name, value, evidence, partial(_says_number, value)))
    tax = invoice.tax
    if tax.amount is not None or tax.rate_percent is not None:
        shown = f"{tax.rate_percent}% {tax.amount}"
        claims.append(_Claim("tax", shown, tax.evidence, partial(_tax_says, invoice)))
    return claims


def _check_evidence(invoice: Invoice, pages: tuple[str, ...], report: ValidationReport) -> None:
    for claim in _claims(invoice):
        evidence = claim.evidence
        if evidence is None:
            report.fail("evidence_missing", claim.field, f"{claim.shown!r} was extracted without evidence")
            continue
        span = locate(evidence, pages)
        if span is None:
            elsewhere = [n for n in pages_containing(evidence.quote, pages) if n != evidence.page]
            where = (
                f"; it is printed on page {elsewhere[0]}" if elsewhere else ", nor anywhere in the document"
            )
            report.fail(
                "evidence_not_found", claim.field, f"the quote is not printed on page {evidence.page}{where}"
            )
        elif not claim.says(evidence.quote):
            report.fail(
                "evidence_contradicts",
                claim.field,
                f"the quoted text {normalize_space(evidence.quote)[:120]!r} does not say {claim.shown!r}",
            )
