"""Evidence resolved against the OCR text, for every job type: each quote becomes a character span of the
page it names.

A quote matches its page with runs of whitespace counted as one space (OCR spacing is not the value), as
whole tokens, and nothing else relaxed. The span is in the page as stored, so a reviewer can be shown the text
around it. From policy validation.v3 on, a quote is only a hint: the policies find values themselves
(``tollgate.jobtypes.printed``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from tollgate.jobtypes.printed import Span, find_whole, text_pattern

__all__ = ["MAX_PAGES", "Evidence", "ResolvedEvidence", "Span", "context", "locate", "pages_containing"]

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


def locate(evidence: Evidence, pages: Sequence[str]) -> Span | None:
    """Where the quote is printed on its page as whole tokens (the first place), or None when it is not
    there: a quote that starts or ends inside a token ("0001" of "00014") is not printed."""
    if not 1 <= evidence.page <= len(pages):
        return None
    pattern = text_pattern(evidence.quote)
    if pattern is None:
        return None
    return next(find_whole(pattern, pages[evidence.page - 1], evidence.page), None)


def pages_containing(quote: str, pages: Sequence[str]) -> list[int]:
    """The pages (from 1) a quote does occur on, to say where misplaced evidence really is."""
    pattern = text_pattern(quote)
    if pattern is None:
        return []
    return [
        n for n, page in enumerate(pages, start=1) if next(find_whole(pattern, page, n), None) is not None
    ]


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
