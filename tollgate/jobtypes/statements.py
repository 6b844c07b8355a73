"""What a sentence states that can be checked against print: its numbers, dates and names.

The summary policy asks whether a fact's figures, dates and names are printed in the text it quotes, so the
same reading is applied to both sides: a number is compared by every value it can stand for ("1.150,00",
"1,150.00" and "1150" are one amount), a date by the day it names, a name as a whole word without case.
Digits of other scripts (fullwidth digits) are never read as numbers: they are compared as the characters they
are, so a page must print exactly them.
"""

from __future__ import annotations

import re
import unicodedata
from decimal import Decimal

from tollgate.jobtypes.invoice_extraction.normalize import number_readings, parse_date

# A printed date in the common formats (ASCII digits; a month by its English name).
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


def dates_in(text: str) -> dict[str, str]:
    """Each printed date of ``text`` (as printed) with the ISO day it names."""
    found: dict[str, str] = {}
    for match in DATE_TOKEN.finditer(text):
        iso = parse_date(" ".join(match.group().split()))
        if iso is not None:
            found[match.group()] = iso
    return found


def number_tokens(text: str) -> list[tuple[str, frozenset[Decimal | str]]]:
    """Each number of ``text`` outside its dates, with every value it can stand for (the characters
    themselves for digits of another script)."""
    for token in dates_in(text):
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
    """The capitalised words of ``text`` (names, as a summary states them), except a function word that
    only opens a sentence."""
    names = []
    for match in _WORD.finditer(text):
        word = match.group()
        if not word[0].isupper() or len(word) < 2:
            continue  # a lone initial ("B.V.") names nothing by itself
        before = text[: match.start()].rstrip()
        opening = not before or before[-1] in _SENTENCE_BREAKS
        if opening and word.lower() in FUNCTION_WORDS:
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
