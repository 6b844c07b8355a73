"""The summary a model writes and the options a tenant sets; its policy is ``policy.py`` (summary.v2).

A summary is free text, so each key fact carries evidence (a page and a quote) that the policy reads the
fact against.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from tollgate.core.models import Strict
from tollgate.jobtypes.evidence import Evidence

SCHEMA_VERSION = "summary.v1"
SCHEMA_NAME = "document_summary_v1"
MAX_FACTS = 20

LanguageHint = Annotated[str, StringConstraints(pattern=r"^[a-z]{2}$")]


class SummaryOptions(Strict):
    """Options of a document_summary job; they change the result, so they are part of its identity."""

    max_words: int = Field(
        default=150, ge=20, le=1000, strict=True, description="Most words the summary has."
    )
    max_facts: int = Field(
        default=5, ge=1, le=MAX_FACTS, strict=True, description="Most key facts the summary lists."
    )
    language_hint: LanguageHint | None = Field(default=None, description="ISO 639-1 code of the document.")


class KeyFact(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    fact: str = Field(min_length=1, max_length=400, description="One fact the document states.")
    evidence: Evidence | None = Field(description="Where the document states it.")


class DocumentSummary(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    summary: str = Field(min_length=1, max_length=8000)
    key_facts: list[KeyFact] = Field(max_length=MAX_FACTS)


def word_count(text: str) -> int:
    return len(text.split())


def evidence_fields(summary: DocumentSummary) -> Iterator[tuple[str, Evidence | None]]:
    for index, fact in enumerate(summary.key_facts):
        yield f"key_facts[{index}]", fact.evidence
