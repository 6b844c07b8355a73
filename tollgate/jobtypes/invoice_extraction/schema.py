"""The invoice schema the model fills through structured outputs, parsed strictly.

Money is a decimal string with two places ("119.00"), never a float. Every value that reaches an ERP carries
its evidence: the page it is printed on and the text it was read from there. The policy (validation.py)
takes that evidence as a hint only: it finds each value on the page itself, under its own field's label, so
neither an invented value nor a real line quoted for the wrong field passes. A field the model cannot read
is null and lands in review; nothing is guessed.
"""

from __future__ import annotations

import json
from decimal import Decimal
from functools import cache
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from tollgate.jobtypes.evidence import MAX_PAGES, Evidence
from tollgate.jobtypes.schemas import sent_json_schema

__all__ = [
    "MAX_PAGES",
    "SCHEMA_NAME",
    "Evidence",
    "Invoice",
    "LineItem",
    "Supplier",
    "Tax",
    "invoice_json_schema",
]

SCHEMA_NAME = "invoice_extraction_v2"

Money = Annotated[str, StringConstraints(pattern=r"^-?\d{1,12}\.\d{2}$")]
Quantity = Annotated[str, StringConstraints(pattern=r"^-?\d{1,9}(\.\d{1,4})?$")]
IsoDate = Annotated[str, StringConstraints(pattern=r"^\d{4}-\d{2}-\d{2}$")]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


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


@cache
def invoice_json_schema() -> str:
    """The response format's schema, as JSON text (cached: it is sent with every request)."""
    return sent_json_schema(Invoice)


def response_format() -> dict[str, Any]:
    return {
        "type": "json_schema",
        "json_schema": {"name": SCHEMA_NAME, "strict": True, "schema": json.loads(invoice_json_schema())},
    }
