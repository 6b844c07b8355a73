"""The invoice schema the model fills through structured outputs, parsed strictly.

Money is a decimal string with two places ("119.00"), never a float. Every value that reaches an ERP carries
its evidence: the page it is printed on and the exact text it was read from there. The policy resolves each
quote to a character span of that page and checks that the span says the value (validation.py), so an
invented value cannot carry made-up evidence. A field the model cannot read is null and lands in review;
nothing is guessed.
"""

from __future__ import annotations

import json
from decimal import Decimal
from functools import cache
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

SCHEMA_NAME = "invoice_extraction_v2"
# Pages a document may have (the acceptance limit); evidence cannot point past them.
MAX_PAGES = 1000

Money = Annotated[str, StringConstraints(pattern=r"^-?\d{1,12}\.\d{2}$")]
Quantity = Annotated[str, StringConstraints(pattern=r"^-?\d{1,9}(\.\d{1,4})?$")]
IsoDate = Annotated[str, StringConstraints(pattern=r"^\d{4}-\d{2}-\d{2}$")]
Quote = Annotated[str, StringConstraints(min_length=1, max_length=500)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Evidence(Strict):
    """Where a value is printed: a page of the document and the text copied from it."""

    page: int = Field(ge=1, le=MAX_PAGES, description="The page the value is printed on, counting from 1.")
    quote: Quote = Field(description="The text the value was read from, copied exactly from that page.")


class Supplier(Strict):
    name: str = Field(description="The supplier's legal name as printed.")
    evidence: Evidence | None


class LineItem(Strict):
    description: str
    quantity: Quantity
    unit_price: Money
    amount: Money
    evidence: Evidence | None = Field(description="The whole line as printed.")


class Tax(Strict):
    rate_percent: Annotated[str, StringConstraints(pattern=r"^\d{1,2}(\.\d{1,3})?$")] | None
    amount: Money | None
    evidence: Evidence | None


class Invoice(Strict):
    supplier: Supplier | None
    invoice_number: str | None
    invoice_number_evidence: Evidence | None
    issue_date: IsoDate | None
    issue_date_evidence: Evidence | None
    due_date: IsoDate | None
    due_date_evidence: Evidence | None
    currency: Annotated[str, StringConstraints(pattern=r"^[A-Z]{3}$")] | None
    currency_evidence: Evidence | None
    iban: Annotated[str, StringConstraints(pattern=r"^[A-Z]{2}[0-9A-Z]{13,32}$")] | None
    iban_evidence: Evidence | None
    line_items: list[LineItem]
    subtotal: Money | None
    subtotal_evidence: Evidence | None
    tax: Tax
    total: Money | None
    total_evidence: Evidence | None

    def money(self, value: str | None) -> Decimal | None:
        return Decimal(value) if value is not None else None


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


@cache
def invoice_json_schema() -> str:
    """The response format's schema, as JSON text (cached: it is sent with every request)."""
    schema = _evidence_always_given(_strict_json_schema(Invoice.model_json_schema()))
    return json.dumps(schema, sort_keys=True)


def response_format() -> dict[str, Any]:
    return {
        "type": "json_schema",
        "json_schema": {"name": SCHEMA_NAME, "strict": True, "schema": json.loads(invoice_json_schema())},
    }
