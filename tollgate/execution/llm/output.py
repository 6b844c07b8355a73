"""What a provider pool can be asked for (its structured-output capability), and the one strict reading of
its answer that every capability shares: exactly one JSON object, nothing around it but whitespace.

Kept free of heavy imports: the settings model names the capability, and every entrypoint imports settings.
"""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Any

# JSON's own whitespace (RFC 8259); Python's str.strip() would also take other characters.
_WHITESPACE = " \t\n\r"
_FENCE = "```"
_SNIPPET = 40
_JSON_TYPES: dict[type, str] = {
    list: "array",
    str: "string",
    int: "number",
    float: "number",
    bool: "boolean",
    type(None): "null",
}


class StructuredOutput(StrEnum):
    """How the provider is told the answer's shape."""

    # OpenAI: response_format json_schema, strict; decoding is constrained to the schema.
    JSON_SCHEMA = "json_schema"
    # llama.cpp-style servers: response_format json_object with the schema beside it; also constrained.
    JSON_OBJECT = "json_object"
    # No response_format: the schema is in the system prompt and the model is only asked to follow it.
    PROMPT = "prompt"


class InvalidOutput(ValueError):
    """The content is not exactly one JSON object; the message says what is wrong with it."""


def _snippet(text: str) -> str:
    return repr(text[:_SNIPPET] + ("..." if len(text) > _SNIPPET else ""))


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # json.loads keeps the last of two equal keys; which of two totals the model meant is not ours to pick.
    keys = [key for key, _ in pairs]
    duplicates = sorted({key for key in keys if keys.count(key) > 1})
    if duplicates:
        raise InvalidOutput(f"the JSON object repeats the key(s) {', '.join(map(repr, duplicates))}")
    return dict(pairs)


_DECODER = json.JSONDecoder(object_pairs_hook=_unique_keys)


def single_json_object(content: str) -> dict[str, Any]:
    """The one JSON object ``content`` consists of. Nothing is repaired: a code fence, text before or after
    the object, a second object or a value that is not an object raises ``InvalidOutput`` saying which."""
    text = content.strip(_WHITESPACE)
    if not text:
        raise InvalidOutput("the answer is empty")
    if text.startswith(_FENCE):
        raise InvalidOutput("the answer is wrapped in a code fence, not a bare JSON object")
    if not text.startswith("{"):
        try:
            value = json.loads(text)
        except ValueError:
            before = _snippet(text)
            raise InvalidOutput(f"the answer starts with text before the JSON object: {before}") from None
        raise InvalidOutput(f"the answer is a JSON {_JSON_TYPES.get(type(value), 'value')}, not an object")
    try:
        value, end = _DECODER.raw_decode(text)
    except json.JSONDecodeError as error:
        raise InvalidOutput(f"the answer is not valid JSON: {error}") from None
    rest = text[end:].lstrip(_WHITESPACE)
    if rest.startswith("{"):
        raise InvalidOutput("the answer holds more than one JSON object")
    if rest:
        raise InvalidOutput(f"the answer has text after the JSON object: {_snippet(rest)}")
    assert isinstance(value, dict)  # it started with "{" and decoded whole
    return value
