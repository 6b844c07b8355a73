"""The simulated provider's "model": a deterministic reader of the invoice OCR layouts the sample generator
prints, answering in the extraction schema's JSON shape.

It reads what is printed and nothing else: evidence is the exact text a value came from, a value it cannot
read is null, lines that are not part of the invoice's structure (notes, planted instructions) are
ignored like any other prose. Told to, it makes one arithmetic mistake so the review path gets exercised.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date
from decimal import Decimal
from typing import Any

# A wrong line amount is off by this much when an arithmetic mistake is asked for.
MISTAKE = Decimal("1.00")

_MONEY = r"-?(?:\d{1,3}(?:[,.']\d{3})+|\d+)[.,]\d{2}"
_QUANTITY = r"\d{1,9}(?:[.,]\d{1,4})?"
_CURRENCY = r"[A-Z]{3}"
_VALUE = rf"(?:{_CURRENCY} )?{_MONEY}(?: {_CURRENCY})?"
_MONTHS = {
    name: number
    for number, name in enumerate(
        (
            "january",
            "february",
            "march",
            "april",
            "may",
            "june",
            "july",
            "august",
            "september",
            "october",
            "november",
            "december",
        ),
        start=1,
    )
}
_DATE = (
    r"\d{4}-\d{2}-\d{2}|\d{1,2}\.\d{1,2}\.\d{4}|\d{1,2}-\d{1,2}-\d{4}"
    r"|\d{1,2} [A-Za-z]+ \d{4}|[A-Za-z]+ \d{1,2}, \d{4}"
)

_INVOICE_NUMBER = re.compile(
    r"^Invoice ?(?:no\.?|number|nr\.?|#) ?:? ?(?P<value>[A-Z0-9][A-Z0-9._/-]*)$", re.I
)
_ISSUE_DATE = re.compile(rf"(?:^| )(?:Invoice date|Date of issue|Issue date) ?:? ?(?P<value>{_DATE})\b", re.I)
_DUE_DATE = re.compile(rf"(?:^| )(?:Due date|Payment due|Due) ?:? ?(?P<value>{_DATE})\b", re.I)
_IBAN = re.compile(r"^IBAN ?:? ?(?P<value>[A-Z]{2}\d{2}(?: ?[A-Z0-9]){11,30})$")
_COLUMN_HEADER = re.compile(r"^Description\b.*\bAmount\b", re.I)
_PAGE_FURNITURE = re.compile(r"^(?:Page \d+(?: of \d+)?|.* page \d+|(?:Carried|Brought) forward\b.*)$", re.I)
_ROW = re.compile(
    rf"^(?P<description>.*?\S) (?P<quantity>{_QUANTITY}) (?P<unit_price>{_MONEY}) (?P<amount>{_MONEY})"
    rf"(?: (?P<currency>{_CURRENCY}))?$"
)
_SUBTOTAL_LABEL = r"(?:Subtotal|Sub-total|Net amount|Net total)"
_TAX_LABEL = r"(?:VAT|MwSt\.?|MWST|TVA|BTW|Moms|ALV|IVA|GST|Sales tax|Tax)"
_TOTAL_LABEL = r"(?:Total due|Amount due|Balance due|Invoice total|Total)"
_RATE = r"(?P<rate>\d{1,2}(?:[.,]\d{1,3})?) ?%"


def _amount_line(label: str, with_rate: bool = False) -> tuple[re.Pattern[str], re.Pattern[str]]:
    """The label and value on one line, and the label alone (its value wrapped onto the next line)."""
    rate = rf"(?: {_RATE})?" if with_rate else ""
    return (
        re.compile(rf"^{label}{rate} ?:? (?P<value>{_VALUE})$", re.I),
        re.compile(rf"^{label}{rate} ?:?$", re.I),
    )


_SUBTOTAL = _amount_line(_SUBTOTAL_LABEL)
_TAX = _amount_line(_TAX_LABEL, with_rate=True)
_TOTAL = _amount_line(_TOTAL_LABEL)
_VALUE_ONLY = re.compile(rf"^(?P<value>{_VALUE})$")


@dataclass(frozen=True)
class _Line:
    page: int
    start: int  # offset of the first non-blank character in the page
    end: int  # offset after the last non-blank character
    text: str  # whitespace collapsed, for matching


def _lines(pages: list[str]) -> list[_Line]:
    lines = []
    for number, page in enumerate(pages):
        offset = 0
        for raw in page.split("\n"):
            stripped = raw.strip()
            start = offset + (len(raw) - len(raw.lstrip())) if stripped else offset
            lines.append(_Line(number, start, start + len(stripped), " ".join(stripped.split())))
            offset += len(raw) + 1
    return lines


def _span(pages: list[str], first: _Line, last: _Line) -> str:
    return pages[first.page][first.start : last.end]


def normalize_money(text: str) -> str | None:
    """Printed money ("1.150,00", "1,150.00", "1'150.00", "1150,00") as "1150.00"; None when ambiguous."""
    match = re.fullmatch(r"(?P<sign>-?)(?P<whole>[\d,.']+?)(?P<point>[.,])(?P<cents>\d{2})", text)
    if not match:
        return None
    whole = match["whole"]
    separators = set(re.sub(r"\d", "", whole))
    if len(separators) > 1 or match["point"] in separators:
        return None  # "1.150.00" could be read two ways; a reader would not guess
    if separators and not re.fullmatch(r"\d{1,3}(?:[,.']\d{3})+", whole):
        return None
    return f"{match['sign']}{re.sub(r'[^0-9]', '', whole)}.{match['cents']}"


def _quantity(text: str) -> str:
    return text.replace(",", ".")


def _rate(text: str | None) -> str | None:
    return text.replace(",", ".") if text else None


def _value(text: str) -> tuple[str | None, str | None]:
    """("EUR 1.150,00" or "1.150,00 EUR") -> ("1150.00", "EUR")."""
    currency = None
    parts = text.split(" ")
    if re.fullmatch(_CURRENCY, parts[0]):
        currency = parts.pop(0)
    if len(parts) > 1 and re.fullmatch(_CURRENCY, parts[-1]):
        currency = parts.pop()
    return normalize_money(parts[0]), currency


def parse_date(text: str) -> str | None:
    """A printed date as ISO 8601, from the unambiguous formats; None when it is not a real date."""
    parts: tuple[int, int, int] | None = None
    if m := re.fullmatch(r"(\d{4})-(\d{2})-(\d{2})", text):
        parts = (int(m[1]), int(m[2]), int(m[3]))
    elif m := re.fullmatch(r"(\d{1,2})[.-](\d{1,2})[.-](\d{4})", text):
        parts = (int(m[3]), int(m[2]), int(m[1]))
    elif (m := re.fullmatch(r"(\d{1,2}) ([A-Za-z]+) (\d{4})", text)) and m[2].lower() in _MONTHS:
        parts = (int(m[3]), _MONTHS[m[2].lower()], int(m[1]))
    elif (m := re.fullmatch(r"([A-Za-z]+) (\d{1,2}), (\d{4})", text)) and m[1].lower() in _MONTHS:
        parts = (int(m[3]), _MONTHS[m[1].lower()], int(m[2]))
    if parts is None:
        return None
    try:
        return date(*parts).isoformat()
    except ValueError:
        return None


@dataclass(frozen=True)
class _Amount:
    money: str | None
    currency: str | None
    rate: str | None
    evidence: str
    index: int


def _find_amount(
    pages: list[str], lines: list[_Line], patterns: tuple[re.Pattern[str], re.Pattern[str]], start: int
) -> _Amount | None:
    one_line, label_only = patterns
    for index in range(start, len(lines)):
        line = lines[index]
        if match := one_line.match(line.text):
            money, currency = _value(match["value"])
            rate = _rate(match.groupdict().get("rate"))
            return _Amount(money, currency, rate, _span(pages, line, line), index)
        if (match := label_only.match(line.text)) and index + 1 < len(lines):
            following = lines[index + 1]
            value = _VALUE_ONLY.match(following.text)
            if value and following.page == line.page:
                money, currency = _value(value["value"])
                rate = _rate(match.groupdict().get("rate"))
                return _Amount(money, currency, rate, _span(pages, line, following), index + 1)
    return None


def _line_items(pages: list[str], lines: list[_Line], end: int) -> list[dict[str, Any]]:
    """Rows between the first column header and ``end``. A line right above a row that is not a row, a
    header or page furniture is the start of that row's wrapped description."""
    start = next((i for i, line in enumerate(lines[:end]) if _COLUMN_HEADER.match(line.text)), None)
    if start is None:
        return []
    items: list[dict[str, Any]] = []
    pending: _Line | None = None
    for line in lines[start + 1 : end]:
        row = _ROW.match(line.text)
        if row is None:
            furniture = not line.text or _COLUMN_HEADER.match(line.text) or _PAGE_FURNITURE.match(line.text)
            pending = None if furniture else line
            continue
        unit_price, amount = normalize_money(row["unit_price"]), normalize_money(row["amount"])
        description = row["description"]
        first = line
        if pending is not None and pending.page == line.page:
            description = f"{pending.text} {description}"
            first = pending
        pending = None
        if unit_price is None or amount is None:
            continue  # an unreadable price is left out, and the lines then fail to add up: review
        items.append(
            {
                "description": description,
                "quantity": _quantity(row["quantity"]),
                "unit_price": unit_price,
                "amount": amount,
                "evidence": _span(pages, first, line),
                "_currency": row["currency"],
            }
        )
    return items


def extract(pages: list[str], *, arithmetic_mistake: bool = False) -> dict[str, Any]:
    """The extraction schema's JSON object for ``pages``. Fields that cannot be read are null; with
    ``arithmetic_mistake`` one line amount (or, without lines, the subtotal) is off by ``MISTAKE``."""
    lines = _lines(pages)
    first_page = [line for line in lines if line.page == 0 and line.text]

    number_line = next((line for line in lines if _INVOICE_NUMBER.match(line.text)), None)
    invoice_number = _INVOICE_NUMBER.match(number_line.text) if number_line else None
    # The supplier heads the first page of a document that reads as an invoice; elsewhere it is a guess.
    looks_like_invoice = number_line is not None or any(line.text.upper() == "INVOICE" for line in lines)
    supplier_line = first_page[0] if first_page and looks_like_invoice else None
    if supplier_line is not None and (
        supplier_line is number_line or supplier_line.text.upper() == "INVOICE"
    ):
        supplier_line = None

    subtotal = _find_amount(pages, lines, _SUBTOTAL, 0)
    after_subtotal = subtotal.index + 1 if subtotal else 0
    tax = _find_amount(pages, lines, _TAX, after_subtotal)
    total = _find_amount(pages, lines, _TOTAL, after_subtotal)
    table_end = min((a.index for a in (subtotal, total) if a is not None), default=len(lines))
    items = _line_items(pages, lines, table_end)

    currencies = [a.currency for a in (total, subtotal, tax) if a is not None]
    currencies += [item["_currency"] for item in items]
    currency = next((c for c in currencies if c), None)
    for item in items:
        del item["_currency"]

    if arithmetic_mistake and items:
        items[-1]["amount"] = str(Decimal(items[-1]["amount"]) + MISTAKE)
    subtotal_money = subtotal.money if subtotal else None
    if arithmetic_mistake and not items and subtotal_money is not None:
        subtotal_money = str(Decimal(subtotal_money) + MISTAKE)

    return {
        "supplier": (
            {"name": supplier_line.text, "evidence": _span(pages, supplier_line, supplier_line)}
            if supplier_line
            else None
        ),
        "invoice_number": invoice_number["value"] if invoice_number else None,
        "invoice_number_evidence": _span(pages, number_line, number_line) if number_line else None,
        "issue_date": _first_date(lines, _ISSUE_DATE),
        "due_date": _first_date(lines, _DUE_DATE),
        "currency": currency,
        "iban": _iban(lines),
        "line_items": items,
        "subtotal": subtotal_money,
        "subtotal_evidence": subtotal.evidence if subtotal else None,
        "tax": {
            "rate_percent": tax.rate if tax else None,
            "amount": tax.money if tax else None,
            "evidence": tax.evidence if tax else None,
        },
        "total": total.money if total else None,
        "total_evidence": total.evidence if total else None,
    }


def _first_date(lines: list[_Line], pattern: re.Pattern[str]) -> str | None:
    for line in lines:
        if match := pattern.search(line.text):
            return parse_date(match["value"])
    return None


def _iban(lines: list[_Line]) -> str | None:
    for line in lines:
        if match := _IBAN.match(line.text):
            return match["value"].replace(" ", "")
    return None
