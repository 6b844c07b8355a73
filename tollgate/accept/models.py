"""The public shapes of the acceptance API: what tenants send and what they get back."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from decimal import Decimal
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any, Literal, Union
from uuid import UUID

from pydantic import (
    BaseModel,
    Field,
    StringConstraints,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    field_validator,
)

from tollgate.core.documents import DocumentReference, InlineDocument
from tollgate.core.job_states import JobState
from tollgate.core.models import NO_NUL, Strict
from tollgate.core.tiers import ServiceTier
from tollgate.jobtypes.base import JobType
from tollgate.jobtypes.invoice_extraction.options import InvoiceOptions
from tollgate.jobtypes.registry import DEFAULT_JOB_TYPE, JOB_TYPES

if TYPE_CHECKING:
    JobOptions = BaseModel
else:
    # Each type's options model; the request's job_type says which one its options are read as.
    JobOptions = Union[tuple(t.options for t in JOB_TYPES.values())]  # noqa: UP007


class ModelPolicy(StrEnum):
    AUTO = "auto"
    SMALL = "small"
    LARGE = "large"


# The invoice type's options, by the name they had before there were other types.
ExtractionOptions = InvoiceOptions


def _key_rule_on_every_key(schema: dict[str, Any]) -> None:
    """pydantic states a rule on dict keys as patternProperties, which leaves every other key unconstrained;
    the rule holds for every key (propertyNames) and the value rule for every value."""
    ((pattern, values),) = schema.pop("patternProperties").items()
    schema["propertyNames"] = {**schema.get("propertyNames", {}), "pattern": pattern}
    schema["additionalProperties"] = values


class CreateJobRequest(Strict):
    job_type: str = Field(
        default=DEFAULT_JOB_TYPE,
        description="What to do with the document: "
        + "; ".join(f"`{t.name}`, {t.summary}" for t in JOB_TYPES.values()),
        json_schema_extra={"enum": list(JOB_TYPES)},
    )
    document: InlineDocument | DocumentReference
    schema_version: str | None = Field(
        default=None,
        validate_default=True,
        description="The result schema: "
        + ", ".join(f"`{t.schema_version}` for {t.name}" for t in JOB_TYPES.values())
        + " (the type's own when left out).",
    )
    model_policy: ModelPolicy = ModelPolicy.AUTO
    options: JobOptions = Field(
        default_factory=dict,
        validate_default=True,
        description="The job type's options (one schema per type); they are part of the request's identity.",
    )
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

    @field_validator("job_type")
    @classmethod
    def _registered(cls, name: str) -> str:
        if name not in JOB_TYPES:
            raise ValueError(f"unknown job type; one of: {', '.join(JOB_TYPES)}")
        return name

    @field_validator("schema_version", mode="after")
    @classmethod
    def _the_types_schema(cls, version: str | None, info: ValidationInfo) -> str | None:
        job_type = JOB_TYPES.get(info.data.get("job_type", ""))
        if job_type is None:
            return version  # the job_type error says what is wrong
        if version is not None and version != job_type.schema_version:
            raise ValueError(f"{job_type.name} results have schema version {job_type.schema_version!r}")
        return job_type.schema_version

    @field_validator("options", mode="wrap")
    @classmethod
    def _the_types_options(
        cls, value: Any, handler: ValidatorFunctionWrapHandler, info: ValidationInfo
    ) -> BaseModel:
        job_type = JOB_TYPES.get(info.data.get("job_type", ""))
        if job_type is None or not isinstance(value, dict):
            return handler(value)  # type: ignore[no-any-return]
        return job_type.options.model_validate(value)

    @property
    def kind(self) -> JobType:
        """The registered bundle of this request's job type."""
        return JOB_TYPES[self.job_type]


class DocumentView(BaseModel):
    document_id: UUID
    sha256: str
    size_bytes: int
    page_count: int


class JobLinks(BaseModel):
    self: str
    result: str
    cancel: str


class JobUsage(BaseModel):
    """What the job's attempts have recorded so far: tokens and cost, summed over every attempt closed,
    including those whose answer was discarded (their cost is real)."""

    input_tokens: int = Field(description="Prompt tokens over all the job's attempts.")
    output_tokens: int = Field(description="Completion tokens over all the job's attempts.")
    cost_usd: Decimal = Field(description="Cost in USD over all the job's attempts, at the worker's prices.")
    attempts: int = Field(description="Attempts closed (with or without a provider call).")

    @classmethod
    def of(cls, row: Mapping[str, Any]) -> JobUsage:
        return cls(
            input_tokens=row["input_tokens"],
            output_tokens=row["output_tokens"],
            cost_usd=row["cost_usd"],
            attempts=row["attempts_recorded"],
        )


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
    usage: JobUsage
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


class LocatedLabel(BaseModel):
    text: str = Field(description='The label as the page prints it ("Due:", "Total due"), or a cue word.')
    field: str = Field(description='What the label names: the field, "column" for a row\'s header, "cue".')
    page: int
    start: int = Field(description="Where the label starts in that page's text (characters).")
    end: int


class LocatedValue(BaseModel):
    """Where the validation policy found one value on the page, and the label that names it there."""

    field: str = Field(description="The field path: total, line_items[0], key_facts[1], label, …")
    page: int = Field(description="The page (from 1).")
    start: int = Field(description="Where the value starts in that page's text (characters).")
    end: int
    text: str = Field(description="The value as the page prints it.")
    label: LocatedLabel | None = Field(description="Null for a value that needs none (a letterhead).")


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
    evidence: list[LocatedValue] | None = Field(
        default=None,
        description="Where the policy found each value on the page, with its label (policies validation.v3, "
        "summary.v2 and classification.v2 on); null for a result judged by an earlier policy.",
    )
    created_at: datetime
    usage: JobUsage


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
