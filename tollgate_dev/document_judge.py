"""Whether a model's summary or label is right, judged against the document alone: the benchmark's truth for
the job types beside invoice extraction, independent of any validation policy.

A label is right when it is the document's true label. A summary is right when it invents nothing a reader
could check: every number and date in its text and in each key fact is a value the document prints
(numbers as decimals in any common format, "1,250.00" = "1.250,00" = "1250"; dates as dates,
"01.04.2026" = "1 April 2026" = "2026-04-01"; references such as "PO-4471" as printed, separators aside),
the numbers and dates of one fact are all printed together on one line of the document (a fact that joins
the amount of one line to the date of another is a claim the document does not make), and every
capitalised name in a fact, other than the first word of a sentence, is a word the document prints; and it
keeps to the tenant's limits (words, facts).
The model's own quotes play no part: a true fact with a sloppy quote is still true.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import date
from decimal import Decimal
from itertools import chain

_MONTH_WORDS = {
    1: ("january", "jan", "januar", "jänner", "janvier", "janv"),
    2: ("february", "feb", "februar", "février", "fevrier", "févr"),
    3: ("march", "mar", "märz", "maerz", "mars"),
    4: ("april", "apr", "avril", "avr"),
    5: ("may", "mai"),
    6: ("june", "jun", "juni", "juin"),
    7: ("july", "jul", "juli", "juillet", "juil"),
    8: ("august", "aug", "août", "aout"),
    9: ("september", "sep", "sept", "septembre"),
    10: ("october", "oct", "oktober", "okt", "octobre"),
    11: ("november", "nov", "novembre"),
    12: ("december", "dec", "dezember", "dez", "décembre", "decembre", "déc"),
}
MONTHS = {word: month for month, words in _MONTH_WORDS.items() for word in words}
_MONTH = "(" + "|".join(sorted(map(re.escape, MONTHS), key=len, reverse=True)) + r")\.?"
_WEEKDAY_WORDS = (
    "monday tuesday wednesday thursday friday saturday sunday mon tue wed thu fri sat sun "
    "montag dienstag mittwoch donnerstag freitag samstag sonntag "
    "lundi mardi mercredi jeudi vendredi samedi dimanche"
)
WEEKDAYS = frozenset(_WEEKDAY_WORDS.split(" "))
# Capitalised words that are not names: dates are judged as dates, a currency's code is how a reader writes
# its symbol, and a title is how a reader names a person the document names without one.
NOT_NAMES = frozenset(
    {*MONTHS, *WEEKDAYS, "eur", "usd", "gbp", "chf", "sek", "dkk", "nok", "pln", "czk", "jpy", "cad", "aud"}
    | {"i", "mr", "mrs", "ms", "dr", "prof", "herr", "frau", "m", "mme", "mlle"}
)

_ORDINAL = r"(?:st|nd|rd|th|er|e|\.)?"
_DATE_PATTERNS = (
    # 2026-04-01
    ("ymd", re.compile(r"(?<![\w./-])(\d{4})-(\d{1,2})-(\d{1,2})(?![\w/-]|\.\d)")),
    # 01.04.2026, 01/04/2026, 1-4-26 (day first, or month first where a slash or dash allows it)
    ("numeric", re.compile(r"(?<![\w.,/-])(\d{1,2})([./-])(\d{1,2})\2(\d{4}|\d{2})(?![\w]|[./-]\d)")),
    # 1 April 2026, 1. April 2026, 1er avril 2026, 1st of April, 2026
    ("dmy", re.compile(rf"(?<![\w.])(\d{{1,2}}){_ORDINAL}\s+(?:of\s+)?{_MONTH},?\s+(\d{{4}})(?!\d)", re.I)),
    # April 1, 2026, April 1st 2026
    ("mdy", re.compile(rf"(?<![\w]){_MONTH}\s+(\d{{1,2}}){_ORDINAL},?\s+(\d{{4}})(?!\d)", re.I)),
)
_MONTH_YEAR = re.compile(rf"(?<![\w]){_MONTH}\s+(\d{{4}})(?!\d)", re.I)
# A day of a month without its year: "3 May", "May 3rd".
_DAY_MONTH = re.compile(rf"(?<![\w.])(\d{{1,2}}){_ORDINAL}\s+(?:of\s+)?{_MONTH}(?![\w])", re.I)
_MONTH_DAY = re.compile(rf"(?<![\w]){_MONTH}\s+(\d{{1,2}})(?:st|nd|rd|th)?(?![\w])", re.I)
_TIME = re.compile(r"(?<![\d:])\d{1,2}:\d{2}(?![\d:])")
# A reference: letters and digits mixed in one token ("A4", "B2461"), or parts joined by - or /.
_CODE = re.compile(r"(?<![\w])[^\W_]+(?:[-/][^\W_]+)*(?![\w])")
# Thousands or decimal separators: point, comma, apostrophe (also typographic), no-break and thin space.
_SEPARATORS = ".,'\N{RIGHT SINGLE QUOTATION MARK}\N{NO-BREAK SPACE}\N{NARROW NO-BREAK SPACE}"
_NUMBER = re.compile(rf"(?<![\d])\d+(?:[{_SEPARATORS}]\d+)*(?:st|nd|rd|th|er|e)?(?![\d])")
_SEPARATOR = re.compile(f"[{_SEPARATORS}]")
# Words as names are compared: "Rhône-Alpes" and "Brightwater's" are read in parts.
_WORD = re.compile(r"[^\W\d_]+")
Reader = Callable[[re.Match[str]], "Claim | None"]


# ------------------------------------------------------------------------------------------ reading values


def number_readings(token: str) -> frozenset[Decimal]:
    """Every value a printed number can mean: "1,250" is 1250 (en) or 1.25 (de); "1.250,00" is 1250;
    "4250.00" is 4250. Empty when no common format reads it ("1.2.3")."""
    token = re.sub(r"(?:st|nd|rd|th|er|e)$", "", token)
    groups = _SEPARATOR.split(token)
    separators = _SEPARATOR.findall(token)
    if not separators:
        return frozenset({Decimal(token)})
    readings: set[Decimal] = set()
    head_ok = 1 <= len(groups[0]) <= 3
    # Every separator groups thousands.
    if len(set(separators)) == 1 and head_ok and all(len(g) == 3 for g in groups[1:]):
        readings.add(Decimal("".join(groups)))
    # The last separator is the decimal point; any before it group thousands, with another character.
    last = separators[-1]
    if last in ".,":
        before = separators[:-1]
        if not before:
            readings.add(Decimal(f"{groups[0]}.{groups[1]}"))
        elif (
            len(set(before)) == 1 and before[0] != last and head_ok and all(len(g) == 3 for g in groups[1:-1])
        ):
            readings.add(Decimal(f"{''.join(groups[:-1])}.{groups[-1]}"))
    return frozenset(readings)


def _year(text: str) -> int:
    year = int(text)
    return year + 2000 if year < 100 else year


def _valid(year: int, month: int, day: int) -> date | None:
    try:
        return date(year, month, day)
    except ValueError:
        return None


def _date_readings(style: str, match: re.Match[str]) -> frozenset[date]:
    if style == "ymd":
        found = [_valid(int(match[1]), int(match[2]), int(match[3]))]
    elif style == "numeric":
        first, separator, second, year = int(match[1]), match[2], int(match[3]), _year(match[4])
        found = [_valid(year, second, first)]
        if separator != ".":  # 04/01/2026 is April 1 in the United States
            found.append(_valid(year, first, second))
    elif style == "dmy":
        found = [_valid(int(match[3]), MONTHS[match[2].lower()], int(match[1]))]
    else:
        found = [_valid(int(match[3]), MONTHS[match[1].lower()], int(match[2]))]
    return frozenset(d for d in found if d is not None)


@dataclass(frozen=True)
class Claim:
    """One value a text states: what kind, as written, and every value it can mean."""

    kind: str  # number | date | month (of a year) | day (of a month) | code (a reference, a time)
    text: str
    readings: frozenset[object]


def _code_key(text: str) -> str:
    return re.sub(r"[\s./-]", "", text).casefold()


def _is_code(token: str) -> bool:
    """ "PO-4471", "A4", "B2461", "2026-0815" are references; "24-month" is a number with its unit."""
    parts = re.split(r"[-/]", token)
    with_digits = [p for p in parts if any(c.isdecimal() for c in p)]
    if not with_digits:
        return False
    mixed = any(any(c.isdecimal() for c in p) and any(c.isalpha() for c in p) for p in parts)
    if mixed:
        return not re.fullmatch(r"\d+(?:st|nd|rd|th|er|e)", token)  # an ordinal is a number
    lettered = [p for p in parts if p.isalpha()]
    return len(with_digits) > 1 or any(p.isupper() for p in lettered)


def _date_reader(style: str) -> Reader:
    def read(match: re.Match[str]) -> Claim | None:
        readings = _date_readings(style, match)
        return Claim("date", match[0], frozenset(readings)) if readings else None

    return read


def _month_year(match: re.Match[str]) -> Claim:
    return Claim("month", match[0], frozenset({(int(match[2]), MONTHS[match[1].lower()])}))


def _day_month(match: re.Match[str]) -> Claim | None:
    day, month = int(match[1]), MONTHS[match[2].lower()]
    return Claim("day", match[0], frozenset({(month, day)})) if _valid(2024, month, day) else None


def _month_day(match: re.Match[str]) -> Claim | None:
    day, month = int(match[2]), MONTHS[match[1].lower()]
    return Claim("day", match[0], frozenset({(month, day)})) if _valid(2024, month, day) else None


def _code(match: re.Match[str]) -> Claim:
    return Claim("code", match[0], frozenset({_code_key(match[0])}))


def read_values(text: str) -> list[Claim]:
    """The numbers, dates, months and references ``text`` states, in that order of precedence (a date's
    digits are not read again as numbers, nor a reference's)."""
    claims: list[Claim] = []

    def take(text: str, pattern: re.Pattern[str], read: Reader) -> str:
        """Each match ``read`` makes a claim of is taken out of the text, so no later pattern reads it."""

        def replace(match: re.Match[str]) -> str:
            claim = read(match)
            if claim is None:
                return match[0]
            claims.append(claim)
            return " " * len(match[0])

        return pattern.sub(replace, text)

    rest = text
    for style, pattern in _DATE_PATTERNS:
        rest = take(rest, pattern, _date_reader(style))
    rest = take(rest, _MONTH_YEAR, _month_year)
    rest = take(rest, _DAY_MONTH, _day_month)
    rest = take(rest, _MONTH_DAY, _month_day)
    rest = take(rest, _TIME, _code)
    rest = take(rest, _CODE, lambda m: _code(m) if _is_code(m[0]) else None)
    for match in _NUMBER.finditer(rest):
        readings = number_readings(match[0])
        if readings:
            claims.append(Claim("number", match[0], frozenset(readings)))
        else:  # "1.2.3": compared as printed
            claims.append(Claim("code", match[0], frozenset({_code_key(match[0])})))
    return claims


@dataclass
class _Printed:
    """What one line (or the whole document) prints, as the values a claim is compared with."""

    values: dict[str, set[object]] = field(
        default_factory=lambda: {"number": set(), "date": set(), "month": set(), "day": set(), "code": set()}
    )

    def add(self, claims: Iterable[Claim]) -> None:
        for claim in claims:
            self.values[claim.kind] |= claim.readings
            if claim.kind == "date":
                for day in claim.readings:
                    assert isinstance(day, date)
                    self.values["month"].add((day.year, day.month))
                    self.values["day"].add((day.month, day.day))
                    self.values["number"].add(Decimal(day.year))  # "in 2026"
            elif claim.kind == "code":
                # "PO 4471" reads the number of "PO-4471"
                self.values["number"] |= {Decimal(d) for d in re.findall(r"\d+", claim.text)}

    def holds(self, claim: Claim) -> bool:
        return bool(claim.readings & self.values[claim.kind])


# ------------------------------------------------------------------------------------------------- judging


@dataclass(frozen=True)
class SummaryJudgement:
    problems: tuple[str, ...]

    @property
    def correct(self) -> bool:
        return not self.problems


def _lines(pages: Sequence[str]) -> list[str]:
    return list(chain.from_iterable(page.splitlines() for page in pages))


# What may stand between a sentence's end and its first word: quotes, brackets, a bullet.
_OPENERS = (
    "\"'([*- \N{LEFT DOUBLE QUOTATION MARK}\N{LEFT SINGLE QUOTATION MARK}"
    "\N{LEFT-POINTING DOUBLE ANGLE QUOTATION MARK}\N{EN DASH}\N{BULLET}"
)


def capitalised_names(text: str) -> list[str]:
    """The capitalised words of ``text`` a reader takes for names: not the first word of a sentence, not a
    month, a weekday or a currency code."""
    names = []
    for match in _WORD.finditer(text):
        word = match[0]
        if not word[0].isupper() or word.casefold() in NOT_NAMES:
            continue
        before = text[: match.start()].rstrip().rstrip(_OPENERS)
        if not before or before[-1] in ".!?":
            continue
        names.append(word)
    return names


def judge_summary(
    summary: str,
    facts: Sequence[str],
    pages: Sequence[str],
    *,
    max_words: int | None = None,
    max_facts: int | None = None,
) -> SummaryJudgement:
    """Whether a summary (its text and its key facts' texts) states only what the document prints, within
    the limits the tenant set (a summary longer than asked for is not what was asked for)."""
    limits: list[str] = []
    if max_words is not None and len(summary.split()) > max_words:
        limits.append(f"summary: {len(summary.split())} words, the tenant asked for at most {max_words}")
    if max_facts is not None and len(facts) > max_facts:
        limits.append(f"key_facts: {len(facts)} facts, the tenant asked for at most {max_facts}")
    return SummaryJudgement((*limits, *_invented(summary, facts, pages)))


def _invented(summary: str, facts: Sequence[str], pages: Sequence[str]) -> tuple[str, ...]:
    lines = _lines(pages)
    per_line = []
    document = _Printed()
    for line in lines:
        printed = _Printed()
        printed.add(read_values(line))
        per_line.append(printed)
        document.add(read_values(line))
    words = {w.casefold() for w in _WORD.findall("\n".join(pages))}
    problems: list[str] = []
    for claim in read_values(summary):
        if not document.holds(claim):
            problems.append(f"summary: {claim.text!r} is printed nowhere in the document")
    for index, fact in enumerate(facts):
        claims = read_values(fact)
        missing = [claim for claim in claims if not document.holds(claim)]
        problems += [f"key_facts[{index}]: {c.text!r} is printed nowhere in the document" for c in missing]
        if claims and not missing and not any(all(p.holds(c) for c in claims) for p in per_line):
            together = ", ".join(repr(c.text) for c in claims)
            problems.append(f"key_facts[{index}]: {together} are not printed together on any one line")
        for name in capitalised_names(fact):
            if name.casefold() not in words:
                problems.append(f"key_facts[{index}]: the name {name!r} is printed nowhere in the document")
    return tuple(problems)


def judge_classification(label: str | None, truth_label: str) -> bool:
    """A label is right when it is the document's one true label."""
    return label == truth_label
