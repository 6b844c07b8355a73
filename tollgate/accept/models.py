"""The public shapes of the acceptance API: what tenants send and what they get back."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from enum import StrEnum
from typing import Annotated, Any, Literal
from uuid import UUID

from pydantic import BaseModel, Field, StringConstraints

from tollgate.core.documents import DocumentReference, InlineDocument
from tollgate.core.job_states import JobState
from tollgate.core.models import NO_NUL, Strict
from tollgate.core.tiers import ServiceTier

SCHEMA_VERSIONS = ("invoice.v1",)


class ModelPolicy(StrEnum):
    AUTO = "auto"
    SMALL = "small"
    LARGE = "large"


class ExtractionOptions(Strict):
    """Options that change the result, so they are part of the request's identity."""

    language_hint: Annotated[str, StringConstraints(pattern=r"^[a-z]{2}$")] | None = None
    currency_hint: Annotated[str, StringConstraints(pattern=r"^[A-Z]{3}$")] | None = None


def _key_rule_on_every_key(schema: dict[str, Any]) -> None:
    """pydantic states a rule on dict keys as patternProperties, which leaves every other key unconstrained;
    the rule holds for every key (propertyNames) and the value rule for every value."""
    ((pattern, values),) = schema.pop("patternProperties").items()
    schema["propertyNames"] = {**schema.get("propertyNames", {}), "pattern": pattern}
    schema["additionalProperties"] = values


class CreateJobRequest(Strict):
    job_type: Literal["invoice_extraction"] = "invoice_extraction"
    document: InlineDocument | DocumentReference
    schema_version: Literal["invoice.v1"] = "invoice.v1"
    model_policy: ModelPolicy = ModelPolicy.AUTO
    options: ExtractionOptions = ExtractionOptions()
    # Strict: a value of another JSON type is refused, never coerced (false is no priority, "600" no number).
    priority: int = Field(
        default=5, ge=0, le=9, strict=True, description="0 runs last, 9 first; not part of identity."
    )
    deadline_seconds: int | None = Field(
        default=None, ge=60, strict=True, description="Seconds from acceptance by which the job must finish."
    )
    # Like priority, it says when and by whom the job runs, never what its result is: not part of identity.
    service_tier: ServiceTier = Field(
        default="normal",
        description="Which worker service runs the job and which share of the provider budget it draws on: "
        "`high` (reserved capacity, for work someone waits for), `normal`, or `batch` (what is left). "
        "Not part of identity.",
    )
    metadata: dict[
        Annotated[str, StringConstraints(max_length=64, pattern=NO_NUL)],
        Annotated[str, StringConstraints(max_length=512, pattern=NO_NUL)],
    ] = Field(
        default_factory=dict,
        max_length=20,
        description="Free labels such as a filename; not part of identity.",
        json_schema_extra=_key_rule_on_every_key,
    )


class DocumentView(BaseModel):
    document_id: UUID
    sha256: str
    size_bytes: int
    page_count: int


class JobLinks(BaseModel):
    self: str
    result: str
    cancel: str


class JobView(BaseModel):
    job_id: UUID
    job_type: str
    state: JobState
    state_version: int
    schema_version: str
    model_policy: str
    priority: int
    service_tier: ServiceTier
    attempt: int
    max_attempts: int
    document: DocumentView
    metadata: dict[str, str]
    deadline_at: datetime
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None
    last_error: dict[str, object] | None
    links: JobLinks


class JobPage(BaseModel):
    items: list[JobView]
    next_cursor: str | None = Field(description="Pass as ?cursor= to get the next page; null at the end.")


class ResultReview(BaseModel):
    """The reviewer's decision that accepted this version."""

    decision: Literal["approve", "correct"]
    reviewer: str
    note: str
    decided_at: datetime


class JobResultView(BaseModel):
    """A SUCCEEDED job's accepted result: the model's (version 1) when it passed validation, or the version a
    reviewer accepted (2): approved as it was, or corrected and re-validated."""

    job_id: UUID
    state: JobState
    version: int = Field(description="1: the model's result; 2: the version a reviewer accepted.")
    policy_version: str = Field(description="The validation policy that judged this version.")
    result: dict[str, object]
    review_reasons: list[dict[str, object]] = Field(
        description="Empty, except for an approved version: the reasons the reviewer overrode."
    )
    review: ResultReview | None = Field(description="Null for the model's own result.")
    created_at: datetime


class AttemptView(BaseModel):
    """One attempt at a job: operational detail, behind the ``ops:read`` scope."""

    attempt: int
    started_at: datetime
    finished_at: datetime | None
    outcome: str | None = Field(
        description="ok, transient, refused, lease_expired, released, …; null while running."
    )
    model: str | None
    input_tokens: int | None
    output_tokens: int | None
    cost_usd: Decimal | None
    latency_ms: int | None
    error: dict[str, object] | None


class AttemptList(BaseModel):
    job_id: UUID
    attempts: list[AttemptView]


class Accepted(BaseModel):
    job: JobView
    replayed: bool
