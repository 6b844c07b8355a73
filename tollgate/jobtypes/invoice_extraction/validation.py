"""Validation policy v3: the rules an extraction must pass before it counts as done.

Any failure sends the job to REVIEW_REQUIRED with machine-readable reasons; nothing is corrected or nulled
silently. Money is compared as Decimal to the cent. Every value that reaches an ERP is found on the page by
the policy itself (``tollgate.jobtypes.printed``): printed with exactly its characters as whole tokens
(``value_not_printed`` otherwise: a look-alike letter, fullwidth digits or a cut token is not what the page
says), under a label of its own field (``value_not_labelled``: a date after "Due" is not the issue date, a
number after "Order no." is not the invoice number, a customer's direct-debit line does not hold the
supplier's IBAN, a currency named in a note is not the invoice's). The model's evidence is a hint: it
decides where the search starts, never whether a value passes. What was found, value span and label, is
recorded with the result. Results judged by v1 (no evidence) and v2 (quotes that contain the value) keep
their version.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import ROUND_CEILING, ROUND_HALF_UP, Decimal

from tollgate.jobtypes.base import KnownSupplier, Reason, TenantPolicy, ValidationReport
from tollgate.jobtypes.evidence import Evidence, locate
from tollgate.jobtypes.invoice_extraction import labels as fields
from tollgate.jobtypes.invoice_extraction.labels import INVOICE_LABELS
from tollgate.jobtypes.invoice_extraction.normalize import (
    CURRENCY_SYMBOLS,
    normalize_money,
    normalize_name,
    parse_date,
)
from tollgate.jobtypes.invoice_extraction.schema import Invoice, LineItem
from tollgate.jobtypes.printed import Label, Lexicon, Line, Located, PrintedDocument, Span, ordered_by_hint
from tollgate.jobtypes.statements import DATE_TOKEN

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

POLICY_VERSION = "validation.v3"
# Every reason code this policy gives (a test holds it to the policy's code): what `?reason=` filters on.
REASON_CODES = frozenset(
    {
        "currency_not_allowed",
        "dates_out_of_order",
        "iban_checksum_invalid",
        "iban_unverified",
        "line_amount_mismatch",
        "line_not_printed",
        "missing_currency",
        "missing_field",
        "missing_money_field",
        "missing_supplier",
        "no_line_items",
        "subtotal_mismatch",
        "supplier_iban_mismatch",
        "supplier_unknown",
        "tax_rate_mismatch",
        "total_mismatch",
        "value_not_labelled",
        "value_not_printed",
    }
)
CENT = Decimal("0.01")
LEXICON = Lexicon(INVOICE_LABELS)

# A printed number: ASCII digits with the separators of the common styles (no other script's digits).
_NUMBER = re.compile(r"-?[0-9](?:[0-9.,'\u2019]*[0-9])?")
# What may stand between a label and an amount: the currency; before a tax amount, its rate too.
_CURRENCY_TOKEN = r"(?<![A-Za-z])[A-Z]{3}(?![A-Za-z])|[€£¥₹₩₺$]|zł"  # noqa: S105 - a pattern
_MONEY_GLUE = re.compile(_CURRENCY_TOKEN)
_TAX_GLUE = re.compile(rf"{_CURRENCY_TOKEN}|-?[0-9]+(?:[.,][0-9]+)?[ \t]*%")
# Tokens a row may print besides its description, quantity, unit price and amount.
_ROW_EXTRAS = re.compile(
    rf"(?:{_CURRENCY_TOKEN}|[0-9]+(?:[.,][0-9]+)?%|x|pcs|pc|h|hrs|st|stk|units?|days?|kg|m)",
    re.IGNORECASE,
)
_ROW_POSITION = re.compile(r"[ \t]*(?:[0-9]{1,3}[.)]?[ \t]+)?")
# The lexicon's field whose labels name each value (the rate is named by the tax's label).
_LABEL_OF = {"tax.rate_percent": fields.TAX}
# A line with one of these labels is about the customer's side, whatever else it prints.
_NOT_THE_SUPPLIERS = frozenset({fields.CUSTOMER, fields.DIRECT_DEBIT})
# The labelled amounts a currency printed beside names the invoice's currency.
_AMOUNT_FIELDS = frozenset({fields.TOTAL, fields.SUBTOTAL, fields.TAX})


def iban_is_valid(iban: str) -> bool:
    """ISO 13616 check digits: move the first four characters to the end, letters to numbers, mod 97 = 1."""
    compact = iban.replace(" ", "").upper()
    if not re.fullmatch(r"[A-Z]{2}[0-9]{2}[A-Z0-9]{11,30}", compact):
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
    _check_dates(invoice, report)
    _check_identity(invoice, policy, report)
    _Locator(invoice, PrintedDocument(pages), report).run()
    return report


# --------------------------------------------------------------------------------- rules between fields


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
    rate = invoice.tax.rate_percent
    if subtotal is not None and tax is not None and rate is not None:
        expected = subtotal * Decimal(rate) / 100
        # Tax rounded per line may differ from tax on the subtotal by half a cent a line.
        tolerance = (CENT / 2 * (len(invoice.line_items) + 1)).quantize(CENT, rounding=ROUND_CEILING)
        if abs(expected - tax) > tolerance:
            report.fail(
                "tax_rate_mismatch",
                "tax",
                f"{subtotal} x {rate}% = {expected.quantize(CENT, rounding=ROUND_HALF_UP)}, "
                f"the tax says {tax}",
            )


def _check_dates(invoice: Invoice, report: ValidationReport) -> None:
    issued, due = invoice.issue_date, invoice.due_date
    if issued is not None and due is not None and issued.isascii() and due.isascii() and issued > due:
        report.fail(
            "dates_out_of_order", "due_date", f"the invoice is due ({due}) before it was issued ({issued})"
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
    elif invoice.iban is not None and not known[0].iban and not policy.accept_unverified_iban:
        report.fail(
            "iban_unverified",
            "iban",
            "no IBAN is on file for this supplier, so this one cannot be checked: a person confirms it (or "
            "the tenant accepts unverified IBANs)",
        )


# ------------------------------------------------------------------------------- finding values on pages


def _lookalikes(value: str) -> str:
    """The characters of ``value`` that stand in for others (compatibility forms, other scripts' digits)."""
    odd = [c for c in value if unicodedata.normalize("NFKC", c) != c or (c.isdigit() and not c.isascii())]
    return ", ".join(f"{c!r} (U+{ord(c):04X} {unicodedata.name(c, '?')})" for c in dict.fromkeys(odd))


@dataclass(frozen=True)
class _Value:
    """One value to find: where the model said it is, how to find it, and which labels may govern it."""

    field: str
    shown: str
    evidence: Evidence | None
    candidates: Callable[[str], list[Span]]
    accepts: Callable[[Span], Label | bool | None]  # the label that names it, True (no label needed), or None


class _Locator:
    """Finds each value of an invoice on its pages and records where, or the reason it cannot."""

    def __init__(self, invoice: Invoice, document: PrintedDocument, report: ValidationReport) -> None:
        self.invoice = invoice
        self.document = document
        self.report = report
        self.pages = tuple(page.text for page in document.pages)
        self._numbers: list[tuple[Span, str]] | None = None
        self._amounts: list[tuple[Span, Decimal]] | None = None
        self._dates: list[tuple[Span, str]] | None = None
        self.money_spans: list[Span] = []  # every amount located, for the currency printed beside one

    def run(self) -> None:
        invoice, tax = self.invoice, self.invoice.tax
        if invoice.supplier is not None:
            name = invoice.supplier.name
            self.find(_Value("supplier", name, invoice.supplier.evidence, self.texts, self.supplier_at))
        labelled = (
            ("invoice_number", invoice.invoice_number, invoice.invoice_number_evidence, self.tokens, None),
            ("issue_date", invoice.issue_date, invoice.issue_date_evidence, self.dates, None),
            ("due_date", invoice.due_date, invoice.due_date_evidence, self.dates, None),
            ("subtotal", invoice.subtotal, invoice.subtotal_evidence, self.amounts, _MONEY_GLUE),
            ("total", invoice.total, invoice.total_evidence, self.amounts, _MONEY_GLUE),
            ("tax", tax.amount, tax.evidence, self.amounts, _TAX_GLUE),
            ("tax.rate_percent", tax.rate_percent, tax.evidence, self.rates, _MONEY_GLUE),
        )
        for name, value, evidence, candidates, glue in labelled:
            if value is None:
                continue
            field = _LABEL_OF.get(name, name)
            found = self.find(_Value(name, value, evidence, candidates, self.labelled(field, glue)))
            if found is not None and name in {"subtotal", "total", "tax"}:
                self.money_spans.append(found.span)
        self.find_lines()
        if invoice.iban is not None:
            self.find(_Value("iban", invoice.iban, invoice.iban_evidence, self.ibans, self.iban_at))
        if invoice.currency is not None:
            code = invoice.currency
            self.find(_Value("currency", code, invoice.currency_evidence, self.currencies, self.currency_at))

    # ------------------------------------------------------------------------------------ the search

    def hint(self, evidence: Evidence | None) -> tuple[Span | None, int | None]:
        if evidence is None:
            return None, None
        return locate(evidence, self.pages), evidence.page

    def find(self, value: _Value) -> Located | None:
        spans = value.candidates(value.shown)
        if not spans:
            self.not_printed(value.field, value.shown)
            return None
        hint, page = self.hint(value.evidence)
        for span in ordered_by_hint(spans, hint, page):
            accepted = value.accepts(span)
            if accepted is not None and accepted is not False:
                located = Located(value.field, span, accepted if isinstance(accepted, Label) else None)
                self.report.located[value.field] = located
                return located
        first = ordered_by_hint(spans, hint, page)[0]
        self.not_labelled(value.field, value.shown, first)
        return None

    def not_printed(self, field: str, shown: str) -> None:
        odd = _lookalikes(shown)
        detail = f"{shown!r} is printed nowhere in the document with exactly these characters as whole tokens"
        if odd:
            detail += f"; it has characters that only look like what a page prints: {odd}"
        self.report.fail("value_not_printed", field, detail)

    def not_labelled(self, field: str, shown: str, span: Span) -> None:
        label = self.document.governing_label(span, LEXICON, _TAX_GLUE)
        what = field.replace("tax.rate_percent", "tax rate").replace("_", " ")
        where = f"{shown!r} is printed on page {span.page}"
        if label is not None and label.field == _LABEL_OF.get(field, field) and field == "iban":
            context = self.iban_context(span, label)
            about = ", ".join(sorted(c.replace("_", " ") for c in context & _NOT_THE_SUPPLIERS))
            detail = f"{where} under {label.text!r}, but on a line about the {about}, not the supplier's"
        elif label is not None and label.field == _LABEL_OF.get(field, field):
            detail = f"{where} after {label.text!r}, but with other text between the label and the value"
        elif label is not None:
            named = label.field.replace("_", " ")
            detail = f"{where} under {label.text!r}, a label of the {named}, not of the {what}"
        else:
            detail = f"{where}, but no label of the {what} names it there"
        self.report.fail("value_not_labelled", field, detail)

    # ------------------------------------------------------------------------- what each field accepts

    def labelled(self, field: str, glue: re.Pattern[str] | None) -> Callable[[Span], Label | None]:
        def accepts(span: Span) -> Label | None:
            label = self.document.governing_label(span, LEXICON, glue)
            return label if label is not None and label.field == field else None

        return accepts

    def supplier_at(self, span: Span) -> Label | bool | None:
        """A supplier is named by its own label or heads the page unlabelled; never a customer's line."""
        label = self.document.governing_label(span, LEXICON)
        if label is not None:
            return label if label.field == fields.SUPPLIER else None
        return None if fields.CUSTOMER in self.document.line_fields(span, LEXICON) else True

    def iban_at(self, span: Span) -> Label | None:
        """The supplier's bank details, never a line about the customer's account or a direct debit, nor one
        under such a heading."""
        label = self.document.governing_label(span, LEXICON)
        if label is None or label.field != fields.IBAN:
            return None
        return None if self.iban_context(span, label) & _NOT_THE_SUPPLIERS else label

    def iban_context(self, span: Span, label: Label) -> set[str]:
        """The fields named on the IBAN's line, on its label's line, and on the headings right above (lines
        of labels only, such as "Direct debit:"): OCR text often has no blank lines to tell blocks apart, so
        a heading counts only while nothing but headings stands between it and the IBAN."""
        page = self.document.page(span.page)
        context = self.document.line_fields(span, LEXICON) | self.document.line_fields(label.span, LEXICON)
        line = page.line_at(label.span.start)
        while line.number > 0:
            line = page.lines[line.number - 1]
            labels = self.document.labels_on(line, LEXICON)
            if not labels or not self.document.only_labels(line, labels):
                break
            context |= {found.field for found in labels}
        return context

    def currency_at(self, span: Span) -> Label | bool | None:
        """A currency printed beside an amount the page labels as a total, subtotal or tax (or beside a row's
        amount), in the amounts' column header, or after a currency label; a currency named anywhere else (a
        note on other ways to pay) is not the invoice's."""
        label = self.document.governing_label(span, LEXICON)
        if label is not None and label.field == fields.CURRENCY:
            return label
        text = self.document.page(span.page).text
        for money, _ in self.numbers():
            if money.page != span.page:
                continue
            between = (
                text[span.end : money.start] if span.end <= money.start else text[money.end : span.start]
            )
            if not re.fullmatch(r"[ \t]*", between):
                continue
            governing = self.document.governing_label(money, LEXICON, _TAX_GLUE)
            if governing is not None and governing.field in _AMOUNT_FIELDS:
                return governing
            if money in self.money_spans:
                return True
        header = self.document.labels_on(self.document.line_of(span), LEXICON)
        if (
            sum(1 for h in header if h.field == fields.COLUMN) >= 2
            and text[span.start - 1 : span.start] == "("
        ):
            return next(h for h in reversed(header) if h.span.end <= span.start)
        return None

    # ------------------------------------------------------------------------------ value candidates

    def texts(self, value: str) -> list[Span]:
        return self.document.find_text(value)

    def tokens(self, value: str) -> list[Span]:
        return self.document.find_text(value, across_lines=False)

    def numbers(self) -> list[tuple[Span, str]]:
        if self._numbers is None:
            self._numbers = [(span, self.document.text(span)) for span in self.document.find_maximal(_NUMBER)]
        return self._numbers

    def amounts(self, value: str) -> list[Span]:
        if not re.fullmatch(r"-?[0-9]+\.[0-9]{2}", value):
            return []
        if self._amounts is None:
            # Each printed number read once as an amount; a percentage (a tax rate) is none.
            self._amounts = [
                (span, reading)
                for span, token in self.numbers()
                if (reading := _money_reading(token)) is not None and not self.percent(span)
            ]
        wanted = Decimal(value)
        return [span for span, reading in self._amounts if reading == wanted]

    def percent(self, span: Span) -> bool:
        """Whether the number at ``span`` is a percentage (a tax rate is not an amount)."""
        return re.match(r"[ \t]?%", self.document.page(span.page).text[span.end : span.end + 2]) is not None

    def rates(self, value: str) -> list[Span]:
        if not re.fullmatch(r"[0-9]+(?:\.[0-9]+)?", value):
            return []
        wanted = Decimal(value)
        found = []
        for span, token in self.numbers():
            rate = self.percent(span) and re.fullmatch(r"[0-9]+(?:[.,][0-9]+)?", token)
            if rate and Decimal(token.replace(",", ".")) == wanted:
                found.append(span)
        return found

    def dates(self, value: str) -> list[Span]:
        if not re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", value):
            return []
        if self._dates is None:
            self._dates = [
                (span, iso)
                for span in self.document.find_maximal(DATE_TOKEN)
                if (iso := parse_date(" ".join(self.document.text(span).split()))) is not None
            ]
        return [span for span, iso in self._dates if iso == value]

    def ibans(self, value: str) -> list[Span]:
        if not re.fullmatch(r"[A-Z0-9]+", value):
            return []
        # Printed compact or in groups (OCR may widen the gaps), each character exactly as extracted.
        return self.document.find_pattern(re.compile("[ \t]*".join(re.escape(c) for c in value)))

    def currencies(self, value: str) -> list[Span]:
        if not re.fullmatch(r"[A-Z]{3}", value):
            return []
        spans = self.document.find_text(value, across_lines=False)
        for symbol, code in CURRENCY_SYMBOLS.items():
            if code == value:
                spans += self.document.find_pattern(re.compile(re.escape(symbol)))
        return spans

    # ------------------------------------------------------------------------------------ line items

    def find_lines(self) -> None:
        taken: set[tuple[int, int]] = set()
        for index, line in enumerate(self.invoice.line_items):
            name = f"line_items[{index}]"
            hint, page = self.hint(line.evidence)
            candidates = ordered_by_hint(self.document.find_text(line.description), hint, page)
            found = None
            for span in candidates:
                row = self.row(span, line)
                if row is not None and (row[0].page, row[0].start) not in taken:
                    found = row
                    break
            if found is None:
                self.line_not_printed(name, line, bool(candidates))
                continue
            row_span, amount = found
            taken.add((row_span.page, row_span.start))
            self.money_spans.append(amount)
            self.report.located[name] = Located(name, row_span, self.column_header(row_span))

    def row(self, description: Span, line: LineItem) -> tuple[Span, Span] | None:
        """The row that prints ``line`` (and where its amount is): its description at the start of a row,
        not the tail of one wrapped from the line above, then at once its quantity, and its unit price and
        amount, with nothing else on the row after the quantity but a currency, a unit or a percentage."""
        page = self.document.page(description.page)
        first = page.line_at(description.start)
        if not _ROW_POSITION.fullmatch(page.text[first.start : description.start]):
            return None
        if first.number > 0 and self.continues(page.lines[first.number - 1]):
            return None
        last = page.line_at(description.end - 1)
        if description.end < last.end and not page.text[description.end].isspace():
            return None
        numbers: list[re.Match[str]] = []
        for token in re.finditer(r"\S+", page.text[description.end : last.end]):
            if _NUMBER.fullmatch(token.group()):
                numbers.append(token)
            elif not numbers or not _ROW_EXTRAS.fullmatch(token.group()):
                return None  # the quantity comes first: a word before it is the description's own
        if len(numbers) != 3:
            return None
        quantity, unit, amount = (number.group() for number in numbers)
        if _quantity_reading(quantity) != Decimal(line.quantity):
            return None
        if _money_reading(unit) != Decimal(line.unit_price) or _money_reading(amount) != Decimal(line.amount):
            return None
        end = description.end + numbers[2].end()
        return Span(description.page, description.start, end), Span(description.page, end - len(amount), end)

    def continues(self, above: Line) -> bool:
        """Whether the line above a row's first line is the start of its description (a wrapped row): text
        that is neither blank, nor labelled (a header, a total), nor a row (which ends in an amount)."""
        text = self.document.page(above.page).line_text(above).strip()
        if not text or self.document.labels_on(above, LEXICON):
            return False
        return re.search(rf"(?:[0-9]|{_CURRENCY_TOKEN})$", text) is None

    def column_header(self, row: Span) -> Label | None:
        """The amounts' column header above a row, shown as what names its values."""
        page = self.document.page(row.page)
        for line in reversed(page.lines[: page.line_at(row.start).number]):
            labels = [
                label for label in self.document.labels_on(line, LEXICON) if label.field == fields.COLUMN
            ]
            if len(labels) >= 2:
                return labels[0]
        return None

    def line_not_printed(self, name: str, line: LineItem, description_printed: bool) -> None:
        shown = f"{line.description!r} {line.quantity} x {line.unit_price} = {line.amount}"
        if not description_printed:
            self.not_printed(name, line.description)
            return
        self.report.fail(
            "line_not_printed",
            name,
            f"no row prints {shown}: the description, then its quantity, unit price and amount",
        )


def _money_reading(token: str) -> Decimal | None:
    """A printed amount as a Decimal: two decimals in any of the common styles, or a whole number."""
    if re.fullmatch(r"-?[0-9]+", token):
        return Decimal(token)
    money = normalize_money(token.replace("\u2019", "'"))
    return Decimal(money) if money is not None else None


def _quantity_reading(token: str) -> Decimal | None:
    if re.fullmatch(r"[0-9]+(?:[.,][0-9]{1,4})?", token):
        return Decimal(token.replace(",", "."))
    return _money_reading(token)
