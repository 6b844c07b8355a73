"""The invoice extraction prompt: its system text and version; the delimiters and page markers around the
OCR text are every type's (``tollgate.jobtypes.prompts``)."""

from __future__ import annotations

from typing import Any

from tollgate.jobtypes.prompts import (
    DOCUMENT_CLOSE,
    DOCUMENT_OPEN,
    PROMPT_ONLY_SUFFIX_VERSION,
    UNTRUSTED_TEXT,
    document_messages,
    document_pages,
    prompt_only_messages,
)

__all__ = [
    "DOCUMENT_CLOSE",
    "DOCUMENT_OPEN",
    "PROMPT_ONLY_VERSION",
    "PROMPT_VERSION",
    "SYSTEM",
    "build_messages",
    "build_prompt_only_messages",
    "document_pages",
]

PROMPT_VERSION = "invoice-prompt.v2"
PROMPT_ONLY_VERSION = f"{PROMPT_VERSION}+{PROMPT_ONLY_SUFFIX_VERSION}"

SYSTEM = (
    f"You extract invoice data from OCR text into the given JSON schema. {UNTRUSTED_TEXT} Copy values "
    "exactly as printed; money has two decimals and dates are YYYY-MM-DD. For every value give its evidence: "
    "the page number and the exact text of that page the value was read from (for a line item, the whole "
    "printed line: description, quantity, unit price and amount). If a value is missing or unreadable, use "
    "null for the value, never a guess or a computed figure; its evidence is then ignored."
)


def build_messages(pages: tuple[str, ...] | list[str]) -> list[dict[str, Any]]:
    return document_messages(SYSTEM, pages)


def build_prompt_only_messages(pages: tuple[str, ...] | list[str], schema: str) -> list[dict[str, Any]]:
    return prompt_only_messages(SYSTEM, pages, schema)
