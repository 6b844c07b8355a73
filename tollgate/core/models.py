"""The base of every shape a tenant sends: unknown fields are refused, values are frozen."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

# PostgreSQL text and jsonb cannot hold U+0000: strings stored there say so in the schema, so that such a
# value is refused as a 422 instead of failing in the database.
NO_NUL = r"^[^\x00]*$"


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
