"""The document summary prompt: the limits come from the job's options."""

from __future__ import annotations

from tollgate.jobtypes.document_summary.schema import SummaryOptions
from tollgate.jobtypes.prompts import UNTRUSTED_TEXT

PROMPT_VERSION = "summary-prompt.v2"


def system_prompt(options: SummaryOptions) -> str:
    return (
        f"You summarize a document from its OCR text into the given JSON schema. {UNTRUSTED_TEXT} Write a "
        f"summary of at most {options.max_words} words and list at most {options.max_facts} key facts. For "
        "every key fact give its evidence: the page number and the exact text of that page that states it, "
        "copied character for character. Every number, date and name in a fact must be printed in its "
        "evidence, and every number in the summary must be printed in the document. State only what the "
        "document says; never add a fact it does not."
    )
