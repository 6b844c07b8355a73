"""The simulated provider's readers for the summary and classification job types: deterministic answers in
each type's output shape, read from the printed text only, so evidence always quotes a printed line.

Told to, each makes the mistake its policy exists to catch: a summary over its word limit, a fact whose
evidence is printed nowhere, a label outside the job's set; and the adversary's subtler ones, whose evidence
still quotes a printed line (``DocumentMistake``, ``document_mistake_applies``).
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
# Names a fact may gain in place of a printed one: the first that the document does not print is taken.
INVENTED_NAMES = ("Hartmann", "Lindqvist", "Moreau", "Okafor")


class DocumentMistake(StrEnum):
    OVER_WORD_LIMIT = "over_word_limit"  # a summary longer than the job allows
    UNSUPPORTED_FACT = "unsupported_fact"  # a key fact quoting text printed nowhere
    LABEL_OUTSIDE_SET = "label_outside_set"  # a label the job did not name
    # The adversary; each needs what it names (a fact with a number, a fact with a capitalised name, another
    # label whose cues the evidence line does not print) and leaves the answer truthful without it.
    FACT_NUMBER_CHANGED = "fact_number_changed"  # a fact's number differs from its quote, quote unchanged
    FACT_NAME_CHANGED = "fact_name_changed"  # a fact's capitalised name printed nowhere, quote unchanged
    SUMMARY_NUMBER_INVENTED = "summary_number_invented"  # the summary gains a number printed nowhere
    LABEL_WITHOUT_CUE = "label_without_cue"  # another label of the set, whose cues the evidence lacks


CLASSIFICATION_MISTAKES = frozenset({DocumentMistake.LABEL_OUTSIDE_SET, DocumentMistake.LABEL_WITHOUT_CUE})


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
    facts: list[dict[str, Any]] = [
        {"fact": line.text, "evidence": {"page": line.page, "quote": line.text}}
        for line in lines
        if len(line.text.split()) >= 3
    ][:max_facts]
    if mistake is DocumentMistake.UNSUPPORTED_FACT:
        invented = {"fact": INVENTED_QUOTE, "evidence": {"page": 1, "quote": INVENTED_QUOTE}}
        facts = [*facts[: max_facts - 1], invented]
    printed = " ".join([line.text for line in lines] + [fact["fact"] for fact in facts])
    if mistake is DocumentMistake.FACT_NUMBER_CHANGED:
        _change_fact_number(facts)
    if mistake is DocumentMistake.FACT_NAME_CHANGED:
        _change_fact_name(facts, printed)
    if mistake is DocumentMistake.SUMMARY_NUMBER_INVENTED:
        words = _with_invented_number(words, max_words, printed)
    return {"summary": " ".join(words), "key_facts": facts}


_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")


def _change_fact_number(facts: list[dict[str, Any]]) -> None:
    """The first number of the first fact that has one, its last digit moved on (2026 -> 2027) to a number
    its quote does not print: "Page 1 of 2" becomes "Page 3 of 2", not "Page 2 of 2"."""
    for fact in facts:
        if match := _NUMBER.search(fact["fact"]):
            number, quoted = match.group(), set(_NUMBER.findall(fact["evidence"]["quote"]))
            others = (number[:-1] + str((int(number[-1]) + step) % 10) for step in range(1, 10))
            if changed := next((other for other in others if other not in quoted), None):
                fact["fact"] = fact["fact"][: match.start()] + changed + fact["fact"][match.end() :]
                return


def _change_fact_name(facts: list[dict[str, Any]], printed: str) -> None:
    """The first capitalised word after a fact's first word becomes a name the document does not print."""
    name = next((n for n in INVENTED_NAMES if n.lower() not in printed.lower()), None)
    for fact in facts:
        match = re.search(r"(?<=\s)[A-Z][a-z]{2,}\b", fact["fact"])
        if match and name is not None:
            fact["fact"] = fact["fact"][: match.start()] + name + fact["fact"][match.end() :]
            return


def _with_invented_number(words: list[str], max_words: int, printed: str) -> list[str]:
    """The summary ends on a number that neither the document nor a fact prints, within the word limit."""
    digits = re.sub(r"\D", "", printed)
    number = next(str(n) for n in range(4817, 10**6, 1009) if str(n) not in digits)
    addition = ["Total", f"{number}."]
    return [*words[: max(max_words - len(addition), 0)], *addition]


def _label_guide(prompt: str) -> dict[str, Any]:
    """The tenant's ``Label guide: {json}`` (label -> {"description", "cues"}), empty when not given."""
    at = prompt.find("Label guide: ")
    if at < 0:
        return {}
    guide, _ = json.JSONDecoder().raw_decode(prompt, at + len("Label guide: "))
    return guide if isinstance(guide, dict) else {}


def classify(pages: Sequence[str], prompt: str, mistake: DocumentMistake | None = None) -> dict[str, Any]:
    """The label whose cues the text prints most often (the first label on a tie), with the first line
    that prints one of them as evidence. A label's cues are the ones the label guide gives, else the words
    of its name."""
    found = re.search(r"Labels: (\[.*?\])", prompt)
    labels: list[str] = json.loads(found.group(1)) if found else []
    guide = _label_guide(prompt)
    lines = _printed_lines(pages)
    text = " ".join(line.text for line in lines).lower()

    def cues(label: str) -> list[str]:
        given = (guide.get(label) or {}).get("cues") or []
        if given:
            return [cue.lower() for cue in given if cue.strip()]
        return [w for w in re.split(r"[_.-]", label) if w]

    def score(label: str) -> int:
        return sum(len(re.findall(rf"\b{re.escape(cue)}", text)) for cue in cues(label))

    def prints_cue(line: _PrintedLine, label: str) -> bool:
        return any(cue in line.text.lower() for cue in cues(label))

    label = max(labels, key=score) if labels else OUTSIDE_LABEL
    evidence_line = next(
        (line for line in lines if prints_cue(line, label)),
        lines[0] if lines else _PrintedLine(1, "(empty)"),
    )
    if mistake is DocumentMistake.LABEL_OUTSIDE_SET:
        label = OUTSIDE_LABEL
    if mistake is DocumentMistake.LABEL_WITHOUT_CUE:
        label = next(
            (other for other in labels if other != label and not prints_cue(evidence_line, other)), label
        )
    return {"label": label, "evidence": {"page": evidence_line.page, "quote": evidence_line.text}}


def document_mistake_applies(mistake: DocumentMistake, pages: Sequence[str], prompt: str) -> bool:
    """Whether ``mistake`` changes the answer to this document and prompt; one that needs what the document
    does not have (a fact with a number, say) leaves the answer truthful."""
    reader = classify if mistake in CLASSIFICATION_MISTAKES else summarize
    return reader(pages, prompt, mistake) != reader(pages, prompt)
