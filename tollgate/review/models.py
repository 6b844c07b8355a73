"""The shapes of the review API: a decision a reviewer sends, and what a reviewer reads."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any
from uuid import UUID

from pydantic import BaseModel, Field, StringConstraints, field_validator, model_validator

from tollgate.core.job_states import JobState
from tollgate.core.models import NO_NUL, Strict
from tollgate.review.evidence import EvidenceView

NOTE_MAX = 2000


class Decision(StrEnum):
    APPROVE = "approve"  # accept the model's result as it is, overriding the reasons it failed
    CORRECT = "correct"  # accept a corrected result, once it passes validation
    REJECT = "reject"  # accept nothing: the job ends REJECTED


class ReviewDecisionRequest(Strict):
    decision: Decision
    note: Annotated[str, StringConstraints(min_length=1, max_length=NOTE_MAX, pattern=NO_NUL)] = Field(
        description="Why: kept with the decision, shown to whoever reads the review."
    )
    corrections: dict[str, Any] | None = Field(
        default=None,
        description="Only with correct: a JSON merge patch (RFC 7396) onto the extracted invoice. A value "
        "replaces, an object merges, null clears a field (it is read as null), and an array (line_items) is "
        "replaced whole. The corrected invoice must pass the schema and the validation policy.",
    )

    @field_validator("note")
    @classmethod
    def _says_something(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("say why in the note")
        return value

    @field_validator("corrections")
    @classmethod
    def _storable(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        # jsonb cannot hold U+0000: refused here as a 422 rather than failing in the database.
        if value is not None and _holds_nul(value):
            raise ValueError("the corrections must not contain U+0000")
        return value

    @model_validator(mode="after")
    def _corrections_only_when_correcting(self) -> ReviewDecisionRequest:
        if self.decision is Decision.CORRECT and not self.corrections:
            raise ValueError("a correct decision needs corrections: a merge patch onto the invoice")
        if self.decision is not Decision.CORRECT and self.corrections is not None:
            raise ValueError(f"corrections come only with correct, not with {self.decision.value}")
        return self


def _holds_nul(value: Any) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_holds_nul(k) or _holds_nul(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_holds_nul(item) for item in value)
    return False


class ReviewReason(BaseModel):
    code: str = Field(description="The rule the result broke, e.g. total_mismatch, evidence_not_found.")
    field: str = Field(description="The field it is about.")
    detail: str = Field(description="What was wrong, in words.")


class DecisionView(BaseModel):
    decision: Decision
    note: str
    reviewer: str = Field(description="Who decided: the API key (api-key:<key id>) or the person at the CLI.")
    reviewer_key_id: UUID | None = Field(description="The API key that decided; null for the CLI.")
    decided_on_version: int = Field(description="The state_version the decision was made on (If-Match).")
    review_requested_at: datetime
    decided_at: datetime
    result_version: int | None = Field(description="The accepted result's version (2); null for reject.")
    corrections: dict[str, Any] | None


class ReviewLinks(BaseModel):
    review: str
    job: str
    result: str


class ReviewView(BaseModel):
    """A job's review: the model's result with the reasons it failed and the evidence for each value, and the
    decision once made. ``state_version`` is also the ETag; send it as If-Match with a decision."""

    job_id: UUID
    state: JobState
    state_version: int
    waiting_since: datetime = Field(description="When the result went to review.")
    policy_version: str = Field(description="The validation policy that judged the model's result.")
    result: dict[str, Any] = Field(description="The model's result (version 1), not accepted data.")
    reasons: list[ReviewReason]
    evidence: list[EvidenceView] = Field(
        description="Each extracted value with its evidence located in the OCR text, and the text around it."
    )
    decision: DecisionView | None = Field(description="Null while the review waits.")
    links: ReviewLinks


class ReviewQueueItem(BaseModel):
    job_id: UUID
    tenant: str | None = Field(default=None, description="The tenant's name (the CLI's listing only).")
    state_version: int
    waiting_since: datetime
    policy_version: str
    reason_codes: list[str]
    metadata: dict[str, str]
    links: ReviewLinks


class ReviewPage(BaseModel):
    items: list[ReviewQueueItem]
    next_cursor: str | None = Field(description="Pass as ?cursor= to get the next page; null at the end.")


class ReviewDecided(BaseModel):
    """A decision that was made: the job's new state and version, and where its accepted result is."""

    job_id: UUID
    state: JobState
    state_version: int
    decision: Decision
    result_version: int | None
    decided_at: datetime
    links: ReviewLinks


def review_links(job_id: UUID) -> ReviewLinks:
    job = f"/extraction-jobs/{job_id}"
    return ReviewLinks(review=f"{job}/review", job=job, result=f"{job}/result")
