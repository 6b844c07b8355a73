"""What a page prints, as the validation policies read it: lines, whole tokens, and the labels that govern
values.

A value is *printed* where the page has its exact characters (runs of whitespace count as one space, nothing
else is relaxed: no case, look-alike or compatibility folding) as whole tokens: the match neither starts nor
ends inside a token ("0001" is not printed in "00014", "4.05.2026" not in "24.05.2026"). A value is
*governed* by the label before it on its line, with nothing but punctuation and the field's own glue
(a currency code before an amount, a rate before a tax) between them; a value with no label before it on its
line is governed by a line of labels right above (the label in its column, or the only one). The policies
accept a value only where a label of its own field governs it, so a wrong value quoted from a real line
("Due", "Order no.", a customer's direct-debit line) is caught.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

# Characters that join two alphanumerics into one token ("GB-2026-00014", "24.05.2026", "1'150.00").
JOINERS = frozenset("-./,'\u2019_")


def _alnum(text: str, at: int) -> bool:
    return 0 <= at < len(text) and text[at].isalnum()


def whole_token(text: str, start: int, end: int) -> bool:
    """Whether ``text[start:end]`` starts and ends at token boundaries."""
    if start >= end:
        return False
    before, after = start - 1, end
    if _alnum(text, before) and text[start].isalnum():
        return False
    if (
        0 <= before < len(text)
        and text[before] in JOINERS
        and _alnum(text, before - 1)
        and _alnum(text, start)
    ):
        return False
    if _alnum(text, after) and text[end - 1].isalnum():
        return False
    return not (
        after < len(text) and text[after] in JOINERS and _alnum(text, after + 1) and _alnum(text, end - 1)
    )


@dataclass(frozen=True)
class Span:
    page: int  # counting from 1, as evidence names pages
    start: int  # character offsets into the stored page text
    end: int

    def as_dict(self) -> dict[str, int]:
        return {"page": self.page, "start": self.start, "end": self.end}

    def within(self, other: Span) -> bool:
        return self.page == other.page and other.start <= self.start and self.end <= other.end


@dataclass(frozen=True)
class Line:
    page: int
    number: int  # index of the line on its page, from 0
    start: int
    end: int  # offset of the line break (or the page's end)


@dataclass(frozen=True)
class Label:
    """A label printed on a page: the phrase as printed, where, and the field the lexicon says it names."""

    field: str
    span: Span
    text: str

    def as_dict(self) -> dict[str, object]:
        return {"field": self.field, "text": self.text, **self.span.as_dict()}


@dataclass(frozen=True)
class Located:
    """Where the policy found a value: its span on the page and the label that names it there (None for a
    value that needs no label, such as a supplier heading its letterhead)."""

    field: str
    span: Span
    label: Label | None

    def as_dict(self, pages: Sequence[str]) -> dict[str, object]:
        return {
            "field": self.field,
            **self.span.as_dict(),
            "text": pages[self.span.page - 1][self.span.start : self.span.end],
            "label": self.label.as_dict() if self.label else None,
        }


class Lexicon:
    """Label phrases (lower case) to the field each names, compiled into one matcher: case-insensitive,
    whole words, the longest phrase first at each place."""

    def __init__(self, phrases: Mapping[str, str]) -> None:
        self.phrases = dict(phrases)
        alternatives = sorted(phrases, key=len, reverse=True)
        self._pattern = re.compile(
            r"(?<!\w)(?:" + "|".join(self._phrase_pattern(p) for p in alternatives) + r")(?![\w])",
            re.IGNORECASE,
        )

    @staticmethod
    def _phrase_pattern(phrase: str) -> str:
        words = [re.escape(word) for word in phrase.split()]
        # Words of a label may be separated by OCR's extra spaces, never by a line break; an abbreviation's
        # point belongs to the label ("Invoice no.").
        return r"[ \t]+".join(words) + (r"\.?" if not phrase.endswith(".") else "")

    def find(self, text: str, start: int, end: int) -> Iterator[tuple[int, int, str]]:
        """(start, end, field) of each label in ``text[start:end]``, left to right."""
        for match in self._pattern.finditer(text, start, end):
            phrase = " ".join(match.group().lower().split())
            field = self.phrases.get(phrase) or self.phrases[phrase.removesuffix(".")]
            yield match.start(), match.end(), field


# What may stand between a label and its value besides whitespace and punctuation: the field's glue.
PUNCTUATION = re.compile(r"[\s:#.,;=*()\[\]/\u2013\u2014-]*")


def text_pattern(
    value: str, *, across_lines: bool = True, ignore_case: bool = False
) -> re.Pattern[str] | None:
    """``value``'s exact characters with whitespace runs as one space (a line break may stand for a space
    when ``across_lines``; letters of either case with ``ignore_case``); None for whitespace only."""
    words = value.split()
    if not words:
        return None
    gap = r"\s+" if across_lines else r"[ \t]+"
    return re.compile(gap.join(re.escape(word) for word in words), re.IGNORECASE if ignore_case else 0)


def find_whole(pattern: re.Pattern[str], text: str, page: int) -> Iterator[Span]:
    """Every whole-token match of ``pattern`` in one page's ``text``, overlapping ones included."""
    at = 0
    while (match := pattern.search(text, at)) is not None:
        if match.end() > match.start() and whole_token(text, match.start(), match.end()):
            yield Span(page, match.start(), match.end())
        at = match.start() + 1


class Page:
    def __init__(self, number: int, text: str) -> None:
        self.number = number
        self.text = text
        self.lines: list[Line] = []
        offset = 0
        for index, raw in enumerate(text.split("\n")):
            self.lines.append(Line(number, index, offset, offset + len(raw)))
            offset += len(raw) + 1
        self._starts = [line.start for line in self.lines]

    def line_at(self, offset: int) -> Line:
        low, high = 0, len(self._starts) - 1
        while low < high:
            middle = (low + high + 1) // 2
            if self._starts[middle] <= offset:
                low = middle
            else:
                high = middle - 1
        return self.lines[low]

    def line_text(self, line: Line) -> str:
        return self.text[line.start : line.end]


class PrintedDocument:
    """A document's pages as a reader scans them. Built once per validation; label positions are found once
    per page and lexicon."""

    def __init__(self, pages: Sequence[str]) -> None:
        self.pages = tuple(Page(number, text) for number, text in enumerate(pages, start=1))
        self._labels: dict[tuple[int, int, int], list[Label]] = {}

    def page(self, number: int) -> Page:
        return self.pages[number - 1]

    def text(self, span: Span) -> str:
        return self.page(span.page).text[span.start : span.end]

    # --------------------------------------------------------------------------------------- finding values

    def find_text(self, value: str, *, across_lines: bool = True) -> list[Span]:
        """Every place a page prints ``value``'s exact characters as whole tokens (see ``text_pattern``)."""
        pattern = text_pattern(value, across_lines=across_lines)
        return self.find_pattern(pattern) if pattern is not None else []

    def find_maximal(self, pattern: re.Pattern[str]) -> list[Span]:
        """The non-overlapping matches of ``pattern`` that are whole tokens: for a pattern of maximal runs
        (numbers, dates), a run cut out of a longer token is no match."""
        return [
            Span(page.number, match.start(), match.end())
            for page in self.pages
            for match in pattern.finditer(page.text)
            if whole_token(page.text, match.start(), match.end())
        ]

    def find_pattern(
        self, pattern: re.Pattern[str], accept: Callable[[Span], bool] | None = None
    ) -> list[Span]:
        """Every whole-token match of ``pattern`` (overlapping matches included) that ``accept`` takes."""
        return [
            span
            for page in self.pages
            for span in find_whole(pattern, page.text, page.number)
            if accept is None or accept(span)
        ]

    # -------------------------------------------------------------------------------------------- labels

    def labels_on(self, line: Line, lexicon: Lexicon) -> list[Label]:
        """The labels printed on ``line``, left to right (found once per line and lexicon)."""
        key = (id(lexicon), line.page, line.number)
        found = self._labels.get(key)
        if found is None:
            text = self.page(line.page).text
            found = [
                Label(field, Span(line.page, start, end), text[start:end])
                for start, end, field in lexicon.find(text, line.start, line.end)
            ]
            self._labels[key] = found
        return found

    def governing_label(
        self, span: Span, lexicon: Lexicon, glue: re.Pattern[str] | None = None
    ) -> Label | None:
        """The label that names the value at ``span``: the last label before it on its line when only
        punctuation and ``glue`` stand between them. With no label before it on its line, a line of labels
        right above names it: the label in its column, or the only label of that line when nothing but glue
        stands before the value on its own line (a label wrapped above its amount)."""
        page = self.page(span.page)
        line = page.line_at(span.start)
        before = [label for label in self.labels_on(line, lexicon) if label.span.end <= span.start]
        if before:
            label = before[-1]
            return label if self._only_glue(page.text[label.span.end : span.start], glue) else None
        if line.number == 0:
            return None
        above = page.lines[line.number - 1]
        labels = self.labels_on(above, lexicon)
        if not labels or not self.only_labels(above, labels):
            return None
        column = (span.start - line.start, span.end - line.start)
        in_column = [
            label
            for label in labels
            if label.span.start - above.start < column[1] and column[0] < label.span.end - above.start
        ]
        if len(in_column) == 1:
            return in_column[0]
        if len(labels) == 1 and self._only_glue(page.text[line.start : span.start], glue):
            return labels[0]
        return None

    def only_labels(self, line: Line, labels: Iterable[Label]) -> bool:
        """Whether ``line`` prints nothing but ``labels`` (its own) and punctuation: a header or a heading."""
        return self._only_glue(self._without_labels(self.page(line.page).text, line, labels), None)

    def line_fields(self, span: Span, lexicon: Lexicon) -> set[str]:
        """The fields of every label printed on the line of ``span``."""
        line = self.page(span.page).line_at(span.start)
        return {label.field for label in self.labels_on(line, lexicon)}

    @staticmethod
    def _only_glue(text: str, glue: re.Pattern[str] | None) -> bool:
        if glue is not None:
            text = glue.sub(" ", text)
        return PUNCTUATION.fullmatch(text) is not None

    @staticmethod
    def _without_labels(text: str, line: Line, labels: Iterable[Label]) -> str:
        parts, at = [], line.start
        for label in labels:
            parts.append(text[at : label.span.start])
            at = label.span.end
        parts.append(text[at : line.end])
        return " ".join(parts)

    # ------------------------------------------------------------------------------------------- helpers

    def line_of(self, span: Span) -> Line:
        return self.page(span.page).line_at(span.start)


def locate_quote(document: PrintedDocument, quote: str, page: int) -> list[Span]:
    """Where a quote (a summary's fact, a classification's evidence) is printed as whole tokens, case aside:
    on the page the evidence names, else the first other page that prints it (a wrong page number does not
    make a printed quote unprinted). A quote of several lines that is not printed as a whole (a line
    dropped or merged) is the lines of it that are, each located alone; empty when none is."""
    whole = _first_printed(document, quote, page)
    if whole is not None:
        return [whole]
    parts = [_first_printed(document, line, page) for line in quote.splitlines() if _substantial(line)]
    return [span for span in parts if span is not None] if len(parts) > 1 else []


def _first_printed(document: PrintedDocument, text: str, page: int) -> Span | None:
    pattern = text_pattern(text, ignore_case=True)
    if pattern is None:
        return None
    spans = ordered_by_hint(document.find_pattern(pattern), None, page)
    return spans[0] if spans else None


def _substantial(line: str) -> bool:
    """A line of a quote worth locating alone: three letters or digits at least (not a stray "1.")."""
    return sum(c.isalnum() for c in line) >= 3


def ordered_by_hint(spans: Sequence[Span], hint: Span | None, hint_page: int | None) -> list[Span]:
    """Candidates in the order the policy tries them: inside the evidence the model quoted first, then on
    the page it named, then the rest in reading order. The model's evidence narrows; it never decides."""

    def rank(span: Span) -> tuple[int, int, int]:
        if hint is not None and span.within(hint):
            first = 0
        elif hint_page is not None and span.page == hint_page:
            first = 1
        else:
            first = 2
        return first, span.page, span.start

    return sorted(spans, key=rank)
