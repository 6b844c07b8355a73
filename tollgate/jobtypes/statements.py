"""What a sentence states that can be checked against print: its numbers, dates and names.

The summary policy asks whether a fact's figures, dates and names are printed in the text it quotes, so the
same reading is applied to both sides: a number is compared by every value it can stand for ("1.150,00",
"1,150.00" and "1150" are one amount), a date by the day it names ("2026-06-01", "1 June 2026", "1. Juni
2026"; "1 June" without a year matches that day of any year), a name as a whole word without case. Digits
of other scripts (fullwidth digits) are never read as numbers: they are compared as the characters they
are, so a page must print exactly them.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from datetime import date
from decimal import Decimal

from tollgate.jobtypes.invoice_extraction.normalize import number_readings, parse_date

# A printed date in the numeric formats and with an English month, as invoices print them (ASCII digits).
DATE_TOKEN = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}|[0-9]{1,2}\.[0-9]{1,2}\.[0-9]{4}|[0-9]{1,2}-[0-9]{1,2}-[0-9]{4}"
    r"|[0-9]{1,2}/[0-9]{1,2}/[0-9]{4}|[0-9]{1,2}[ \t]+[A-Za-z]+[ \t]+[0-9]{4}"
    r"|[A-Za-z]+[ \t]+[0-9]{1,2},[ \t]*[0-9]{4}"
)
# A number as any script writes it; its readings decide what it stands for.
_NUMBER = re.compile(r"(?<![^\W\d_])-?\d(?:[\d.,'\u2019]*\d)?")
_SENTENCE_BREAKS = frozenset(".!?:;\u2022\u2013\u2014-(\"'")
# A word of letters; letters run into digits ("7GR", "A4") make a code, which is read for its numbers.
_WORD = re.compile(r"(?<![^\W_])[^\W\d_]+(?:['\u2019-][^\W\d_]+)*(?![^\W_])")
_POSSESSIVE = re.compile(r"['\u2019]s$")
# Words that open a sentence with a capital without naming anything.
FUNCTION_WORDS = frozenset(
    re.findall(
        r"\S+",
        """
        a an the this that these those it its they their there here he she we you i in on at by for from with
        of to and or but as is are was were be been has have had will shall may must can could would should
        each every either neither both all any some no not if when while after before during since until
        per under over about between within without
        der die das ein eine einer dem den des und oder im in am an auf aus bei mit nach von vor zu zum zur es
        sie er wir ist sind war wird wurde hat haben für über unter
        le la les un une des du de et ou en au aux dans sur par pour avec sans il elle ils elles nous vous
        est sont a ont ce cette ces
        """,
    )
)
_MONTH_NAMES = {
    1: ("january", "jan", "januar", "jänner", "janvier", "janv"),
    2: ("february", "feb", "februar", "février", "févr"),
    3: ("march", "mar", "märz", "mars"),
    4: ("april", "apr", "avril", "avr"),
    5: ("may", "mai"),
    6: ("june", "jun", "juni", "juin"),
    7: ("july", "jul", "juli", "juillet", "juil"),
    8: ("august", "aug", "août"),
    9: ("september", "sep", "sept", "septembre"),
    10: ("october", "oct", "oktober", "okt", "octobre"),
    11: ("november", "nov", "novembre"),
    12: ("december", "dec", "dezember", "dez", "décembre", "déc"),
}
# A month's name in English, German or French, to its number.
MONTHS = {name: number for number, names in _MONTH_NAMES.items() for name in names}
WEEKDAYS = frozenset(
    re.findall(
        r"\S+",
        "monday tuesday wednesday thursday friday saturday sunday "
        "montag dienstag mittwoch donnerstag freitag samstag sonntag "
        "lundi mardi mercredi jeudi vendredi samedi dimanche",
    )
)
# Capitalised words that name nobody: months and weekdays are read as dates, a title comes with a name.
NOT_NAMES = frozenset({*MONTHS, *WEEKDAYS, "mr", "mrs", "ms", "dr", "prof", "herr", "frau", "mme", "mlle"})

_MONTH = "(?P<month>" + "|".join(sorted(map(re.escape, MONTHS), key=len, reverse=True)) + r")\.?"
_DAY = r"(?P<day>[0-9]{1,2})(?:st|nd|rd|th|er|e|\.)?"
_YEAR = r"(?P<year>[0-9]{4})"
_NUMERIC_DATE = re.compile(
    r"(?<![\w.,/-])(?:[0-9]{4}-[0-9]{2}-[0-9]{2}|[0-9]{1,2}([./-])[0-9]{1,2}\1[0-9]{4})(?![\w]|[./-][0-9])"
)
_DAY_MONTH_YEAR = re.compile(rf"(?<![\w.]){_DAY}\s+(?:of\s+)?{_MONTH},?\s+{_YEAR}(?![0-9])", re.IGNORECASE)
_MONTH_DAY_YEAR = re.compile(rf"(?<!\w){_MONTH}\s+{_DAY},?\s+{_YEAR}(?![0-9])", re.IGNORECASE)
_DAY_MONTH = re.compile(rf"(?<![\w.]){_DAY}\s+(?:of\s+)?{_MONTH}(?!\w)", re.IGNORECASE)
_MONTH_DAY = re.compile(rf"(?<!\w){_MONTH}\s+{_DAY}(?![\w.])", re.IGNORECASE)


def _iso(year: int, month: int, day: int) -> str | None:
    try:
        return date(year, month, day).isoformat()
    except ValueError:
        return None


def _numeric(match: re.Match[str]) -> str | None:
    return parse_date(match.group())


def _with_year(match: re.Match[str]) -> str | None:
    return _iso(int(match["year"]), MONTHS[match["month"].lower()], int(match["day"]))


def _without_year(match: re.Match[str]) -> str | None:
    if match["month"] in {"may", "mai", "mar"}:
        return None  # "may 3" is a verb before a number; only "May 3" is a date
    iso = _iso(2000, MONTHS[match["month"].lower()], int(match["day"]))  # a leap year: 29 February is a day
    return f"--{iso[5:]}" if iso else None


# Longest first: a date with its year, then a day and month without one.
_DATE_READERS: tuple[tuple[re.Pattern[str], Callable[[re.Match[str]], str | None]], ...] = (
    (_NUMERIC_DATE, _numeric),
    (_DAY_MONTH_YEAR, _with_year),
    (_MONTH_DAY_YEAR, _with_year),
    (_DAY_MONTH, _without_year),
    (_MONTH_DAY, _without_year),
)


def dates_in(text: str) -> dict[str, str]:
    """Each printed date of ``text`` (as printed) with the day it names: ISO ``YYYY-MM-DD``, or ``--MM-DD``
    for a day and month printed without their year ("1 June", "June 1st")."""
    found: dict[str, str] = {}
    taken: list[tuple[int, int]] = []
    for pattern, read in _DATE_READERS:
        for match in pattern.finditer(text):
            if any(start < match.end() and match.start() < end for start, end in taken):
                continue  # a part of a date already read ("1 June" of "1 June 2026")
            day = read(match)
            if day is not None:
                found[match.group()] = day
                taken.append((match.start(), match.end()))
    return found


def same_day(stated: str, printed: set[str]) -> bool:
    """Whether a stated day is among the printed ones; a day stated without its year matches any year's."""
    if stated.startswith("--"):
        return any(day.endswith(stated[1:]) for day in printed)
    return stated in printed


def number_tokens(text: str) -> list[tuple[str, frozenset[Decimal | str]]]:
    """Each number of ``text`` outside its dates, with every value it can stand for (the characters
    themselves for digits of another script)."""
    for token in sorted(dates_in(text), key=len, reverse=True):
        text = text.replace(token, " ")
    tokens = []
    for match in _NUMBER.finditer(text):
        token = match.group()
        readings: frozenset[Decimal | str] = (
            frozenset(number_readings(token)) if token.isascii() else frozenset({token})
        )
        tokens.append((token, readings or frozenset({token})))
    return tokens


def numbers_in(text: str) -> frozenset[Decimal | str]:
    """Every value any number of ``text`` can stand for."""
    return frozenset(reading for _, readings in number_tokens(text) for reading in readings)


def names_in(text: str) -> list[str]:
    """The capitalised words of ``text`` (names, as a summary states them), except months, weekdays and
    titles, and a word that only opens a sentence: one followed by a word in lower case ("Customer number
    is ...") is capitalised for the sentence, while one followed by a capitalised word starts a name
    ("Polder Techniek ..."). A possessive is read without its 's."""
    words = list(_WORD.finditer(text))
    names = []
    for index, match in enumerate(words):
        word = _POSSESSIVE.sub("", match.group())
        if not word[0].isupper() or len(word) < 2 or word.lower() in NOT_NAMES:
            continue  # a lone initial ("B.V.") names nothing by itself
        before = text[: match.start()].rstrip()
        if not before or before[-1] in _SENTENCE_BREAKS:
            following = words[index + 1].group() if index + 1 < len(words) else ""
            if word.lower() in FUNCTION_WORDS or following[:1].islower():
                continue
        names.append(word)
    return list(dict.fromkeys(names))


def prints_name(text: str, word: str, *, prefix: bool = False) -> bool:
    """Whether ``text`` prints ``word`` as a whole word (or, with ``prefix``, as the start of one). Case aside
    ("Notice" and "notice" are one word), but only for a word without look-alike characters: Python's
    case-insensitive matching would take the Kelvin sign for a K and a long s for an s."""
    end = "" if prefix else r"(?![^\W_])"
    pattern = rf"(?<![^\W_]){re.escape(word)}{end}"
    if unicodedata.normalize("NFKC", word) != word:
        return re.search(pattern, text) is not None
    return any(
        unicodedata.normalize("NFKC", found.group()) == found.group()
        for found in re.finditer(pattern, text, re.IGNORECASE)
    )
