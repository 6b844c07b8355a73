"""Policy ``classification.v2``: the label is one of the job's, and its evidence, printed in the document,
carries one of that label's cues.

A label inside the allowed set is not enough: a model can name any of them and quote any real line. So the
quote must be printed (whole tokens, case aside; on the page it names, or else where it is) and must print
one of the label's cues: the tenant's guide's, or else the label's own words, and not as the citation of
another document ("Invoice INV-42892" in a reminder shows an invoice exists, not that this is one; a title
in capitals, "ORDER No. 2026-774", is the document's own).
``classification.v1`` only located the quote; its results keep their version.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence

from tollgate.jobtypes.base import TenantPolicy, ValidationReport
from tollgate.jobtypes.document_classification.schema import ClassificationOptions, DocumentClassification
from tollgate.jobtypes.printed import Label, Located, PrintedDocument, Span, locate_quote

POLICY_VERSION = "classification.v2"
# Every reason code this policy gives (a test holds it to the policy's code): what `?reason=` filters on.
REASON_CODES = frozenset(
    {"evidence_missing", "evidence_not_found", "label_not_allowed", "label_not_evidenced"}
)
# A cue this short must be a whole word ("po" is not "Postal"); a longer one may start a longer word
# ("agreement" in "agreements").
WHOLE_WORD_BELOW = 4
# What follows a cue that names another document rather than this one: the rest of its word, perhaps a
# number's label, then a reference with digits in it.
_CITATION = re.compile(
    r"[^\W_]*[ \t]*(?:(?:no|nr|n°|nº|number|nummer|num|#)\.?[ \t]*:?[ \t]*)?[^\s,;]*[0-9]", re.IGNORECASE
)


def validate_classification(
    answer: DocumentClassification, pages: Sequence[str], options: ClassificationOptions, policy: TenantPolicy
) -> ValidationReport:
    del policy  # the label set is the job's own
    report = ValidationReport(POLICY_VERSION)
    allowed = answer.label in options.labels
    if not allowed:
        report.fail("label_not_allowed", "label", f"{answer.label!r} is not one of the job's labels")
    if answer.evidence is None:
        report.fail("evidence_missing", "label", "no evidence given")
        return report
    document = PrintedDocument(pages)
    parts = locate_quote(document, answer.evidence.quote, answer.evidence.page)
    if not parts:
        quote = " ".join(answer.evidence.quote.split())[:120]
        report.fail("evidence_not_found", "label", f"the quote {quote!r} is printed nowhere in the document")
        return report
    if not allowed:
        return report
    cues = options.cues(answer.label)
    found = next(((part, cue) for part in parts if (cue := _first_cue(document, part, cues))), None)
    if found is None:
        listed = ", ".join(repr(c) for c in cues)
        report.fail(
            "label_not_evidenced",
            "label",
            f"the evidence prints none of the cues of {answer.label!r} ({listed})",
        )
        return report
    span, cue = found
    report.located["label"] = Located("label", span, cue)
    return report


def _first_cue(document: PrintedDocument, span: Span, cues: Sequence[str]) -> Label | None:
    """The first cue the quoted span prints, as a label of the span (where it is). A cue that cites another
    document in running text ("Invoice INV-42892 of 2026-09-11 is unpaid") shows that such a document
    exists, not that this one is one: it does not count, unless printed in capitals, as a title is."""
    text = document.page(span.page).text
    for cue in cues:
        words = r"\s+".join(re.escape(word) for word in cue.split())
        end = r"(?![^\W_])" if len(cue) < WHOLE_WORD_BELOW else ""
        pattern = re.compile(rf"(?<![^\W_]){words}{end}", re.IGNORECASE)
        for found in pattern.finditer(text, span.start, span.end):
            # Case aside, but no look-alikes: Python's case folding takes a Kelvin sign for a K.
            if unicodedata.normalize("NFKC", found.group()) != found.group():
                continue
            if not found.group().isupper() and _CITATION.match(text, found.end()):
                continue  # a title in capitals may carry its own number ("ORDER No. 2026-774")
            return Label("cue", Span(span.page, found.start(), found.end()), found.group())
    return None
