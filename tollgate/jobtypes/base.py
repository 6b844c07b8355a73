"""What a job type is: one bundle of everything that differs between kinds of work (the request's options,
the prompt, the output schema, the validation policy, the model routing, the queue), so that the acceptance
API, the worker, the reviewer's view and the stacks read it from one place."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from pydantic import BaseModel

from tollgate.jobtypes.evidence import Evidence
from tollgate.jobtypes.printed import Located
from tollgate.jobtypes.schemas import sent_json_schema


@dataclass(frozen=True)
class KnownSupplier:
    name: str
    iban: str | None = None


@dataclass(frozen=True)
class TenantPolicy:
    """The tenant's master data a policy may check against (read per attempt, so an edit applies at once)."""

    allowed_currencies: frozenset[str]
    suppliers: tuple[KnownSupplier, ...]
    # An IBAN of a supplier with none on file goes to review (iban_unverified) unless the tenant accepts it.
    accept_unverified_iban: bool = False


@dataclass(frozen=True)
class Reason:
    code: str
    field: str
    detail: str

    def as_dict(self) -> dict[str, str]:
        return {"code": self.code, "field": self.field, "detail": self.detail}


@dataclass
class ValidationReport:
    policy_version: str
    reasons: list[Reason] = field(default_factory=list)
    # Where the policy found each value, by field path (policies from validation.v3 on): what the result
    # records and the review view shows.
    located: dict[str, Located] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return not self.reasons

    def located_json(self, pages: Sequence[str]) -> list[dict[str, object]]:
        """Where each value was found, as the result records it (field, page, span, printed text, label)."""
        return [located.as_dict(pages) for located in self.located.values()]

    def fail(self, code: str, field_name: str, detail: str) -> None:
        self.reasons.append(Reason(code, field_name, detail))


@dataclass(frozen=True)
class Complexity:
    """What routing knows about a document before any call: its size and, when the tenant said, its
    language (an ISO 639-1 code)."""

    pages: int
    chars: int
    lines: int
    language: str | None

    @classmethod
    def of(cls, pages: Sequence[str], language: str | None) -> Complexity:
        return cls(
            pages=len(pages),
            chars=sum(len(page) for page in pages),
            lines=sum(len(page.splitlines()) for page in pages),
            language=language,
        )


@dataclass(frozen=True)
class Routing:
    """When the small model is enough for a type: a document within every bound, in a language it reads
    well (None: any language, or none stated). Anything else goes to the large model."""

    max_pages: int
    max_chars: int
    max_lines: int
    small_languages: frozenset[str] | None = None

    def small_enough(self, complexity: Complexity) -> bool:
        language_ok = (
            self.small_languages is None
            or complexity.language is None
            or complexity.language in self.small_languages
        )
        return (
            complexity.pages <= self.max_pages
            and complexity.chars <= self.max_chars
            and complexity.lines <= self.max_lines
            and language_ok
        )


Validate = Callable[[Any, Sequence[str], Any, TenantPolicy], ValidationReport]
EvidenceFields = Callable[[Any], Iterable[tuple[str, Evidence | None]]]


@dataclass(frozen=True)
class JobType:
    """One registered kind of work. ``queue`` names its SQS FIFO queue and dead-letter queue in the stacks
    (``tollgate-<stage>-<queue>.fifo``); ``message_retention_days`` is that queue's retention."""

    name: str
    summary: str
    schema_version: str
    options: type[BaseModel]
    output: type[BaseModel]
    schema_name: str
    prompt_version: str
    system_prompt: Callable[[Any], str]  # from the job's parsed options
    policy_version: str  # the version of ``validate``'s rules, stored with each result it judged
    validate: Validate  # (output, pages, options, tenant policy) -> report
    review_reasons: frozenset[str]  # every reason code ``validate`` gives
    evidence_fields: EvidenceFields  # every piece of evidence an output carries, by field path
    routing: Routing
    max_output_tokens: int
    queue: str
    message_retention_days: int = 4

    @cached_property
    def json_schema(self) -> str:
        """The output schema as sent to the model, as JSON text (computed once: it goes with every call)."""
        return sent_json_schema(self.output)

    def parse_options(self, raw: Any) -> Any:
        """A stored job's options as this type's model (they were validated when the job was accepted)."""
        return self.options.model_validate(raw or {})

    def language(self, options: Any) -> str | None:
        hint = getattr(options, "language_hint", None)
        return hint if isinstance(hint, str) else None
