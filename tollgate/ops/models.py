"""The operations function's requests and responses: one typed model per command, one per result, and the
problem an error becomes. The CLI builds these requests and reads these results; the function parses the
same models, so the two cannot drift apart."""

from __future__ import annotations

import unicodedata
from decimal import Decimal
from typing import Annotated, Any, Literal
from uuid import UUID

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints, TypeAdapter

from tollgate.core.job_states import JobState
from tollgate.delivery.deliveries import DeliveryList
from tollgate.delivery.endpoints import EndpointList
from tollgate.jobtypes.registry import JobTypeName, ReviewReasonCode
from tollgate.review.models import Decision, ReviewDecided, ReviewPage, ReviewView
from tollgate.support.service import (
    ACTOR_MAX,
    REASON_MAX,
    REASON_MIN,
    BulkMove,
    JobDetail,
    JobSummary,
    RedriveItem,
)
from tollgate.tenants.listing import MAX_TENANTS_LISTED, KeyList, KeyView, TenantList

__all__ = ["KeyList", "KeyView", "TenantList"]  # the tenants' views, answered here as the CLI prints them
from tollgate.tenants.retention import MAX_RETENTION_DAYS
from tollgate.usage.service import UsageReport

# Line breaks and tabs a reason or a note may hold; every other control character is refused.
TEXT_LAYOUT = frozenset("\t\n\r")


def _no_controls(allowed: frozenset[str]) -> AfterValidator:
    """Refuses control characters (Unicode Cc) other than ``allowed``. PostgreSQL text cannot hold NUL, so
    one would fail in the database after the command had started (no answer at all, before this check);
    the others have no place in a name and would garble a listing or a terminal, so they are refused here,
    at the boundary, before anything is written."""

    def check(value: str) -> str:
        for character in value:
            if character not in allowed and unicodedata.category(character) == "Cc":
                raise ValueError(f"must not contain control characters such as {character!r}")
        return value

    return AfterValidator(check)


# One line of printable text: names of tenants, suppliers and job types, ids.
Name = Annotated[
    str, StringConstraints(strip_whitespace=True, min_length=1, max_length=100), _no_controls(frozenset())
]
Reason = Annotated[
    str,
    StringConstraints(strip_whitespace=True, min_length=REASON_MIN, max_length=REASON_MAX),
    _no_controls(TEXT_LAYOUT),
]
Text = Annotated[
    str, StringConstraints(strip_whitespace=True, min_length=1, max_length=1000), _no_controls(frozenset())
]
Note = Annotated[
    str, StringConstraints(strip_whitespace=True, min_length=3, max_length=1000), _no_controls(TEXT_LAYOUT)
]
SupplierName = Annotated[
    str, StringConstraints(strip_whitespace=True, min_length=1, max_length=300), _no_controls(frozenset())
]
Iban = Annotated[str, StringConstraints(max_length=64), _no_controls(frozenset())]


class Command(BaseModel):
    """A request to the operations function. ``command`` names the use case; unknown fields are refused, so
    a typo in a script is an error rather than an option silently left at its default."""

    model_config = ConfigDict(extra="forbid", frozen=True)


# Tenants and keys.


class CreateTenant(Command):
    command: Literal["tenants.create"] = "tenants.create"
    name: Name
    scopes: list[str] | None = Field(default=None, description="Scope names; every scope when absent.")


class AddSupplier(Command):
    command: Literal["tenants.add-supplier"] = "tenants.add-supplier"
    tenant: Name
    supplier: SupplierName
    iban: Iban | None = None


class SetRetention(Command):
    command: Literal["tenants.set-retention"] = "tenants.set-retention"
    tenant: Name
    days: int | None = Field(ge=1, le=MAX_RETENTION_DAYS, description="None: the deployment's default.")


class SetUnverifiedIbans(Command):
    command: Literal["tenants.unverified-ibans"] = "tenants.unverified-ibans"
    tenant: Name
    accept: bool = Field(description="True: an IBAN of a supplier with none on file passes; False: review.")


class SetBudget(Command):
    command: Literal["tenants.budget"] = "tenants.budget"
    tenant: Name
    monthly_usd: Decimal | None = Field(ge=0, lt=Decimal(10) ** 8, allow_inf_nan=False)


class ListTenants(Command):
    command: Literal["tenants.list"] = "tenants.list"
    limit: int = Field(default=100, ge=1, le=MAX_TENANTS_LISTED)


class SyncUsageKeys(Command):
    command: Literal["tenants.sync-usage-keys"] = "tenants.sync-usage-keys"


class CreateKey(Command):
    command: Literal["keys.create"] = "keys.create"
    tenant: Name
    scopes: list[str] | None = None


class ListKeys(Command):
    command: Literal["keys.list"] = "keys.list"
    tenant: Name


class RevokeKey(Command):
    command: Literal["keys.revoke"] = "keys.revoke"
    tenant: Name
    key_id: UUID


# Jobs, dead letters and deliveries (the support use cases write their own audit rows).


class ListJobs(Command):
    command: Literal["jobs.list"] = "jobs.list"
    state: JobState | None = None
    tenant: Name | None = None
    job_type: JobTypeName | None = None
    limit: int = Field(default=50, ge=1, le=1000)


class ShowJob(Command):
    command: Literal["jobs.show"] = "jobs.show"
    job_id: UUID


class RetryJob(Command):
    command: Literal["jobs.retry"] = "jobs.retry"
    job_id: UUID
    reason: Reason


class ListDeadLetters(Command):
    command: Literal["dlq.list"] = "dlq.list"
    job_type: Name | None = None
    limit: int = Field(default=50, ge=1, le=500)


class ShowDeadLetter(Command):
    command: Literal["dlq.show"] = "dlq.show"
    message_id: Text
    job_type: Name | None = None


class RedriveDeadLetters(Command):
    command: Literal["dlq.redrive"] = "dlq.redrive"
    reason: Reason
    job_type: Name | None = None
    dry_run: bool = False
    max_per_second: float = Field(default=5.0, ge=0.1, le=100)
    include_failed: bool = False
    limit: int = Field(default=100, ge=1, le=10_000)


class MoveAllDeadLetters(Command):
    command: Literal["dlq.move-all"] = "dlq.move-all"
    reason: Reason
    job_type: Name | None = None
    max_per_second: int = Field(default=10, ge=1, le=500)


class ListEndpoints(Command):
    command: Literal["deliveries.endpoints"] = "deliveries.endpoints"
    tenant: Name


class ListDeliveries(Command):
    command: Literal["deliveries.list"] = "deliveries.list"
    tenant: Name
    endpoint: UUID
    limit: int = Field(default=20, ge=1, le=100)


class ReplayDelivery(Command):
    command: Literal["deliveries.replay"] = "deliveries.replay"
    tenant: Name
    endpoint: UUID
    delivery: UUID
    reason: Reason


# Reviews and usage.


class ListReviews(Command):
    command: Literal["reviews.list"] = "reviews.list"
    reason: ReviewReasonCode | None = None
    tenant: Name | None = None
    limit: int = Field(default=50, ge=1, le=1000)


class ShowReview(Command):
    command: Literal["reviews.show"] = "reviews.show"
    job_id: UUID


class DecideReview(Command):
    command: Literal["reviews.decide"] = "reviews.decide"
    job_id: UUID
    decision: Decision
    note: Note
    corrections: dict[str, Any] | None = None
    expect_version: int | None = Field(default=None, ge=1)


class GetUsage(Command):
    command: Literal["usage"] = "usage"
    tenant: Name | None = None
    from_day: Name | None = None
    to_day: Name | None = None
    group_by: Name = "job_type"


OpsRequest = Annotated[
    CreateTenant
    | ListTenants
    | AddSupplier
    | SetRetention
    | SetUnverifiedIbans
    | SetBudget
    | SyncUsageKeys
    | CreateKey
    | ListKeys
    | RevokeKey
    | ListJobs
    | ShowJob
    | RetryJob
    | ListDeadLetters
    | ShowDeadLetter
    | RedriveDeadLetters
    | MoveAllDeadLetters
    | ListEndpoints
    | ListDeliveries
    | ReplayDelivery
    | ListReviews
    | ShowReview
    | DecideReview
    | GetUsage,
    Field(discriminator="command"),
]
REQUEST: TypeAdapter[OpsRequest] = TypeAdapter(OpsRequest)


# Results.


class TenantCreated(BaseModel):
    """The new tenant and its first key, which is shown this once and stored nowhere."""

    tenant_id: UUID
    name: str
    api_key: str
    key_prefix: str
    audit_id: int


class KeyCreated(BaseModel):
    key_id: UUID
    api_key: str
    key_prefix: str
    scopes: list[str]
    audit_id: int


class UsageKeysSynced(BaseModel):
    """The tenants that got their API Gateway key on the stage's usage plan."""

    tenants: list[UUID]
    audit_id: int


class Audited(BaseModel):
    """A change that was made, and the audit row that records it."""

    audit_id: int


class JobList(BaseModel):
    jobs: list[JobSummary]


class DeadLetterView(BaseModel):
    """A dead letter, its job's state, and what a redrive would do (or did) with it."""

    job_type: str
    message_id: str
    job_id: UUID | None
    receive_count: int
    job_state: str | None
    decision: str
    why: str
    done: bool = False
    audit_id: int | None = None

    @classmethod
    def of(cls, item: RedriveItem) -> DeadLetterView:
        return cls(
            job_type=item.letter.job_type,
            message_id=item.letter.message_id,
            job_id=item.letter.job_id,
            receive_count=item.letter.receive_count,
            job_state=item.job_state,
            decision=item.decision.value,
            why=item.why,
            done=item.done,
            audit_id=item.audit_id,
        )


class DeadLetters(BaseModel):
    items: list[DeadLetterView]


class DeadLetterShown(BaseModel):
    item: DeadLetterView
    # The message body as JSON when it parses, else {"unparseable_body": <text>}.
    body: Any


class Redriven(BaseModel):
    dry_run: bool
    items: list[DeadLetterView]


class MoveView(BaseModel):
    job_type: str
    task_handle: str
    audit_id: int

    @classmethod
    def of(cls, move: BulkMove) -> MoveView:
        return cls(job_type=move.job_type, task_handle=move.task_handle, audit_id=move.audit_id)


class MovesStarted(BaseModel):
    moves: list[MoveView]


RESULTS: dict[str, type[BaseModel]] = {
    "tenants.create": TenantCreated,
    "tenants.list": TenantList,
    "tenants.add-supplier": Audited,
    "tenants.set-retention": Audited,
    "tenants.unverified-ibans": Audited,
    "tenants.budget": Audited,
    "tenants.sync-usage-keys": UsageKeysSynced,
    "keys.create": KeyCreated,
    "keys.list": KeyList,
    "keys.revoke": Audited,
    "jobs.list": JobList,
    "jobs.show": JobDetail,
    "jobs.retry": Audited,
    "dlq.list": DeadLetters,
    "dlq.show": DeadLetterShown,
    "dlq.redrive": Redriven,
    "dlq.move-all": MovesStarted,
    "deliveries.endpoints": EndpointList,
    "deliveries.list": DeliveryList,
    "deliveries.replay": Audited,
    "reviews.list": ReviewPage,
    "reviews.show": ReviewView,
    "reviews.decide": ReviewDecided,
    "usage": UsageReport,
}


class OpsProblem(BaseModel):
    """An error, as RFC 9457 problem+json. ``type`` is a Tollgate problem type (``invalid-request``,
    ``not-found``…), or ``dependency-unavailable`` when the database or an AWS service could not be reached;
    ``extensions`` carry what the use case attached (a refused correction's reasons, validation errors)."""

    type: str
    title: str
    status: int
    detail: str
    extensions: dict[str, Any] = Field(default_factory=dict)


# Who an audit row names: the caller's IAM ARN, at most as long as the audit table allows.
CALLER_MAX = ACTOR_MAX
