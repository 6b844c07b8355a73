"""The label a model chooses and the label set a tenant sends, with an optional guide per label; the policy
is ``policy.py`` (classification.v2).

The tenant names the labels with each job (they are part of its identity: the same document classified
against another set is another job). For any label it may add a guide: a description the model is shown
and cue words the evidence must carry for that label to pass.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    StringConstraints,
    field_validator,
    model_serializer,
    model_validator,
)

from tollgate.core.models import NO_NUL, Strict
from tollgate.jobtypes.evidence import Evidence

SCHEMA_VERSION = "classification.v1"
SCHEMA_NAME = "document_classification_v1"

Label = Annotated[str, StringConstraints(min_length=1, max_length=64, pattern=r"^[a-z0-9][a-z0-9_.-]*$")]
LanguageHint = Annotated[str, StringConstraints(pattern=r"^[a-z]{2}$")]
Cue = Annotated[str, StringConstraints(strip_whitespace=True, min_length=2, max_length=64, pattern=NO_NUL)]


class LabelGuide(Strict):
    """What a label means, for the model, and the words that show it, for the policy."""

    description: (
        Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=300, pattern=NO_NUL)]
        | None
    ) = Field(default=None, description="What the label means; the model is shown it.")
    cues: list[Cue] = Field(
        min_length=1,
        max_length=20,
        description="Words or phrases the evidence must print (at least one, case aside, at the start of a "
        "word) for this label to pass without review. Without a guide, a label's cues are its own words.",
    )


class ClassificationOptions(Strict):
    """Options of a document_classification job; they change the result, so they are part of its identity."""

    labels: list[Label] = Field(
        min_length=2,
        max_length=50,
        description="The labels the document may get: lower-case names, each once. Their order does not "
        "matter (two requests naming the same set are the same request).",
    )
    label_guides: dict[Label, LabelGuide] | None = Field(
        default=None,
        description="Per label (any of ``labels``), a description and the cue words its evidence must "
        "print. A label without a guide is cued by its own words (service_agreement: service, agreement).",
    )
    language_hint: LanguageHint | None = Field(default=None, description="ISO 639-1 code of the document.")

    @field_validator("labels")
    @classmethod
    def _a_set(cls, labels: list[str]) -> list[str]:
        if len(set(labels)) != len(labels):
            raise ValueError("each label may be named only once")
        return sorted(labels)

    @model_validator(mode="after")
    def _guides_name_labels(self) -> ClassificationOptions:
        unknown = sorted(set(self.label_guides or {}) - set(self.labels))
        if unknown:
            raise ValueError(f"label_guides names labels the job does not: {', '.join(unknown)}")
        return self

    @model_serializer(mode="wrap")
    def _without_absent_guides(
        self, handler: SerializerFunctionWrapHandler, info: SerializationInfo
    ) -> dict[str, Any]:
        # A request without guides keeps the identity (and the stored options) it had before guides existed.
        data: dict[str, Any] = handler(self)
        if data.get("label_guides") is None:
            data.pop("label_guides", None)
        elif isinstance(data["label_guides"], dict):
            data["label_guides"] = dict(sorted(data["label_guides"].items()))
        return data

    def cues(self, label: str) -> list[str]:
        """The words the evidence must carry for ``label``: the guide's, else the label's own words."""
        guide = (self.label_guides or {}).get(label)
        if guide is not None:
            return list(guide.cues)
        words = label.replace("_", " ").replace(".", " ").replace("-", " ").split()
        return [word for word in words if len(word) >= 2] or [label]


class DocumentClassification(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    label: str = Field(min_length=1, max_length=64, description="One of the labels the job names.")
    evidence: Evidence | None = Field(description="Text of the document that shows the label fits.")


def evidence_fields(answer: DocumentClassification) -> Iterator[tuple[str, Evidence | None]]:
    yield "label", answer.evidence
