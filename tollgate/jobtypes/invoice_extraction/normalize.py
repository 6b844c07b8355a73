"""How printed values read: money in any of the common formats, dates, quantities, IBANs and names.

The validation policy uses these to decide whether a quote from the document says the extracted value, so
each reading is strict: a token that could be read two ways is not read at all.
"""

from __future__ import annotations

import re
import unicodedata
from datetime import date
from decimal import Decimal, InvalidOperation

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
DATE_PATTERN = (
    r"\d{4}-\d{2}-\d{2}|\d{1,2}\.\d{1,2}\.\d{4}|\d{1,2}-\d{1,2}-\d{4}|\d{1,2}/\d{1,2}/\d{4}"
    r"|\d{1,2} [A-Za-z]+ \d{4}|[A-Za-z]+ \d{1,2}, \d{4}"
)
_DATES = re.compile(rf"(?<![\w.-])(?:{DATE_PATTERN})(?![\w-])")
# A printed number: digits with thousands separators and a decimal mark in any of the common styles.
_NUMBER = re.compile(r"(?<![\w.,'])-?\d(?:[\d.,']*\d)?(?![\w'])")
# Currency symbols that name exactly one currency ("$" does not: it is printed for a dozen).
CURRENCY_SYMBOLS = {"€": "EUR", "£": "GBP", "¥": "JPY", "₹": "INR", "₩": "KRW", "₺": "TRY", "zł": "PLN"}


def normalize_space(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


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


def number_readings(token: str) -> frozenset[Decimal]:
    """Every value a printed number can stand for: "1,5" is 1.5, "1.150,00" is 1150.00, "12" is 12, and
    "1,500" is 1500 or 1.5 (both kept: the policy asks whether the value is among them)."""
    readings: set[Decimal] = set()
    money = normalize_money(token)
    if money is not None:
        readings.add(Decimal(money))
    if re.fullmatch(r"-?\d+", token):
        readings.add(Decimal(token))
    elif re.fullmatch(r"-?\d+[.,]\d{1,4}", token):
        readings.add(Decimal(token.replace(",", ".")))
    if re.fullmatch(r"-?\d{1,3}(?:[,.']\d{3})+", token):
        readings.add(Decimal(re.sub(r"[,.']", "", token)))
    return frozenset(readings)


def numbers_in(text: str) -> list[frozenset[Decimal]]:
    """The readings of each printed number in ``text``, in order."""
    return [r for token in _NUMBER.findall(text) if (r := number_readings(token))]


def decimal_or_none(value: str | None) -> Decimal | None:
    if value is None:
        return None
    try:
        return Decimal(value)
    except InvalidOperation:
        return None


def parse_date(text: str) -> str | None:
    """A printed date as ISO 8601, from the unambiguous formats; None when it is not a real date.
    Numeric day-first formats (14.03.2026, 14-03-2026, 14/03/2026) are read day first."""
    parts: tuple[int, int, int] | None = None
    if m := re.fullmatch(r"(\d{4})-(\d{2})-(\d{2})", text):
        parts = (int(m[1]), int(m[2]), int(m[3]))
    elif m := re.fullmatch(r"(\d{1,2})[./-](\d{1,2})[./-](\d{4})", text):
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


def dates_in(text: str) -> set[str]:
    return {iso for token in _DATES.findall(normalize_space(text)) if (iso := parse_date(token))}


def compact_iban(text: str) -> str:
    return re.sub(r"\s+", "", text).upper()


def currencies_in(text: str) -> set[str]:
    """ISO 4217 codes printed as words, and the currencies of unambiguous symbols."""
    codes = set(re.findall(r"(?<![A-Za-z])[A-Z]{3}(?![A-Za-z])", text))
    codes |= {code for symbol, code in CURRENCY_SYMBOLS.items() if symbol in text}
    return codes


def normalize_name(name: str) -> str:
    """Names compare without case, accents, punctuation or legal-form spacing differences."""
    decomposed = unicodedata.normalize("NFKD", name)
    stripped = "".join(c for c in decomposed if not unicodedata.combining(c))
    return re.sub(r"[^a-z0-9]+", " ", stripped.lower()).strip()
