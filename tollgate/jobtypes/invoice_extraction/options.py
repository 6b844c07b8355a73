"""Options of an invoice_extraction job: they change the result, so they are part of its identity."""

from __future__ import annotations

from typing import Annotated

from pydantic import StringConstraints

from tollgate.core.models import Strict


class InvoiceOptions(Strict):
    """Options of an invoice_extraction job; they change the result, so they are part of its identity."""

    language_hint: Annotated[str, StringConstraints(pattern=r"^[a-z]{2}$")] | None = None
    currency_hint: Annotated[str, StringConstraints(pattern=r"^[A-Z]{3}$")] | None = None
