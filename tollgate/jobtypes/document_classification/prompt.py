"""The document classification prompt: the label set comes from the job's options."""

from __future__ import annotations

import json

from tollgate.jobtypes.document_classification.schema import ClassificationOptions
from tollgate.jobtypes.prompts import UNTRUSTED_TEXT

PROMPT_VERSION = "classification-prompt.v1"


def system_prompt(options: ClassificationOptions) -> str:
    return (
        "You classify a document from its OCR text into exactly one label of this list, given as JSON: "
        f"Labels: {json.dumps(options.labels)}. {UNTRUSTED_TEXT} Answer with the label that fits best, and "
        "as evidence the page number and the exact text of that page that shows it fits, copied character "
        "for character. Never answer a label outside the list."
    )
