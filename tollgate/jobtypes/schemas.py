"""The JSON schema a model is sent for a job type's output: strict, as OpenAI's structured outputs want it,
and with evidence that cannot be left out."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel


def _strict_json_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """OpenAI's strict structured outputs want every property required (optional ones nullable) and no
    extra properties, at every level; pydantic's schema already forbids extras, so list the properties."""
    if schema.get("type") == "object" and "properties" in schema:
        schema["required"] = list(schema["properties"])
        schema["additionalProperties"] = False
    for value in schema.values():
        if isinstance(value, dict):
            _strict_json_schema(value)
        elif isinstance(value, list):
            for item in value:
                if isinstance(item, dict):
                    _strict_json_schema(item)
    return schema


_EVIDENCE_REF = {"$ref": "#/$defs/Evidence"}


def _evidence_always_given(schema: dict[str, Any]) -> dict[str, Any]:
    """In the schema sent to the model, evidence is an object, never null. Given the choice, a small model
    writes null for every piece of evidence (seen with Qwen2.5-Coder 1.5B: every result failed the policy
    for want of it). The parsed model still admits null, which the policy reports as missing evidence;
    evidence given for a value that is null is ignored."""
    for value in list(schema.values()):
        if isinstance(value, dict):
            if value.get("anyOf") == [_EVIDENCE_REF, {"type": "null"}]:
                del value["anyOf"]
                value.pop("default", None)
                value.update(_EVIDENCE_REF)
            else:
                _evidence_always_given(value)
    return schema


def sent_json_schema(model: type[BaseModel]) -> str:
    """The response format's schema for ``model``, as JSON text with sorted keys (callers cache it)."""
    return json.dumps(_evidence_always_given(_strict_json_schema(model.model_json_schema())), sort_keys=True)
