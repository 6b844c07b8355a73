"""The document classification prompt: the label set, and the tenant's guides when it gave them, come from
the job's options."""

from __future__ import annotations

import json

from tollgate.jobtypes.document_classification.schema import ClassificationOptions
from tollgate.jobtypes.prompts import UNTRUSTED_TEXT

PROMPT_VERSION = "classification-prompt.v2"


def system_prompt(options: ClassificationOptions) -> str:
    guides = ""
    if options.label_guides:
        guide = {
            label: {"description": g.description, "cues": list(g.cues)}
            for label, g in sorted(options.label_guides.items())
        }
        guides = (
            f" Label guide: {json.dumps(guide, ensure_ascii=False)}. A label's description says what it "
            "means; its evidence should print one of its cues."
        )
    return (
        "You classify a document from its OCR text into exactly one label of this list, given as JSON: "
        f"Labels: {json.dumps(options.labels)}.{guides} {UNTRUSTED_TEXT} Answer with the label that fits "
        "best, and as evidence the page number and the exact text of that page that shows it fits (its "
        "title, or a line that says what kind of document it is, not one that refers to another document), "
        "copied character for character. Never answer a label outside the list."
    )
