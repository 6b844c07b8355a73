"""The simulated provider's "model": a deterministic reader of the invoice OCR layouts the sample generator
prints, answering in the extraction schema's JSON shape.

It reads what is printed and nothing else: evidence is the page and the exact text a value came from, a
value it cannot read is null, lines that are not part of the invoice's structure (notes, planted
instructions) are ignored like any other prose. Told to, it makes one of the mistakes real models make
(``Mistake``), so the validation policy and the review path get exercised.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal
from enum import StrEnum
from typing import Any

from tollgate.jobtypes.invoice_extraction.normalize import DATE_PATTERN, normalize_money, parse_date

# A wrong line amount is off by this much when an arithmetic mistake is asked for.
MISTAKE = Decimal("1.00")
# What an invented IBAN looks like: a real-looking one whose check digits verify.
INVENTED_IBAN = "GB33BUKB20201555555555"


class Mistake(StrEnum):
    """Mistakes real models make on invoices; each one must end in review, never as a success."""

    ARITHMETIC = "arithmetic"  # one line amount (or, without lines, the subtotal) is off
    INVENTED_IBAN = "invented_iban"  # an IBAN with valid check digits that is not the printed one
    SWAPPED_QUANTITY_PRICE = "swapped_quantity_price"  # a line's quantity and unit price swapped
    DROPPED_LINE = "dropped_line"  # a line item left out
    WRONG_CURRENCY = "wrong_currency"  # a currency other than the printed one
    EVIDENCE_ELSEWHERE = "evidence_elsewhere"  # the total's evidence quotes another line
    EVIDENCE_INVENTED = "evidence_invented"  # a wrong total with a quote that is printed nowhere


_MONEY = r"-?(?:\d{1,3}(?:[,.']\d{3})+|\d+)[.,]\d{2}"
_QUANTITY = r"\d{1,9}(?:[.,]\d{1,4})?"
_CURRENCY = r"[A-Z]{3}"
_VALUE = rf"(?:{_CURRENCY} )?{_MONEY}(?: {_CURRENCY})?"
_DATE = DATE_PATTERN

# The labels of each field in English, German and French, as the sample layouts print them.
_NUMBER_VALUE = r"(?P<value>[A-Z0-9][A-Z0-9._/-]*)"
_INVOICE_NUMBER = re.compile(
    r"^(?:Invoice ?(?:no\.?|number|nr\.?|#)|Rechnungs-?(?:nummer|nr\.?)|Rechnung ?Nr\.?"
    rf"|Facture n°|N° de facture|Numéro de facture) ?:? ?{_NUMBER_VALUE}$",
    re.I,
)
_ISSUE_DATE = re.compile(
    r"(?:^| )(?:Invoice date|Date of issue|Issue date|Rechnungsdatum|Date de facture)"
    rf" ?:? ?(?P<value>{_DATE})\b",
    re.I,
)
_DUE_DATE = re.compile(
    r"(?:^| )(?:Due date|Payment due|Due|Fällig am|Zahlbar bis|Date d'échéance|Échéance)"
    rf" ?:? ?(?P<value>{_DATE})\b",
    re.I,
)
_IBAN = re.compile(r"^IBAN ?:? ?(?P<value>[A-Z]{2}\d{2}(?: ?[A-Z0-9]){11,30})$")
_COLUMN_HEADER = re.compile(
    r"^(?:Description\b.*\bAmount|Beschreibung\b.*\bBetrag|Désignation\b.*\bMontant)\b", re.I
)
_PAGE_FURNITURE = re.compile(
    r"^(?:(?:Page|Seite) \d+(?: (?:of|von|sur) \d+)?|.* (?:page|Seite) \d+"
    r"|(?:Carried forward|Brought forward|Übertrag|À reporter)\b.*)$",
    re.I,
)
_ROW = re.compile(
    rf"^(?P<description>.*?\S) (?P<quantity>{_QUANTITY}) (?P<unit_price>{_MONEY}) (?P<amount>{_MONEY})"
    rf"(?: (?P<currency>{_CURRENCY}))?$"
)
_SUBTOTAL_LABEL = r"(?:Subtotal|Sub-total|Net amount|Net total|Zwischensumme|Nettobetrag|Sous-total|Total HT)"
_TAX_LABEL = r"(?:VAT|MwSt\.?|MWST|USt\.?|TVA|BTW|Moms|ALV|IVA|GST|Sales tax|Tax)"
_TOTAL_LABEL = (
    r"(?:Total due|Amount due|Balance due|Invoice total|Total TTC|Total|Gesamtbetrag|Rechnungsbetrag"
    r"|Gesamtsumme|Montant total|Net à payer)"
)
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
_TITLES = frozenset({"INVOICE", "RECHNUNG", "FACTURE"})


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


def _span(pages: list[str], first: _Line, last: _Line) -> dict[str, Any]:
    """Evidence in the schema's shape: the page (from 1) and the text from ``first`` to ``last``."""
    return {"page": first.page + 1, "quote": pages[first.page][first.start : last.end]}


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


@dataclass(frozen=True)
class _Amount:
    money: str | None
    currency: str | None
    rate: str | None
    evidence: dict[str, Any]
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


def extract(pages: list[str], *, mistake: Mistake | None = None) -> dict[str, Any]:
    """The extraction schema's JSON object for ``pages``. Fields that cannot be read are null; with
    ``mistake`` the answer has that one mistake in it (see ``Mistake``)."""
    lines = _lines(pages)
    first_page = [line for line in lines if line.page == 0 and line.text]

    number_line = next((line for line in lines if _INVOICE_NUMBER.match(line.text)), None)
    invoice_number = _INVOICE_NUMBER.match(number_line.text) if number_line else None
    # The supplier heads the first page of a document that reads as an invoice; elsewhere it is a guess.
    looks_like_invoice = number_line is not None or any(line.text.upper() in _TITLES for line in lines)
    supplier_line = first_page[0] if first_page and looks_like_invoice else None
    if supplier_line is not None and (supplier_line is number_line or supplier_line.text.upper() in _TITLES):
        supplier_line = None

    subtotal = _find_amount(pages, lines, _SUBTOTAL, 0)
    after_subtotal = subtotal.index + 1 if subtotal else 0
    tax = _find_amount(pages, lines, _TAX, after_subtotal)
    total = _find_amount(pages, lines, _TOTAL, after_subtotal)
    table_end = min((a.index for a in (subtotal, total) if a is not None), default=len(lines))
    items = _line_items(pages, lines, table_end)

    # The currency and the line it is printed on: the totals first, then the rows.
    currencies = [(a.currency, a.evidence) for a in (total, subtotal, tax) if a is not None]
    currencies += [(item["_currency"], item["evidence"]) for item in items]
    currency, currency_evidence = next(((c, e) for c, e in currencies if c), (None, None))
    for item in items:
        del item["_currency"]
    issue_date, issue_date_evidence = _first_date(pages, lines, _ISSUE_DATE)
    due_date, due_date_evidence = _first_date(pages, lines, _DUE_DATE)
    iban, iban_evidence = _iban(pages, lines)

    answer: dict[str, Any] = {
        "supplier": (
            {"name": supplier_line.text, "evidence": _span(pages, supplier_line, supplier_line)}
            if supplier_line
            else None
        ),
        "invoice_number": invoice_number["value"] if invoice_number else None,
        "invoice_number_evidence": _span(pages, number_line, number_line) if number_line else None,
        "issue_date": issue_date,
        "issue_date_evidence": issue_date_evidence,
        "due_date": due_date,
        "due_date_evidence": due_date_evidence,
        "currency": currency,
        "currency_evidence": currency_evidence,
        "iban": iban,
        "iban_evidence": iban_evidence,
        "line_items": items,
        "subtotal": subtotal.money if subtotal else None,
        "subtotal_evidence": subtotal.evidence if subtotal else None,
        "tax": {
            "rate_percent": tax.rate if tax else None,
            "amount": tax.money if tax else None,
            "evidence": tax.evidence if tax else None,
        },
        "total": total.money if total else None,
        "total_evidence": total.evidence if total else None,
    }
    if mistake is not None:
        _MISTAKES[mistake](answer)
    return answer


def _first_date(
    pages: list[str], lines: list[_Line], pattern: re.Pattern[str]
) -> tuple[str | None, dict[str, Any] | None]:
    for line in lines:
        if match := pattern.search(line.text):
            value = parse_date(match["value"])
            # The label and the date, not the whole line: another date may share it.
            return value, {"page": line.page + 1, "quote": match.group().strip()} if value else None
    return None, None


def _iban(pages: list[str], lines: list[_Line]) -> tuple[str | None, dict[str, Any] | None]:
    for line in lines:
        if match := _IBAN.match(line.text):
            return match["value"].replace(" ", ""), _span(pages, line, line)
    return None, None


# Each mistake changes a correct answer the way a model gets it wrong; evidence is left as the model
# would leave it (still quoting the printed text) unless the mistake is in the evidence itself.


def _arithmetic(answer: dict[str, Any]) -> None:
    items = answer["line_items"]
    if items:
        items[-1]["amount"] = str(Decimal(items[-1]["amount"]) + MISTAKE)
    elif answer["subtotal"] is not None:
        answer["subtotal"] = str(Decimal(answer["subtotal"]) + MISTAKE)


def _invented_iban(answer: dict[str, Any]) -> None:
    answer["iban"] = INVENTED_IBAN if answer["iban"] != INVENTED_IBAN else "DE89370400440532013000"


def _swapped_quantity_price(answer: dict[str, Any]) -> None:
    for item in answer["line_items"]:
        quantity, price = Decimal(item["quantity"]), Decimal(item["unit_price"])
        if quantity != price:
            item["quantity"], item["unit_price"] = format(price.normalize(), "f"), f"{quantity:.2f}"
            return


def _dropped_line(answer: dict[str, Any]) -> None:
    if answer["line_items"]:
        answer["line_items"].pop(len(answer["line_items"]) // 2)


def _wrong_currency(answer: dict[str, Any]) -> None:
    answer["currency"] = "USD" if answer["currency"] != "USD" else "EUR"


def _evidence_elsewhere(answer: dict[str, Any]) -> None:
    answer["total_evidence"] = answer["subtotal_evidence"]


def _evidence_invented(answer: dict[str, Any]) -> None:
    if answer["total"] is None:
        return
    total = str(Decimal(answer["total"]) + Decimal("10.00"))
    answer["total"] = total
    page = answer["total_evidence"]["page"] if answer["total_evidence"] else 1
    answer["total_evidence"] = {"page": page, "quote": f"Total amount payable {total}"}


_MISTAKES = {
    Mistake.ARITHMETIC: _arithmetic,
    Mistake.INVENTED_IBAN: _invented_iban,
    Mistake.SWAPPED_QUANTITY_PRICE: _swapped_quantity_price,
    Mistake.DROPPED_LINE: _dropped_line,
    Mistake.WRONG_CURRENCY: _wrong_currency,
    Mistake.EVIDENCE_ELSEWHERE: _evidence_elsewhere,
    Mistake.EVIDENCE_INVENTED: _evidence_invented,
}
