"""Tollgate's events, in one home: a typed, versioned model per event type, the only way a producer builds
an outbox row, and the JSON Schemas tenants read (``tollgate events schemas``; committed in events/schemas).

A payload model's fields are the wire contract. A change that removes or retypes a field is a new version
(``.v2``), never an edit of ``.v1``; the committed schema files make such a change show in review.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any, ClassVar, Literal
from uuid import UUID

from psycopg.types.json import Jsonb
from pydantic import BaseModel, ConfigDict, Field, create_model, field_serializer

EXTRACTION_REQUESTED = "extraction.requested.v1"
EXTRACTION_COMPLETED = "extraction.completed.v1"
EXTRACTION_REVIEW_REQUIRED = "extraction.review_required.v1"
EXTRACTION_FAILED = "extraction.failed.v1"
EXTRACTION_REJECTED = "extraction.rejected.v1"
TENANT_SPEND_THRESHOLD = "tenant.spend_threshold.v1"


class UnknownEventType(ValueError):
    """An event type no model describes: nothing may build, parse or deliver it."""


class BaseEvent(BaseModel):
    """What every event is: typed, versioned, about one tenant. Strict: a payload with a field too many, or a
    field of the wrong type, is refused where it is built, not discovered by a tenant."""

    # Serialization defaults required: a field with a default is still always sent, so the schema says so.
    model_config = ConfigDict(
        extra="forbid", strict=True, frozen=True, json_schema_serialization_defaults_required=True
    )
    event_type: ClassVar[str]

    tenant_id: UUID

    @property
    def aggregate_id(self) -> UUID:
        """The outbox row's aggregate: what the event is about (a job, or the tenant itself)."""
        return self.tenant_id

    @classmethod
    def parse(cls, payload: Mapping[str, Any]) -> BaseEvent:
        """A stored or received payload is JSON: validate it as JSON (a UUID arrives as a string)."""
        return cls.model_validate_json(json.dumps(payload))


class EventPayload(BaseEvent):
    """What every job event says about its job."""

    job_id: UUID = Field(description="The extraction job this event is about.")
    tenant_id: UUID = Field(description="The tenant that owns the job.")
    state_version: int = Field(
        ge=1,
        description="The job's state_version after the change this event reports; it grows by one on every "
        "state change, so a consumer keeps the highest it has seen and ignores older events.",
    )

    @property
    def aggregate_id(self) -> UUID:
        return self.job_id

    @classmethod
    def parse(cls, payload: Mapping[str, Any]) -> EventPayload:
        return cls.model_validate_json(json.dumps(payload))


class TenantEventPayload(BaseEvent):
    """What every event about a tenant as a whole (not one of its jobs) says."""

    tenant_id: UUID = Field(description="The tenant this event is about.")


class ExtractionRequested(EventPayload):
    """A job was accepted, or a support engineer gave a failed job new attempts: a worker should run it.
    Internal: it goes to the job type's queue, never to a tenant's webhook."""

    event_type: ClassVar[str] = EXTRACTION_REQUESTED

    # A default, so that rows written before job types had queues of their own still parse.
    job_type: str = Field(
        default="invoice_extraction",
        description="The job's type; the relay sends the event to that type's queue.",
    )


class JobOutcome(EventPayload):
    """The fields every outcome event carries, whoever ended the job (the worker or the scheduler)."""

    state: str
    attempt: int = Field(
        ge=0,
        description="Attempts started when the job reached this state (0 when it expired before its first).",
    )
    review_reasons: list[str] = Field(
        description="Codes of the validation rules the result broke; empty unless REVIEW_REQUIRED or "
        "REJECTED."
    )
    reason: str | None = Field(description="Why the job failed; null unless the state is FAILED_TERMINAL.")


class ExtractionCompleted(JobOutcome):
    """The job succeeded: its result passed validation, or a reviewer approved or corrected it (the
    correction re-validated), and its accepted result can be fetched."""

    event_type: ClassVar[str] = EXTRACTION_COMPLETED

    state: Literal["SUCCEEDED"] = Field(default="SUCCEEDED", description="The job's state: SUCCEEDED.")
    review_reasons: list[str] = Field(default_factory=list, max_length=0, description="Always empty.")
    reason: None = Field(default=None, description="Always null.")


class ExtractionReviewRequired(JobOutcome):
    """The job has a result that broke validation rules; it waits for a reviewer."""

    event_type: ClassVar[str] = EXTRACTION_REVIEW_REQUIRED

    state: Literal["REVIEW_REQUIRED"] = Field(
        default="REVIEW_REQUIRED", description="The job's state: REVIEW_REQUIRED."
    )
    review_reasons: list[str] = Field(
        min_length=1, description="Codes of the validation rules the result broke (at least one)."
    )
    reason: None = Field(default=None, description="Always null.")


class ExtractionRejected(JobOutcome):
    """A reviewer rejected the job's result: it broke validation rules and no corrected version was
    accepted. The job is final; there is no result to fetch, and GET .../review shows the decision."""

    event_type: ClassVar[str] = EXTRACTION_REJECTED

    state: Literal["REJECTED"] = Field(default="REJECTED", description="The job's state: REJECTED.")
    review_reasons: list[str] = Field(
        min_length=1, description="Codes of the validation rules the rejected result broke (at least one)."
    )
    reason: None = Field(default=None, description="Always null.")


class ExtractionFailed(JobOutcome):
    """The job ended without a result, by the worker (a refusal, attempts used up) or by the scheduler (a
    lease that expired with nothing left to try, a deadline that passed)."""

    event_type: ClassVar[str] = EXTRACTION_FAILED

    state: Literal["FAILED_TERMINAL"] = Field(
        default="FAILED_TERMINAL", description="The job's state: FAILED_TERMINAL."
    )
    review_reasons: list[str] = Field(default_factory=list, max_length=0, description="Always empty.")
    reason: str = Field(
        min_length=1,
        description="Why the job failed, e.g. attempts_exhausted, deadline_exceeded, refused, terminal.",
    )


class TenantSpendThreshold(TenantEventPayload):
    """The tenant's cost this month reached a share of its monthly budget: 80 percent (a warning), then 100
    (admission refuses new jobs with spend-budget-exhausted until the next month, and workers start no call
    that would pass the budget). Each threshold is announced once per tenant and month, by the transaction
    that recorded the cost that crossed it. Goes to the results bus, not to webhooks."""

    event_type: ClassVar[str] = TENANT_SPEND_THRESHOLD

    month: str = Field(pattern=r"^\d{4}-\d{2}$", description="The UTC month, as YYYY-MM.")
    threshold_percent: Literal[80, 100] = Field(description="The share of the budget reached: 80 or 100.")
    budget_usd: str = Field(description="The tenant's monthly budget in USD, as a decimal string.")
    spent_usd: str = Field(
        description="The tenant's recorded cost this month in USD when the threshold was crossed, as a "
        "decimal string."
    )


JOB_PAYLOADS: dict[str, type[EventPayload]] = {
    model.event_type: model
    for model in (
        ExtractionRequested,
        ExtractionCompleted,
        ExtractionReviewRequired,
        ExtractionRejected,
        ExtractionFailed,
    )
}
PAYLOADS: dict[str, type[BaseEvent]] = {**JOB_PAYLOADS, TENANT_SPEND_THRESHOLD: TenantSpendThreshold}
# Events that go only to the results bus: no job queue, no webhook. Routed by the relay's wiring to the bus
# publisher; until one is configured the relay leaves them unpublished (no route).
BUS_ONLY_EVENT_TYPES = (TENANT_SPEND_THRESHOLD,)
# What tenants' endpoints can subscribe to; the requested event stays inside Tollgate.
WEBHOOK_EVENT_TYPES = (
    EXTRACTION_COMPLETED,
    EXTRACTION_REVIEW_REQUIRED,
    EXTRACTION_REJECTED,
    EXTRACTION_FAILED,
)
# What an endpoint gets when it names no types: every outcome an ERP acts on. A result waiting for review is
# not one (its data is not accepted), so review_required goes only to endpoints that ask for it.
DEFAULT_SUBSCRIPTION = (EXTRACTION_COMPLETED, EXTRACTION_FAILED, EXTRACTION_REJECTED)


def payload_model(event_type: str) -> type[BaseEvent]:
    try:
        return PAYLOADS[event_type]
    except KeyError:
        raise UnknownEventType(f"no event model for {event_type!r}") from None


def parse_payload(event_type: str, payload: Mapping[str, Any]) -> BaseEvent:
    """The typed payload of a stored or received event; pydantic's ValidationError when it is not one."""
    return payload_model(event_type).parse(payload)


def outbox_row(event: BaseEvent, *, event_id: UUID, trace_context: str | None) -> dict[str, Any]:
    """``insert_outbox_event``'s parameters: the only way a producer writes an event. The type, tenant and
    aggregate (the job, or the tenant for a tenant event) come from the model, so a row cannot pair one
    event's type with another's payload."""
    return {
        "event_id": event_id,
        "tenant_id": event.tenant_id,
        "aggregate_id": event.aggregate_id,
        "event_type": event.event_type,
        "payload": Jsonb(event.model_dump(mode="json")),
        "trace_context": trace_context,
    }


class JobLinks(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    job: str = Field(description="Path of the job, relative to the API's base URL.")
    result: str = Field(description="Path of the job's result, relative to the API's base URL.")

    @classmethod
    def of(cls, job_id: UUID) -> JobLinks:
        return cls(job=f"/extraction-jobs/{job_id}", result=f"/extraction-jobs/{job_id}/result")


def _webhook_models() -> dict[str, type[BaseModel]]:
    """Per webhook event type, the body a tenant's endpoint receives: the payload under ``data`` (with
    links), its ``type`` and ``timestamp``."""
    models: dict[str, type[BaseModel]] = {}
    for event_type in WEBHOOK_EVENT_TYPES:
        payload = JOB_PAYLOADS[event_type]
        data = create_model(
            f"{payload.__name__}Data",
            __base__=payload,
            links=(JobLinks, Field(description="Where to read the job and its result.")),
        )
        models[event_type] = create_model(
            f"{payload.__name__}Webhook",
            __base__=WebhookBody,
            __doc__=f"The JSON body a tenant's endpoint receives for {event_type}, signed as sent.",
            type=(Literal[event_type], Field(description="The event type; subscribe to it by this name.")),  # type: ignore[arg-type]
            data=(data, Field(description=inspect.cleandoc(payload.__doc__ or ""))),
        )
    return models


class WebhookBody(BaseModel):
    """The JSON body of a webhook delivery, signed as sent (Standard Webhooks)."""

    model_config = EventPayload.model_config

    type: str
    timestamp: datetime = Field(
        description="When the event was committed (RFC 3339).", json_schema_extra={"format": "date-time"}
    )
    data: EventPayload

    @field_serializer("timestamp")
    def _timestamp(self, value: datetime) -> str:
        # isoformat, as bodies were always rendered: +00:00, not pydantic's Z, so stored bodies stay alike.
        return value.isoformat()


WEBHOOKS: dict[str, type[BaseModel]] = _webhook_models()


def webhook_body(event_type: str, payload: Mapping[str, Any], created_at: datetime) -> str:
    """The exact bytes of a webhook body: the payload parsed by its model (so a malformed event is refused
    here, never sent), with the job's links; compact, keys sorted."""
    if event_type not in WEBHOOKS:
        raise UnknownEventType(f"{event_type!r} is not delivered to webhooks")
    event = JOB_PAYLOADS[event_type].parse(payload)
    data = {**event.model_dump(), "links": JobLinks.of(event.job_id)}
    body = WEBHOOKS[event_type](type=event_type, timestamp=created_at, data=data)
    return json.dumps(body.model_dump(mode="json"), separators=(",", ":"), sort_keys=True)


def schema_documents() -> dict[str, dict[str, Any]]:
    """Every JSON Schema file by name: each event's payload, and for webhook events the body delivered."""
    documents: dict[str, dict[str, Any]] = {}
    for event_type, payload in PAYLOADS.items():
        documents[f"{event_type}.payload.json"] = _document(payload, f"{event_type}.payload")
    for event_type, body in WEBHOOKS.items():
        documents[f"{event_type}.webhook.json"] = _document(body, f"{event_type}.webhook")
    return dict(sorted(documents.items()))


def _document(model: type[BaseModel], name: str) -> dict[str, Any]:
    schema = model.model_json_schema(mode="serialization")
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"https://tollgate.dev/events/schemas/{name}.json",
        **schema,
    }


def render_schema(document: Mapping[str, Any]) -> str:
    return json.dumps(document, indent=2, sort_keys=True) + "\n"


def schema_drift(output_dir: Path) -> list[str]:
    """Names of the files that differ from the export: changed, missing, or left over."""
    documents = schema_documents()
    present = {path.name: path for path in output_dir.glob("*.json")} if output_dir.is_dir() else {}
    drift = [name for name in present if name not in documents]
    for name, document in documents.items():
        path = present.get(name)
        if path is None or path.read_text(encoding="utf-8") != render_schema(document):
            drift.append(name)
    return sorted(drift)


def write_schemas(output_dir: Path) -> list[Path]:
    """Writes every schema file and removes stale ones, so the folder is exactly the export."""
    output_dir.mkdir(parents=True, exist_ok=True)
    documents = schema_documents()
    for stale in output_dir.glob("*.json"):
        if stale.name not in documents:
            stale.unlink()
    written = []
    for name, document in documents.items():
        path = output_dir / name
        path.write_text(render_schema(document), encoding="utf-8")
        written.append(path)
    return written
