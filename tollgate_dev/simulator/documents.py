"""The simulated provider's readers for the summary and classification job types: deterministic answers in
each type's output shape, read from the printed text only, so evidence always quotes a printed line.

Told to, each makes the mistake its policy exists to catch: a summary over its word limit, a fact whose
evidence is printed nowhere, a label outside the job's set.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

# How the requests of each type are told apart: the title of the output schema they carry (in the response
# format, or written into the prompt when the provider takes none).
SUMMARY_TITLE = '"title": "DocumentSummary"'
CLASSIFICATION_TITLE = '"title": "DocumentClassification"'
INVENTED_QUOTE = "The parties agreed to a discount of 90 percent."
OUTSIDE_LABEL = "unlisted"


class DocumentMistake(StrEnum):
    OVER_WORD_LIMIT = "over_word_limit"  # a summary longer than the job allows
    UNSUPPORTED_FACT = "unsupported_fact"  # a key fact quoting text printed nowhere
    LABEL_OUTSIDE_SET = "label_outside_set"  # a label the job did not name


@dataclass(frozen=True)
class _PrintedLine:
    page: int
    text: str


def _printed_lines(pages: Sequence[str]) -> list[_PrintedLine]:
    return [
        _PrintedLine(number, line.strip())
        for number, page in enumerate(pages, start=1)
        for line in page.splitlines()
        if line.strip()
    ]


def _limit(prompt: str, pattern: str, default: int) -> int:
    found = re.search(pattern, prompt)
    return int(found.group(1)) if found else default


def summarize(pages: Sequence[str], prompt: str, mistake: DocumentMistake | None = None) -> dict[str, Any]:
    """The first printed lines as the summary (cut at the word limit the prompt states) and the first lines
    of three words or more as key facts, each quoting itself."""
    max_words = _limit(prompt, r"at most (\d+) words", 150)
    max_facts = _limit(prompt, r"at most (\d+) key facts", 5)
    lines = _printed_lines(pages)
    words = " ".join(line.text for line in lines).split() or ["(empty)"]
    if mistake is DocumentMistake.OVER_WORD_LIMIT:
        words = (words * (max_words // len(words) + 2))[: max_words + 10]
    else:
        words = words[:max_words]
    facts = [
        {"fact": line.text, "evidence": {"page": line.page, "quote": line.text}}
        for line in lines
        if len(line.text.split()) >= 3
    ][:max_facts]
    if mistake is DocumentMistake.UNSUPPORTED_FACT:
        invented = {"fact": INVENTED_QUOTE, "evidence": {"page": 1, "quote": INVENTED_QUOTE}}
        facts = [*facts[: max_facts - 1], invented]
    return {"summary": " ".join(words), "key_facts": facts}


def classify(pages: Sequence[str], prompt: str, mistake: DocumentMistake | None = None) -> dict[str, Any]:
    """The label whose words the text prints most often (the first label on a tie), with the first line
    that prints one of them as evidence."""
    found = re.search(r"Labels: (\[.*?\])", prompt)
    labels: list[str] = json.loads(found.group(1)) if found else []
    lines = _printed_lines(pages)
    text = " ".join(line.text for line in lines).lower()

    def words(label: str) -> list[str]:
        return [w for w in re.split(r"[_.-]", label) if w]

    def score(label: str) -> int:
        return sum(len(re.findall(rf"\b{re.escape(w)}", text)) for w in words(label))

    label = max(labels, key=score) if labels else OUTSIDE_LABEL
    evidence_line = next(
        (line for line in lines if any(w in line.text.lower() for w in words(label))),
        lines[0] if lines else _PrintedLine(1, "(empty)"),
    )
    if mistake is DocumentMistake.LABEL_OUTSIDE_SET:
        label = OUTSIDE_LABEL
    return {"label": label, "evidence": {"page": evidence_line.page, "quote": evidence_line.text}}
