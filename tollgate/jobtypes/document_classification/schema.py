"""The label a model chooses, the label set a tenant sends, and policy ``classification.v1``.

The tenant names the labels with each job (they are part of its identity: the same document classified
against another set is another job). The answer must be one of them, with evidence that is printed on the
page it names; anything else fails the policy and the job goes to review.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator

from tollgate.core.models import Strict
from tollgate.jobtypes.base import TenantPolicy, ValidationReport
from tollgate.jobtypes.evidence import Evidence

SCHEMA_VERSION = "classification.v1"
SCHEMA_NAME = "document_classification_v1"
POLICY_VERSION = "classification.v1"

Label = Annotated[str, StringConstraints(min_length=1, max_length=64, pattern=r"^[a-z0-9][a-z0-9_.-]*$")]
LanguageHint = Annotated[str, StringConstraints(pattern=r"^[a-z]{2}$")]


class ClassificationOptions(Strict):
    """Options of a document_classification job; they change the result, so they are part of its identity."""

    labels: list[Label] = Field(
        min_length=2,
        max_length=50,
        description="The labels the document may get: lower-case names, each once. Their order does not "
        "matter (two requests naming the same set are the same request).",
    )
    language_hint: LanguageHint | None = Field(default=None, description="ISO 639-1 code of the document.")

    @field_validator("labels")
    @classmethod
    def _a_set(cls, labels: list[str]) -> list[str]:
        if len(set(labels)) != len(labels):
            raise ValueError("each label may be named only once")
        return sorted(labels)


class DocumentClassification(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    label: str = Field(min_length=1, max_length=64, description="One of the labels the job names.")
    evidence: Evidence | None = Field(description="Text of the document that shows the label fits.")


def evidence_fields(answer: DocumentClassification) -> Iterator[tuple[str, Evidence | None]]:
    yield "label", answer.evidence


def validate_classification(
    answer: DocumentClassification, pages: Sequence[str], options: ClassificationOptions, policy: TenantPolicy
) -> ValidationReport:
    del policy  # the label set is the job's own
    report = ValidationReport(POLICY_VERSION)
    if answer.label not in options.labels:
        report.fail("label_not_allowed", "label", f"{answer.label!r} is not one of the job's labels")
    report.require_evidence("label", answer.evidence, pages)
    return report
