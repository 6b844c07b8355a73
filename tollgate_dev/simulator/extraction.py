"""The simulated provider's "model": a deterministic reader of the invoice OCR layouts the sample generator
prints, answering in the extraction schema's JSON shape.

It reads what is printed and nothing else: evidence is the page and the exact text a value came from, a
value it cannot read is null, lines that are not part of the invoice's structure (notes, planted
instructions) are ignored like any other prose. Told to, it makes one of the mistakes real models make
(``Mistake``), so the validation policy and the review path get exercised. The adversary's mistakes look
right: one plausible wrong value whose evidence quotes a real line (or part of one) of the page.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from enum import StrEnum
from typing import Any

from tollgate.jobtypes.invoice_extraction.normalize import DATE_PATTERN, normalize_money, parse_date

# A wrong line amount is off by this much when an arithmetic mistake is asked for.
MISTAKE = Decimal("1.00")
# What an invented IBAN looks like: a real-looking one whose check digits verify.
INVENTED_IBAN = "GB33BUKB20201555555555"
# Tax rates a model might put in place of the printed one, the first that differs is taken.
COMMON_RATES = ("19", "20", "7", "21", "25")
# Line descriptions an invoice could print; an invented one is the first that the document does not.
INVENTED_DESCRIPTIONS = (
    "Express handling surcharge",
    "Extended warranty, 24 months",
    "Installation and setup, flat fee",
)
# 0-9 as FULLWIDTH DIGIT ZERO to NINE (U+FF10 to U+FF19).
FULLWIDTH_DIGITS = str.maketrans({str(digit): chr(0xFF10 + digit) for digit in range(10)})


class Mistake(StrEnum):
    """Mistakes real models make on invoices; each one must end in review, never as a success."""

    ARITHMETIC = "arithmetic"  # one line amount (or, without lines, the subtotal) is off
    INVENTED_IBAN = "invented_iban"  # an IBAN with valid check digits that is not the printed one
    SWAPPED_QUANTITY_PRICE = "swapped_quantity_price"  # a line's quantity and unit price swapped
    DROPPED_LINE = "dropped_line"  # a line item left out
    WRONG_CURRENCY = "wrong_currency"  # a currency other than the printed one
    EVIDENCE_ELSEWHERE = "evidence_elsewhere"  # the total's evidence quotes another line
    EVIDENCE_INVENTED = "evidence_invented"  # a wrong total with a quote that is printed nowhere
    # The adversary: a plausible wrong value with real-looking evidence. Those that need a layout feature
    # (an order line, a direct-debit line, a currency note, a dots-style date with a two-digit day, an 's'
    # or a 'k' in the supplier's name) leave the answer truthful without it; see ``mistake_applies``.
    ISSUE_DATE_IS_DUE_DATE = "issue_date_is_due_date"  # the due date as issue date, quoting the due date
    DATES_SWAPPED = "dates_swapped"  # issue and due dates swapped, each quoting the other's printed date
    INVOICE_NUMBER_FROM_ORDER = "invoice_number_from_order"  # the order number, quoting the order line
    INVOICE_NUMBER_FROM_TAX_ID = "invoice_number_from_tax_id"  # the supplier's tax id, quoting its line
    CURRENCY_FROM_NOTE = "currency_from_note"  # the currency a note also accepts, quoting the note
    IBAN_FROM_DIRECT_DEBIT = "iban_from_direct_debit"  # the customer's IBAN, quoting the direct-debit line
    CUT_INVOICE_NUMBER = "cut_invoice_number"  # the number without its last character, quote cut alike
    CUT_DATE = "cut_date"  # 4.05.2026 read out of 24.05.2026 (2026-05-04), quoting the cut text
    LONG_S = "long_s"  # an 's' of the supplier's name as U+017F LONG S, quote unchanged
    KELVIN_SIGN = "kelvin_sign"  # a 'K' or 'k' of the supplier's name as U+212A KELVIN SIGN, quote unchanged
    FULLWIDTH_TOTAL = "fullwidth_total"  # the total's digits as fullwidth digits (U+FF10..), quote unchanged
    TAX_RATE_CHANGED = "tax_rate_changed"  # another common tax rate, amount and quote unchanged
    DESCRIPTIONS_SWAPPED = "descriptions_swapped"  # two lines' descriptions swapped, evidence unchanged
    DESCRIPTION_INVENTED = "description_invented"  # a line's description printed nowhere, evidence unchanged


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
# What a document prints that is not extracted, read only to make the mistakes that take it for a value.
_ORDER = re.compile(
    rf"^(?:Order no\.?|Order number|Bestellnummer|N° de commande) ?:? ?{_NUMBER_VALUE}$", re.I
)
_TAX_ID = re.compile(
    r"^(?:VAT ID|VAT Reg\. No\.|UID|EIN|CVR|NIP|USt-IdNr\.|Steuernummer|N° TVA|Tax ID) (?P<value>.+?)"
    r"(?: MWST)?$"
)
_DIRECT_DEBIT = re.compile(
    r"^(?:Direct debit|Einzug per Lastschrift|Prélèvement)\b.*\b(?:your IBAN|Ihr Konto|votre compte)"
    r" (?P<value>(?-i:[A-Z]{2}\d{2}(?: ?[A-Z0-9]){11,30}))$",
    re.I,
)
_CURRENCY_NOTE = re.compile(
    r"^(?:Payable also in|Auch zahlbar in|Payable aussi en) (?P<value>(?-i:[A-Z]{3}))\b", re.I
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
        _MISTAKES[mistake](answer, _Document(pages, lines))
    return answer


def mistake_applies(mistake: Mistake, pages: Sequence[str]) -> bool:
    """Whether ``mistake`` changes the answer to ``pages``; one that needs a feature the document does not
    print (an order line, say) leaves the answer truthful."""
    return extract(list(pages), mistake=mistake) != extract(list(pages))


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


@dataclass(frozen=True)
class _Document:
    """The pages a mistake is made on, for the mistakes that take a value from elsewhere on them."""

    pages: list[str]
    lines: list[_Line]

    def first(self, pattern: re.Pattern[str]) -> tuple[_Line, re.Match[str]] | None:
        return next(((line, m) for line in self.lines if (m := pattern.search(line.text))), None)

    def prints(self, text: str) -> bool:
        return text.lower() in " ".join(line.text for line in self.lines).lower()

    def quote(self, line: _Line) -> dict[str, Any]:
        return _span(self.pages, line, line)


def _arithmetic(answer: dict[str, Any], _: _Document) -> None:
    items = answer["line_items"]
    if items:
        items[-1]["amount"] = str(Decimal(items[-1]["amount"]) + MISTAKE)
    elif answer["subtotal"] is not None:
        answer["subtotal"] = str(Decimal(answer["subtotal"]) + MISTAKE)


def _invented_iban(answer: dict[str, Any], _: _Document) -> None:
    answer["iban"] = INVENTED_IBAN if answer["iban"] != INVENTED_IBAN else "DE89370400440532013000"


def _swapped_quantity_price(answer: dict[str, Any], _: _Document) -> None:
    for item in answer["line_items"]:
        quantity, price = Decimal(item["quantity"]), Decimal(item["unit_price"])
        if quantity != price:
            item["quantity"], item["unit_price"] = format(price.normalize(), "f"), f"{quantity:.2f}"
            return


def _dropped_line(answer: dict[str, Any], _: _Document) -> None:
    if answer["line_items"]:
        answer["line_items"].pop(len(answer["line_items"]) // 2)


def _wrong_currency(answer: dict[str, Any], _: _Document) -> None:
    answer["currency"] = "USD" if answer["currency"] != "USD" else "EUR"


def _evidence_elsewhere(answer: dict[str, Any], _: _Document) -> None:
    answer["total_evidence"] = answer["subtotal_evidence"]


def _evidence_invented(answer: dict[str, Any], _: _Document) -> None:
    if answer["total"] is None:
        return
    total = str(Decimal(answer["total"]) + Decimal("10.00"))
    answer["total"] = total
    page = answer["total_evidence"]["page"] if answer["total_evidence"] else 1
    answer["total_evidence"] = {"page": page, "quote": f"Total amount payable {total}"}


def _printed_date(evidence: dict[str, Any] | None, pattern: re.Pattern[str]) -> dict[str, Any] | None:
    """The date alone out of a date's evidence ("Due: 13.04.2026" -> "13.04.2026"): part of a real line,
    without the label that would give the mistake away."""
    match = pattern.search(" ".join(evidence["quote"].split())) if evidence else None
    return {"page": evidence["page"], "quote": match["value"]} if evidence and match else None


def _issue_date_is_due_date(answer: dict[str, Any], _: _Document) -> None:
    due = _printed_date(answer["due_date_evidence"], _DUE_DATE)
    if due is not None and answer["due_date"] != answer["issue_date"]:
        answer["issue_date"], answer["issue_date_evidence"] = answer["due_date"], due


def _dates_swapped(answer: dict[str, Any], _: _Document) -> None:
    issued = _printed_date(answer["issue_date_evidence"], _ISSUE_DATE)
    due = _printed_date(answer["due_date_evidence"], _DUE_DATE)
    if issued is not None and due is not None and answer["due_date"] != answer["issue_date"]:
        answer["issue_date"], answer["due_date"] = answer["due_date"], answer["issue_date"]
        answer["issue_date_evidence"], answer["due_date_evidence"] = due, issued


def _invoice_number_from_order(answer: dict[str, Any], document: _Document) -> None:
    if found := document.first(_ORDER):
        line, match = found
        answer["invoice_number"], answer["invoice_number_evidence"] = match["value"], document.quote(line)


def _invoice_number_from_tax_id(answer: dict[str, Any], document: _Document) -> None:
    if found := document.first(_TAX_ID):
        line, match = found
        answer["invoice_number"], answer["invoice_number_evidence"] = match["value"], document.quote(line)


def _currency_from_note(answer: dict[str, Any], document: _Document) -> None:
    found = document.first(_CURRENCY_NOTE)
    if found and found[1]["value"] != answer["currency"]:
        line, match = found
        answer["currency"], answer["currency_evidence"] = match["value"], document.quote(line)


def _iban_from_direct_debit(answer: dict[str, Any], document: _Document) -> None:
    if found := document.first(_DIRECT_DEBIT):
        line, match = found
        answer["iban"], answer["iban_evidence"] = match["value"].replace(" ", ""), document.quote(line)


def _cut_invoice_number(answer: dict[str, Any], _: _Document) -> None:
    number, evidence = answer["invoice_number"], answer["invoice_number_evidence"]
    if number and len(number) > 1 and evidence and evidence["quote"].endswith(number):
        answer["invoice_number"] = number[:-1]
        answer["invoice_number_evidence"] = {**evidence, "quote": evidence["quote"][:-1]}


def _cut_date(answer: dict[str, Any], _: _Document) -> None:
    for field, pattern in (("issue_date", _ISSUE_DATE), ("due_date", _DUE_DATE)):
        printed = _printed_date(answer[f"{field}_evidence"], pattern)
        if printed is None:
            continue
        text = printed["quote"]
        # A day of two digits whose second digit alone is still a day: 24 -> 4, not 30 -> 0.
        if re.fullmatch(r"[1-3][1-9]\.\d{2}\.\d{4}", text) and (value := parse_date(text[1:])):
            answer[field] = value
            answer[f"{field}_evidence"] = {**printed, "quote": text[1:]}
            return


def _supplier_name_with(answer: dict[str, Any], letters: str, replacement: str) -> None:
    """The supplier's name with the first of ``letters`` found (in that order of preference) replaced."""
    supplier = answer["supplier"]
    name = supplier["name"] if supplier else ""
    at = next((i for letter in letters if (i := name.find(letter)) >= 0), None)
    if supplier and at is not None:
        answer["supplier"] = {**supplier, "name": name[:at] + replacement + name[at + 1 :]}


def _long_s(answer: dict[str, Any], _: _Document) -> None:
    _supplier_name_with(answer, "s", "\N{LATIN SMALL LETTER LONG S}")


def _kelvin_sign(answer: dict[str, Any], _: _Document) -> None:
    _supplier_name_with(answer, "Kk", "\N{KELVIN SIGN}")


def _fullwidth_total(answer: dict[str, Any], _: _Document) -> None:
    if answer["total"] is not None:
        answer["total"] = answer["total"].translate(FULLWIDTH_DIGITS)


def _tax_rate_changed(answer: dict[str, Any], _: _Document) -> None:
    rate = answer["tax"]["rate_percent"]
    if rate is not None:
        answer["tax"]["rate_percent"] = next(r for r in COMMON_RATES if r != rate)


def _descriptions_swapped(answer: dict[str, Any], _: _Document) -> None:
    items = answer["line_items"]
    if len(items) >= 2 and items[0]["description"] != items[1]["description"]:
        items[0]["description"], items[1]["description"] = items[1]["description"], items[0]["description"]


def _description_invented(answer: dict[str, Any], document: _Document) -> None:
    invented = next((d for d in INVENTED_DESCRIPTIONS if not document.prints(d)), None)
    if answer["line_items"] and invented is not None:
        answer["line_items"][-1]["description"] = invented


_MISTAKES: dict[Mistake, Callable[[dict[str, Any], _Document], None]] = {
    Mistake.ARITHMETIC: _arithmetic,
    Mistake.INVENTED_IBAN: _invented_iban,
    Mistake.SWAPPED_QUANTITY_PRICE: _swapped_quantity_price,
    Mistake.DROPPED_LINE: _dropped_line,
    Mistake.WRONG_CURRENCY: _wrong_currency,
    Mistake.EVIDENCE_ELSEWHERE: _evidence_elsewhere,
    Mistake.EVIDENCE_INVENTED: _evidence_invented,
    Mistake.ISSUE_DATE_IS_DUE_DATE: _issue_date_is_due_date,
    Mistake.DATES_SWAPPED: _dates_swapped,
    Mistake.INVOICE_NUMBER_FROM_ORDER: _invoice_number_from_order,
    Mistake.INVOICE_NUMBER_FROM_TAX_ID: _invoice_number_from_tax_id,
    Mistake.CURRENCY_FROM_NOTE: _currency_from_note,
    Mistake.IBAN_FROM_DIRECT_DEBIT: _iban_from_direct_debit,
    Mistake.CUT_INVOICE_NUMBER: _cut_invoice_number,
    Mistake.CUT_DATE: _cut_date,
    Mistake.LONG_S: _long_s,
    Mistake.KELVIN_SIGN: _kelvin_sign,
    Mistake.FULLWIDTH_TOTAL: _fullwidth_total,
    Mistake.TAX_RATE_CHANGED: _tax_rate_changed,
    Mistake.DESCRIPTIONS_SWAPPED: _descriptions_swapped,
    Mistake.DESCRIPTION_INVENTED: _description_invented,
}
