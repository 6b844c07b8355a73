"""Evidence resolved against the OCR text, for every job type: each quote becomes a character span of the
page it names.

A quote matches its page with runs of whitespace counted as one space (OCR spacing is not the value), and
nothing else relaxed. The span is in the page as stored, so a reviewer can be shown the text around it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

# Pages a document may have (the acceptance limit); evidence cannot point past them.
MAX_PAGES = 1000
Quote = Annotated[str, StringConstraints(min_length=1, max_length=500)]


class Evidence(BaseModel):
    """Where a value is printed: a page of the document and the text copied from it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    page: int = Field(ge=1, le=MAX_PAGES, description="The page the value is printed on, counting from 1.")
    quote: Quote = Field(description="The text the value was read from, copied exactly from that page.")


# Characters of page text shown on each side of a span, for a reviewer.
CONTEXT_CHARS = 160


@dataclass(frozen=True)
class Span:
    page: int  # counting from 1, as the evidence names it
    start: int  # character offsets into the stored page text
    end: int

    def as_dict(self) -> dict[str, int]:
        return {"page": self.page, "start": self.start, "end": self.end}


def _collapsed(text: str) -> tuple[str, list[int]]:
    """``text`` with whitespace runs as one space, and for each kept character its offset in ``text``."""
    chars: list[str] = []
    offsets: list[int] = []
    for match in re.finditer(r"\s+|\S+", text):
        if match.group().isspace():
            if chars and chars[-1] != " ":
                chars.append(" ")
                offsets.append(match.start())
        else:
            chars.extend(match.group())
            offsets.extend(range(match.start(), match.end()))
    return "".join(chars), offsets


def locate(evidence: Evidence, pages: Sequence[str]) -> Span | None:
    """Where the quote is printed on its page (the first place), or None when it is not there."""
    if not 1 <= evidence.page <= len(pages):
        return None
    quote = " ".join(evidence.quote.split())
    if not quote:
        return None
    text, offsets = _collapsed(pages[evidence.page - 1])
    at = text.find(quote)
    if at < 0:
        return None
    return Span(evidence.page, offsets[at], offsets[at + len(quote) - 1] + 1)


def pages_containing(quote: str, pages: Sequence[str]) -> list[int]:
    """The pages (from 1) a quote does occur on, to say where misplaced evidence really is."""
    wanted = " ".join(quote.split())
    return [n for n, page in enumerate(pages, start=1) if wanted and wanted in _collapsed(page)[0]]


def context(span: Span, pages: Sequence[str], chars: int = CONTEXT_CHARS) -> dict[str, str]:
    """The span's text with what is printed before and after it on its page."""
    page = pages[span.page - 1]
    return {
        "before": page[max(span.start - chars, 0) : span.start],
        "text": page[span.start : span.end],
        "after": page[span.end : span.end + chars],
    }


@dataclass(frozen=True)
class ResolvedEvidence:
    field: str
    evidence: Evidence
    span: Span | None  # None: the quote is not on the page it names

    def as_dict(self, pages: Sequence[str]) -> dict[str, object]:
        return {
            "field": self.field,
            "page": self.evidence.page,
            "quote": self.evidence.quote,
            "span": self.span.as_dict() if self.span else None,
            "context": context(self.span, pages) if self.span else None,
        }


def resolve_fields(
    fields: Iterable[tuple[str, Evidence | None]], pages: Sequence[str]
) -> dict[str, ResolvedEvidence]:
    """Each field's evidence with its span in the document; fields without evidence are absent."""
    return {
        name: ResolvedEvidence(name, evidence, locate(evidence, pages))
        for name, evidence in fields
        if evidence is not None
    }
