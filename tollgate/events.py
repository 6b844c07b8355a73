"""Tollgate's events, in one home: a typed, versioned model per event type, the only way a producer builds
an outbox row, and the JSON Schemas tenants read (``tollgate events schemas``; committed in events/schemas).

A payload model's fields are the wire contract. A change that removes or retypes a field is a new version
(``.v2``), never an edit of ``.v1``; the committed schema files make such a change show in review.
"""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Mapping
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any, ClassVar, Literal
from uuid import UUID

from psycopg.types.json import Jsonb
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, create_model, field_serializer
from pydantic.json_schema import models_json_schema

from tollgate.core.job_states import JobState

EXTRACTION_REQUESTED = "extraction.requested.v1"
EXTRACTION_COMPLETED = "extraction.completed.v1"
EXTRACTION_REVIEW_REQUIRED = "extraction.review_required.v1"
EXTRACTION_FAILED = "extraction.failed.v1"
EXTRACTION_REJECTED = "extraction.rejected.v1"
TENANT_SPEND_THRESHOLD = "tenant.spend_threshold.v1"
EXTRACTION_CANCELLED = "extraction.cancelled.v1"
JOB_STATE_CHANGED = "job.state_changed.v1"
# Cost is money: a decimal string with exactly this many places (the attempts' numeric(12, 6)), never a float.
COST_PLACES = Decimal("0.000001")


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


class JobTotals(BaseModel):
    """What a job has used so far, summed over all its attempts: the part of an outcome event an ERP or a
    billing consumer reads without fetching the job. Read by one query in the transaction that writes the
    event (``tollgate.outbox.outcomes``)."""

    model_config = EventPayload.model_config

    job_type: str = Field(
        default="invoice_extraction",
        description="The job's type (invoice_extraction). Events written before this field existed were "
        "all invoice_extraction.",
    )
    model: str | None = Field(
        default=None,
        description="The model of the job's last attempt that called one; null when no attempt did.",
    )
    input_tokens: int = Field(default=0, ge=0, description="Prompt tokens, summed over all attempts.")
    output_tokens: int = Field(default=0, ge=0, description="Completion tokens, summed over all attempts.")
    cost_usd: Decimal = Field(
        default=Decimal("0.000000"),
        ge=0,
        description="Cost in USD summed over all attempts, as a decimal string with six places (e.g. "
        '"0.004120"), exact; parse it as a decimal, not a float.',
        json_schema_extra={"pattern": r"^[0-9]+\.[0-9]{6}$"},
    )
    attempts: int = Field(
        default=0, ge=0, description="Attempt records the totals are summed over (0 when none started)."
    )

    @field_serializer("cost_usd", when_used="json")
    def _cost(self, value: Decimal) -> str:
        return str(value.quantize(COST_PLACES))


class JobOutcome(JobTotals, EventPayload):
    """The fields every outcome event carries, whoever ended the job (the worker, the scheduler, a reviewer
    or the tenant), with the job's usage totals. The totals were added to v1 with defaults, so events stored
    before them still parse (with zeros)."""

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


class ExtractionCancelled(JobOutcome):
    """The tenant cancelled the job before it ran again (it was READY or RETRY_SCHEDULED). The job is final;
    there is no result to fetch."""

    event_type: ClassVar[str] = EXTRACTION_CANCELLED

    state: Literal["CANCELLED"] = Field(default="CANCELLED", description="The job's state: CANCELLED.")
    review_reasons: list[str] = Field(default_factory=list, max_length=0, description="Always empty.")
    reason: None = Field(default=None, description="Always null.")


class JobStateChanged(EventPayload):
    """A job changed state: the signal live notifications are made of (DESIGN §8). Written by the trigger
    on extraction_jobs (migration 0021), which builds exactly these fields, never by Python code; the relay
    sends it to the notifier's queue only, not to webhooks or the results bus. It carries no result: a
    client that wants one fetches the job."""

    event_type: ClassVar[str] = JOB_STATE_CHANGED

    job_type: str = Field(min_length=1, description="The job's type.")
    state: JobState = Field(description="The job's state after the change.")
    sequence: int = Field(
        ge=1,
        description="The change's number in the tenant's event sequence: gap-free and in commit order per "
        "tenant; a subscriber's cursor.",
    )
    occurred_at: AwareDatetime = Field(
        description="When the change was made (RFC 3339).", json_schema_extra={"format": "date-time"}
    )


JOB_PAYLOADS: dict[str, type[EventPayload]] = {
    model.event_type: model
    for model in (
        ExtractionRequested,
        ExtractionCompleted,
        ExtractionReviewRequired,
        ExtractionRejected,
        ExtractionFailed,
        ExtractionCancelled,
    )
}
PAYLOADS: dict[str, type[BaseEvent]] = {**JOB_PAYLOADS, TENANT_SPEND_THRESHOLD: TenantSpendThreshold}
# Events that go only to the results bus: no job queue, no webhook (the relay's wiring routes them).
BUS_ONLY_EVENT_TYPES = (TENANT_SPEND_THRESHOLD,)
# How a job ended, for tenants: each goes to the tenant's subscribed webhooks and to the results bus. The
# requested event stays inside Tollgate.
OUTCOME_EVENT_TYPES = (
    EXTRACTION_COMPLETED,
    EXTRACTION_REVIEW_REQUIRED,
    EXTRACTION_REJECTED,
    EXTRACTION_FAILED,
    EXTRACTION_CANCELLED,
)
# What tenants' endpoints can subscribe to: every outcome.
WEBHOOK_EVENT_TYPES = OUTCOME_EVENT_TYPES
# What an endpoint gets when it names no types: every outcome an ERP acts on. A result waiting for review is
# not one (its data is not accepted), so review_required goes only to endpoints that ask for it; nor is a
# cancellation, which the tenant asked for itself, so cancelled too.
DEFAULT_SUBSCRIPTION = (EXTRACTION_COMPLETED, EXTRACTION_FAILED, EXTRACTION_REJECTED)


# Events that never leave Tollgate as such: no published schema, no webhook, no bus. Live notifications send
# their own messages (tollgate.notify.messages), built from these.
INTERNAL_PAYLOADS: dict[str, type[BaseEvent]] = {JOB_STATE_CHANGED: JobStateChanged}


def payload_model(event_type: str) -> type[BaseEvent]:
    try:
        return PAYLOADS.get(event_type) or INTERNAL_PAYLOADS[event_type]
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


@functools.cache
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


# Built on first use (module __getattr__ below): a dozen models the API's cold start never needs.
WEBHOOKS: dict[str, type[BaseModel]]


def webhook_body(event_type: str, payload: Mapping[str, Any], created_at: datetime) -> str:
    """The exact bytes of a webhook body: the payload parsed by its model (so a malformed event is refused
    here, never sent), with the job's links; compact, keys sorted."""
    if event_type not in _webhook_models():
        raise UnknownEventType(f"{event_type!r} is not delivered to webhooks")
    event = JOB_PAYLOADS[event_type].parse(payload)
    data = {**event.model_dump(), "links": JobLinks.of(event.job_id)}
    body = _webhook_models()[event_type](type=event_type, timestamp=created_at, data=data)
    return json.dumps(body.model_dump(mode="json"), separators=(",", ":"), sort_keys=True)


BUS_EVENT_ID = (
    "The event's id: the same on every publish of this event (the relay publishes at least once), so a "
    "consumer keeps the ids it has handled and skips a repeat."
)
COMMITTED_AT = "When the event was committed (RFC 3339)."
DATE_TIME: dict[str, Any] = {"format": "date-time"}


@functools.cache
def _bus_models() -> dict[str, type[BaseModel]]:
    """Per event type on the results bus (every outcome, and the bus-only tenant events), the ``detail`` of
    its bus event: the payload with the outbox event's id and commit time, so a consumer dedupes on
    ``event_id`` without reading the envelope."""
    models: dict[str, type[BaseModel]] = {}
    for event_type in (*OUTCOME_EVENT_TYPES, *BUS_ONLY_EVENT_TYPES):
        payload = PAYLOADS[event_type]
        models[event_type] = create_model(
            f"{payload.__name__}BusDetail",
            __base__=payload,
            __doc__=f"The detail of a results bus event of detail-type {event_type}. "
            + inspect.cleandoc(payload.__doc__ or ""),
            event_id=(UUID, Field(description=BUS_EVENT_ID)),
            occurred_at=(datetime, Field(description=COMMITTED_AT, json_schema_extra=DATE_TIME)),
        )
    return models


BUS_DETAILS: dict[str, type[BaseModel]]


def __getattr__(name: str) -> Any:
    if name == "WEBHOOKS":
        return _webhook_models()
    if name == "BUS_DETAILS":
        return _bus_models()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def bus_detail(event_type: str, payload: Mapping[str, Any], *, event_id: UUID, created_at: datetime) -> str:
    """The ``Detail`` of a results bus entry: the payload parsed by its model (a malformed event is refused
    here, never published), with its event id and commit time; compact, keys sorted."""
    if event_type not in _bus_models():
        raise UnknownEventType(f"{event_type!r} is not published on the results bus")
    event = parse_payload(event_type, payload)
    detail = _bus_models()[event_type](**event.model_dump(), event_id=event_id, occurred_at=created_at)
    return json.dumps(detail.model_dump(mode="json"), separators=(",", ":"), sort_keys=True)


# Webhook body components are named apart from the API's own (both have a JobLinks, say).
WEBHOOK_COMPONENT_PREFIX = "Webhook."


def openapi_webhooks() -> tuple[dict[str, Any], dict[str, Any]]:
    """The OpenAPI 3.1 ``webhooks`` section (one POST per webhook event type, its body the same model as the
    committed ``.webhook.json`` schema) and the component schemas it refers to."""
    keys, definitions = models_json_schema(
        [(body, "serialization") for body in _webhook_models().values()],
        ref_template="#/components/schemas/" + WEBHOOK_COMPONENT_PREFIX + "{model}",
    )
    components = {WEBHOOK_COMPONENT_PREFIX + name: schema for name, schema in definitions["$defs"].items()}
    webhooks = {
        event_type: {
            "post": {
                "summary": f"{event_type}, sent to each endpoint subscribed to it",
                "description": inspect.cleandoc(PAYLOADS[event_type].__doc__ or ""),
                "operationId": f"webhook_{event_type.replace('.', '_')}",
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": keys[(body, "serialization")]}},
                },
                "responses": {
                    "2XX": {"description": "Received; any other status is retried on the delivery schedule."}
                },
            }
        }
        for event_type, body in _webhook_models().items()
    }
    return webhooks, components


def schema_documents() -> dict[str, dict[str, Any]]:
    """Every JSON Schema file by name: each event's payload, for webhook events the body delivered, and for
    outcome events the results bus detail."""
    documents: dict[str, dict[str, Any]] = {}
    for event_type, payload in PAYLOADS.items():
        documents[f"{event_type}.payload.json"] = _document(payload, f"{event_type}.payload")
    for event_type, body in _webhook_models().items():
        documents[f"{event_type}.webhook.json"] = _document(body, f"{event_type}.webhook")
    for event_type, detail in _bus_models().items():
        documents[f"{event_type}.bus.json"] = _document(detail, f"{event_type}.bus")
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
