"""Every entrypoint's configuration: one pydantic settings model each, read from the environment once.

Field names map to upper-case environment variables (``database_url`` <- ``DATABASE_URL``). The CDK stacks
set exactly these variables; an infrastructure test compares each function's environment with its model.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Annotated, Any

import certifi
from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from tollgate.core.tiers import SERVICE_TIERS, ServiceTier
from tollgate.execution.llm.output import StructuredOutput
from tollgate.jobtypes.registry import JOB_TYPES

REPO_ROOT = Path(__file__).resolve().parent.parent
# A checkout keeps the migrations at its top; the wheel carries them inside the package (pyproject's
# force-include), so an installed `tollgate db migrate` finds them without a checkout.
_PACKAGED_MIGRATIONS = Path(__file__).resolve().parent / "_migrations"
MIGRATIONS_DIR = _PACKAGED_MIGRATIONS if _PACKAGED_MIGRATIONS.is_dir() else REPO_ROOT / "migrations"
# The CA bundle deployed database connections verify the server against: certifi's copy of Mozilla's roots,
# shipped with the package's dependencies in the Lambda layer and the worker image. It holds Amazon Root CA
# 1-4, which RDS Proxy's ACM certificates chain to. It does not hold the RDS CAs (rds-ca-rsa2048-g1 and
# the others) that an Aurora cluster's own endpoint presents: no package on PyPI ships those, so the stacks
# point DATABASE_CA_BUNDLE at the bundle layers/build.py writes (these roots plus Amazon's RDS bundle).
SHIPPED_CA_BUNDLE = Path(certifi.where())


class DatabaseSettings(BaseSettings):
    """How to reach PostgreSQL: a URL (local, tests) or a Secrets Manager secret (AWS, via RDS Proxy)."""

    model_config = SettingsConfigDict(extra="ignore", frozen=True)

    database_url: SecretStr | None = Field(
        default=None, description="libpq connection URL; wins over the secret when set."
    )
    database_secret_arn: str | None = Field(
        default=None, description="Secrets Manager secret with username/password/host/port/dbname."
    )
    database_host: str | None = Field(
        default=None,
        description="Host to connect to instead of the secret's: RDS Proxy, or without one the writer.",
    )
    database_ca_bundle: Path | None = Field(
        default=None,
        description="PEM file of the CAs a deployed connection (the secret path, always "
        "`sslmode=verify-full`) trusts; unset, the bundle shipped with the package (Mozilla's roots via "
        "certifi, which include the Amazon roots RDS Proxy's certificates chain to). A direct connection to "
        "the Aurora cluster needs Amazon's RDS CAs too: deployed stacks set the bundle layers/build.py "
        "writes (these roots and Amazon's RDS bundle). DATABASE_URL connections ignore it.",
    )
    database_role: str = Field(
        default="tollgate_app",
        description="Role assumed in every transaction; a non-owner, so row-level security applies.",
    )
    database_pool_size: int = Field(default=4, ge=1, le=64, description="Connections kept per process.")
    database_wait_seconds: float = Field(
        default=10.0,
        gt=0,
        le=60,
        description="Longest wait for a connection before giving up (the API then answers 503 Retry-After).",
    )

    @model_validator(mode="after")
    def _one_source(self) -> DatabaseSettings:
        if self.database_url is None and self.database_secret_arn is None:
            raise ValueError("set DATABASE_URL or DATABASE_SECRET_ARN")
        if self.database_url is None and not self.ca_bundle.is_file():
            # Checked at cold start: libpq would only say so at the first connection, as a login failure.
            raise ValueError(f"DATABASE_CA_BUNDLE {self.ca_bundle} is not a file")
        return self

    @property
    def ca_bundle(self) -> Path:
        """The CA bundle the secret path verifies the server with."""
        return self.database_ca_bundle or SHIPPED_CA_BUNDLE


class AdmissionSettings(BaseSettings):
    """Limits checked before a job is accepted."""

    model_config = SettingsConfigDict(extra="ignore", frozen=True)

    tenant_max_pending_jobs: int = Field(default=1000, ge=1, description="Unfinished jobs per tenant.")
    tenant_max_pending_bytes: int = Field(
        default=512 * 1024 * 1024, ge=1, description="Document bytes of unfinished jobs per tenant."
    )
    tenant_max_pending_tokens: int = Field(
        default=20_000_000, ge=1, description="Estimated tokens of unfinished jobs per tenant."
    )
    system_max_backlog: int = Field(
        default=100_000, ge=1, description="Unfinished jobs across all tenants before answering 503."
    )
    admission_retry_after_seconds: int = Field(
        default=30, ge=1, description="Retry-After sent with 429 and 503 admission refusals."
    )


class ExtractionSettings(BaseSettings):
    """Shared by acceptance (it estimates tokens) and the worker (it asks for at most this many)."""

    model_config = SettingsConfigDict(extra="ignore", frozen=True)

    max_output_tokens: int = Field(
        default=4096, ge=1, description="Completion tokens reserved per attempt (part of the estimate)."
    )


class PricingSettings(BaseSettings):
    """Shared by acceptance (it estimates a job's cost against spend budgets) and the worker (it records each
    attempt's cost and stops before a call that would pass a budget): one price table for both."""

    model_config = SettingsConfigDict(extra="ignore", frozen=True)

    model_prices: dict[str, tuple[float, float]] = Field(
        default={"gpt-4.1-mini": (0.40, 1.60), "gpt-4.1": (2.00, 8.00)},
        description="USD per million input and output tokens, per model (JSON); check the provider's prices.",
    )
    system_monthly_budget_usd: float | None = Field(
        default=None,
        ge=0,
        description="Spend budget in USD per UTC month across all tenants; unset is none. Admission refuses "
        "(429 spend-budget-exhausted) and workers stop calling when it would be passed.",
    )
    batch_price_factor: float = Field(
        default=0.5,
        gt=0,
        le=1,
        description="The Batch API's price as a share of the list price: an attempt made through a provider "
        "batch records this share of its list cost as paid and the rest as its discount.",
    )


class ApiSettings(DatabaseSettings, AdmissionSettings, ExtractionSettings, PricingSettings):
    """The acceptance API Lambda."""

    documents_bucket: str = Field(description="Versioned S3 bucket holding tenants' documents.")
    max_document_bytes: int = Field(
        default=2 * 1024 * 1024, ge=1024, description="Largest OCR document accepted inline or by reference."
    )
    document_row_max_bytes: int = Field(
        default=32 * 1024,
        ge=0,
        description="Documents up to this size (canonical form) are kept in their database row, committed "
        "with the job, instead of an S3 object put before it; 0 puts every document in S3.",
    )
    default_deadline_seconds: int = Field(
        default=3600, ge=60, description="Deadline of a job that does not set one."
    )
    max_deadline_seconds: int = Field(default=7 * 24 * 3600, ge=60, description="Longest deadline allowed.")
    default_max_attempts: int = Field(default=5, ge=1, le=50, description="Attempt budget of a new job.")
    relay_function_name: str | None = Field(
        default=None, description="Outbox relay function nudged (asynchronously) after each accepted job."
    )
    webhook_state_machine_arn: str | None = Field(
        default=None, description="Webhook dispatcher state machine; replays answer 503 without it."
    )
    webhooks_allow_private_targets: bool = Field(
        default=False,
        description="Local development only: register endpoints with plain http and private addresses.",
    )


class KeyCacheSettings(BaseSettings):
    """How long a resolved API key stays cached: the authorizer's setting, which `tollgate tenants keys
    revoke` also reads to say how long a revoked key may still be admitted."""

    model_config = SettingsConfigDict(extra="ignore", frozen=True)

    api_key_cache_ttl_seconds: int = Field(
        default=60, ge=0, description="How long a resolved key stays cached in a warm function."
    )


class AuthorizerSettings(KeyCacheSettings, DatabaseSettings):
    """The API key authorizer Lambda."""


class StageModeSettings(BaseSettings):
    """`tollgate --stage|--ops-url`: the region of the operator's shell when the function's URL does not name
    one. AWS_REGION is what the AWS CLI and most SDKs read; botocore reads only AWS_DEFAULT_REGION (and the
    profile's region)."""

    model_config = SettingsConfigDict(extra="ignore", frozen=True)

    aws_region: str | None = Field(default=None, description="The region the stage is deployed in.")
    aws_default_region: str | None = Field(default=None, description="Used when AWS_REGION is not set.")


class TenantProvisioningSettings(BaseSettings):
    """What `tollgate tenants create|sync-usage-keys` need besides the database: where usage keys go."""

    model_config = SettingsConfigDict(extra="ignore", frozen=True)

    usage_plan_id: str | None = Field(
        default=None,
        description="The stage's API Gateway usage plan (ApiStack output UsagePlanId); each tenant gets an "
        "API Gateway key on it. Unset only locally, where API Gateway does not run and tenants get none.",
    )


class MigrateSettings(DatabaseSettings):
    """The migration custom resource Lambda (connects as the owner, so no role switch)."""

    database_role: str = Field(default="", description="Empty: migrations run as the connecting owner.")
    migrations_dir: Path = Field(default=MIGRATIONS_DIR, description="Folder of numbered SQL files.")


class SystemDatabaseSettings(DatabaseSettings):
    """Background work across tenants runs as tollgate_system."""

    database_role: str = Field(default="tollgate_system", description="Role for work across tenants.")


def check_job_type_map(variable: str, urls: dict[str, str], what: str) -> None:
    """A map by job type must name every registered type and nothing else: a type without a queue would
    have its jobs' signals fail at the relay, or its dead letters go unseen, long after the start."""
    missing = [name for name in JOB_TYPES if not urls.get(name)]
    unknown = sorted(set(urls) - set(JOB_TYPES))
    problems = [f"{variable} has no {what} for job type {name!r}" for name in missing]
    problems += [
        f"{variable} names job type {name!r}, which is not registered (registered: {', '.join(JOB_TYPES)})"
        for name in unknown
    ]
    if problems:
        raise ValueError("; ".join(problems))


class NotificationSettings(SystemDatabaseSettings):
    """Live notifications (DESIGN §8): the WebSocket API's route Lambda and the notifier Lambda, which share
    the connections table, the replay window and the caps."""

    connections_table: str = Field(
        description="DynamoDB table of the WebSocket connections (TTL on expires_at)."
    )
    websocket_endpoint: str = Field(
        description="The WebSocket stage's management endpoint (https://<api>.execute-api.<region>.amazonaws.com"
        "/<stage>), where messages are posted to connections."
    )
    replay_max_events: int = Field(
        default=1_000,
        ge=1,
        le=100_000,
        description="Most events a subscribe replays from its cursor; further behind, the client is told to "
        "resync (fetch a fresh snapshot).",
    )
    replay_max_hours: float = Field(
        default=24.0,
        gt=0,
        description="How far back a cursor may reach: older events are not kept for replay, and such a "
        "cursor gets a resync.",
    )
    max_connections_per_tenant: int = Field(
        default=100, ge=1, description="Open WebSocket connections one tenant may hold at once."
    )
    connection_ttl_seconds: int = Field(
        default=7_200,
        ge=60,
        description="A connection's record lives this long without activity (API Gateway ends a connection "
        "after 2 h in any case).",
    )
    key_check_seconds: int = Field(
        default=60,
        ge=1,
        description="How long a connection's API key is trusted before it is checked again: a revoked key's "
        "connections are closed within this time (the authorizer's cache time).",
    )
    replays_per_connection: int = Field(
        default=10,
        ge=1,
        description="Subscribes that replay (from a cursor behind the latest event) one connection may make "
        "per REPLAY_ALLOWANCE_SECONDS; past it a subscribe gets a 429 error saying when to retry.",
    )
    replays_per_tenant: int = Field(
        default=200,
        ge=1,
        description="Subscribes that replay all of a tenant's connections may make together per "
        "REPLAY_ALLOWANCE_SECONDS; above MAX_CONNECTIONS_PER_TENANT, so every connection can resume at once "
        "after a reconnect.",
    )
    replay_allowance_seconds: int = Field(
        default=60,
        ge=1,
        le=86_400,
        description="The window the replay allowances count in (fixed windows, from the epoch).",
    )


class JobQueueSettings(BaseSettings):
    """Each job type's SQS FIFO queue, by type name (a JSON object), as the relay sends and the worker
    receives."""

    model_config = SettingsConfigDict(extra="ignore", frozen=True)

    job_queue_urls: dict[str, str] = Field(
        description="URL of each job type's SQS FIFO queue, by job type (JSON), e.g. "
        '`{"invoice_extraction": "https://sqs...", ...}`; every registered type needs one.'
    )

    @model_validator(mode="after")
    def _every_type_has_a_queue(self) -> JobQueueSettings:
        check_job_type_map("JOB_QUEUE_URLS", self.job_queue_urls, "queue")
        return self


class RelaySettings(SystemDatabaseSettings, JobQueueSettings):
    """The outbox relay Lambda."""

    relay_batch_size: int = Field(default=100, ge=1, le=1000, description="Outbox rows claimed per batch.")
    relay_max_batches: int = Field(default=20, ge=1, description="Batches per invocation before returning.")
    relay_claim_seconds: int = Field(
        default=60, ge=5, description="Claim lease on a batch; a crashed relay's rows return after it."
    )
    message_group_shards: int = Field(
        default=8, ge=1, le=64, description="FIFO message groups per tenant (its parallelism in the queue)."
    )
    webhook_state_machine_arn: str | None = Field(
        default=None,
        description="Webhook dispatcher state machine; without it deliveries are recorded but not started.",
    )
    results_bus_name: str | None = Field(
        default=None,
        description="EventBridge bus every outcome event is also published on (`tollgate-<stage>-results`, "
        "set in every deployed stage); unset, outcome events go to webhooks only.",
    )
    results_event_source: str = Field(
        default="tollgate",
        min_length=1,
        description="Source of the results bus events (`tollgate.<stage>` when deployed); rules match on it.",
    )
    notifications_queue_url: str | None = Field(
        default=None,
        description="SQS FIFO queue of the live notifier (`tollgate-<stage>-notifications.fifo`, set in "
        "every deployed stage); unset, job state changes are confirmed as published to nobody.",
    )


class RetrySettings(BaseSettings):
    """The one retry layer's policy: full jitter, capped, never past the deadline."""

    model_config = SettingsConfigDict(extra="ignore", frozen=True)

    retry_base_seconds: float = Field(default=2.0, gt=0, description="Backoff ceiling of the first retry.")
    retry_cap_seconds: float = Field(default=300.0, gt=0, description="Largest backoff ceiling.")
    attempt_timeout_seconds: float = Field(
        default=120.0,
        gt=0,
        description="Longest attempt; a retry must be able to finish before the deadline.",
    )


class RetentionSettings(BaseSettings):
    """How long the scheduler keeps what every job leaves behind, and how much it deletes per tick."""

    model_config = SettingsConfigDict(extra="ignore", frozen=True)

    retention_default_days: int = Field(
        default=30,
        ge=1,
        le=3650,
        description="How long a finished job (its result, attempts, webhook deliveries and Idempotency-Key) "
        "is kept before it is archived to S3 and deleted, unless the tenant sets its own retention_days. A "
        "replay of the key after that is a new job.",
    )
    retention_outbox_days: int = Field(
        default=7,
        ge=1,
        le=3650,
        description="Published outbox events are deleted this many days after publishing.",
    )
    retention_inbox_days: int = Field(
        default=21,
        ge=1,
        le=3650,
        description="Execution inbox and quarantine rows are deleted this many days after receipt; above "
        "the 18 days an SQS message can live (4 in a job type's queue, 14 in its DLQ), so a redelivery finds "
        "its row.",
    )
    retention_state_event_hours: int = Field(
        default=48,
        ge=1,
        le=24 * 90,
        description="Live notifications' job state events are deleted this many hours after they happened; "
        "keep it above REPLAY_MAX_HOURS, the window a reconnecting client may replay.",
    )
    retention_batch_size: int = Field(
        default=500, ge=1, le=5000, description="Rows per retention batch; each batch is its own transaction."
    )
    retention_max_batches: int = Field(
        default=10, ge=1, le=1000, description="Retention batches per rule per tick."
    )


class SchedulerSettings(SystemDatabaseSettings, RetrySettings, RetentionSettings):
    """The scheduler Lambda (every minute)."""

    documents_bucket: str = Field(description="Versioned S3 bucket holding tenants' documents.")

    scheduler_batch_size: int = Field(
        default=500, ge=1, description="Jobs reaped or expired, and stalled deliveries restarted, per pass."
    )
    webhook_state_machine_arn: str | None = Field(
        default=None, description="Webhook dispatcher whose stalled deliveries the scheduler restarts."
    )
    delivery_stall_seconds: int = Field(
        default=900,
        ge=60,
        description="A PENDING delivery this long past its due attempt is restarted under a new execution.",
    )


class LimiterSettings(BaseSettings):
    """The provider budget every worker shares: limits per provider pool, and where the budget is kept."""

    model_config = SettingsConfigDict(extra="ignore", frozen=True)

    provider_pool: str = Field(
        default="openai:default", description="Scope of the provider budget: provider project + model pool."
    )
    provider_requests_per_minute: float = Field(default=500, gt=0, description="Budget: requests per minute.")
    provider_tokens_per_minute: float = Field(default=200_000, gt=0, description="Budget: tokens per minute.")
    provider_max_in_flight: int = Field(default=50, ge=1, description="Budget: calls in flight at once.")
    provider_structured_output: StructuredOutput = Field(
        default=StructuredOutput.JSON_SCHEMA,
        description="What the pool's provider takes: `json_schema` (OpenAI), `json_object` with a schema "
        "(llama.cpp-style servers) or `prompt` (the schema in the prompt only). Every answer is parsed "
        "strictly: one JSON object, nothing around it.",
    )
    provider_batch_enqueued_tokens: int = Field(
        default=2_000_000,
        ge=1,
        description="The Batch API's enqueued prompt tokens per model: what all batches not yet ended may "
        "hold at once, a pool of its own beside the per-minute budget.",
    )
    provider_batch_enqueued_tokens_by_model: dict[str, int] = Field(
        default={},
        description="Per-model overrides of PROVIDER_BATCH_ENQUEUED_TOKENS (JSON, model -> tokens).",
    )
    limiter_table: str | None = Field(
        default=None,
        description="DynamoDB table of the shared budget; unset means a per-process budget (local only).",
    )
    limiter_shards: int = Field(
        default=0,
        ge=0,
        le=64,
        description="DynamoDB items the shared budget is split across; 0 derives it from the request rate.",
    )
    limiter_permit_ttl_seconds: float = Field(
        default=300.0,
        gt=0,
        description=(
            "Lifetime of an in-flight permit: a dead worker's permit returns after it. Keep it above "
            "ATTEMPT_TIMEOUT_SECONDS."
        ),
    )
    limiter_unavailable_allowance_per_minute: int = Field(
        default=0,
        ge=0,
        description="Calls per minute per process while the budget's table is unreachable; 0 fails closed.",
    )
    limiter_aimd_decrease: float = Field(
        default=0.5, gt=0, lt=1, description="The effective rate is multiplied by this on a provider 429."
    )
    limiter_aimd_increase: float = Field(
        default=0.02,
        gt=0,
        le=1,
        description="Share of the configured rate added back per successful call, up to the configured rate.",
    )
    limiter_share_normal: float = Field(
        default=0.8,
        gt=0,
        le=1,
        description="Share of the pool's in-flight calls and tokens the normal tier may fill while a "
        "high-tier call waits for budget; the rest is kept for high. With no high-tier call waiting, normal "
        "may use the whole pool.",
    )
    limiter_share_batch: float = Field(
        default=0.5,
        gt=0,
        le=1,
        description="Share of the pool the batch tier may fill while a high- or normal-tier call waits; at "
        "most limiter_share_normal. With no higher tier waiting, batch may use the whole pool.",
    )
    limiter_recall_seconds: float = Field(
        default=1.0,
        gt=0,
        le=60,
        description="How long one denied higher-tier call holds lower tiers at their shares unless it asks "
        "again (a waiting call asks every ~0.1 s; its grant ends the hold at once).",
    )

    @field_validator("provider_batch_enqueued_tokens_by_model")
    @classmethod
    def _batch_limits_positive(cls, limits: dict[str, int]) -> dict[str, int]:
        if any(tokens < 1 for tokens in limits.values()):
            raise ValueError("every model's batch pool must hold at least one token")
        return limits

    @model_validator(mode="after")
    def _tiers_in_order(self) -> LimiterSettings:
        if self.limiter_share_batch > self.limiter_share_normal:
            raise ValueError("LIMITER_SHARE_BATCH exceeds LIMITER_SHARE_NORMAL: batch would outrank normal")
        return self


class BatchSettings(BaseSettings):
    """The batch path (DESIGN §7): batch-tier jobs through the provider's Batch API."""

    model_config = SettingsConfigDict(extra="ignore", frozen=True)

    batch_api: bool = Field(
        default=False,
        description="Send batch-tier jobs whose deadline leaves the Batch API's 24 h window, a settle and an "
        "immediate attempt (BATCH_SETTLE_SECONDS, BATCH_FALLBACK_SECONDS) through the provider's Batch API, "
        "at its price; the worker serving the batch tier then runs the batcher and poller instead of "
        "batch-tier slots. Retries and jobs back from an expired batch run on the immediate path.",
    )
    batch_max_requests: int = Field(
        default=1_000,
        ge=1,
        le=50_000,
        description="Request lines per batch file (the provider allows 50,000).",
    )
    batch_max_bytes: int = Field(
        default=100 * 1024 * 1024,
        ge=1024,
        le=200 * 1000 * 1000,
        description="Bytes per batch file (the provider allows 200 MB); the batcher holds a file in memory.",
    )
    batch_settle_seconds: float = Field(
        default=3_600.0, gt=0, description="Kept on a batched job's lease past the 24 h window, to settle it."
    )
    batch_fallback_seconds: float = Field(
        default=3_600.0,
        ge=0,
        description="Kept before a job's deadline for an immediate attempt after its batch, if it fails.",
    )
    batch_poll_seconds: float = Field(default=60.0, gt=0, description="How often an open batch is looked at.")
    batch_interval_seconds: float = Field(
        default=60.0, gt=0, description="Wait between the batcher's rounds, so jobs go out together."
    )
    batch_hold_seconds: float = Field(
        default=600.0,
        gt=0,
        description="A worker's time on a batch it prepares or settles before another takes it over.",
    )
    batch_budget_wait_seconds: float = Field(
        default=900.0,
        ge=0,
        description="How long a prepared file waits for room in the Batch API's enqueued-token budget before "
        "its jobs go back, to run on the immediate path.",
    )
    batch_tenant_max_jobs: int = Field(
        default=10_000, ge=1, description="Jobs one tenant may have waiting in provider batches at once."
    )


class WorkerSettings(
    BatchSettings,
    SystemDatabaseSettings,
    JobQueueSettings,
    RetrySettings,
    ExtractionSettings,
    LimiterSettings,
    PricingSettings,
):
    """The ECS worker: an ingress consumer per job type's queue, and execution slots."""

    documents_bucket: str = Field(description="Versioned S3 bucket holding tenants' documents.")
    ingress_wait_seconds: int = Field(default=20, ge=0, le=20, description="SQS long-poll wait.")
    ingress_failure_visibility_seconds: int = Field(
        default=30, ge=0, description="Delay before a message that failed is received again."
    )
    openai_api_key: SecretStr | None = Field(
        default=None,
        description="OpenAI API key; required when deployed. `tollgate local up` without it (and without "
        "OPENAI_BASE_URL) uses the built-in simulated provider.",
    )
    openai_base_url: str | None = Field(
        default=None, description="Any OpenAI-compatible endpoint instead of OpenAI's own."
    )
    model_small: str = Field(
        default="gpt-4.1-mini",
        description="Model for simple documents: within the job type's routing bounds (pages, characters, "
        "lines, language; see the job types table in the README).",
    )
    model_large: str = Field(default="gpt-4.1", description="Model for everything else, and for escalations.")
    escalate_to_large_model: bool = Field(
        default=True,
        description="Retry a job whose small-model result failed validation once on the large model before "
        "it goes to review (each attempt keeps its own model, tokens and cost).",
    )
    execution_slots: int = Field(default=4, ge=1, le=256, description="Attempts one worker runs at once.")
    worker_service_tiers: Annotated[tuple[ServiceTier, ...], NoDecode] = Field(
        default=SERVICE_TIERS,
        description="Service tiers whose jobs this worker claims, comma-separated (`high`, `normal`, "
        "`batch`); its slots look at them highest first. A deployed stage gives each tier service its own.",
    )
    lease_seconds: int = Field(default=60, ge=5, description="Lease on a claimed job; heartbeats extend it.")
    heartbeat_seconds: float = Field(default=15.0, gt=0, description="How often a running attempt renews.")
    tenant_max_in_flight: int = Field(
        default=8,
        ge=1,
        description="Running jobs per tenant and service tier across all workers (fairness cap).",
    )
    claim_idle_seconds: float = Field(
        default=2.0, gt=0, description="Wait between claims when nothing is runnable (or until nudged)."
    )
    relay_function_name: str | None = Field(
        default=None, description="Outbox relay function nudged after each job's final outcome."
    )
    drain_seconds: float = Field(
        default=100.0,
        ge=0,
        description="On SIGTERM, how long in-flight attempts may run before being handed back.",
    )
    worker_id: str = Field(
        default_factory=lambda: f"{socket.gethostname()}-{os.getpid()}",
        description="Names this process in leases and attempt records.",
    )
    deployed_stage: str | None = Field(
        default=None,
        description="The stage the worker is deployed in (set by the CDK); then it refuses to start without "
        "LIMITER_TABLE and a provider key. Unset for local runs.",
    )

    @field_validator("worker_service_tiers", mode="before")
    @classmethod
    def _tier_list(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = [part.strip() for part in value.split(",") if part.strip()]
        if isinstance(value, list | tuple):
            if not value:
                raise ValueError("a worker serves at least one service tier")
            if len(set(value)) != len(value):
                raise ValueError("a service tier is named twice")
            # Highest first whatever the order given: a slot looks at the tiers in this order.
            known = [tier for tier in SERVICE_TIERS if tier in value]
            return tuple(known) if len(known) == len(value) else value
        return value

    @model_validator(mode="after")
    def _deployed_promises(self) -> WorkerSettings:
        # No silent fallback that breaks a promise: a per-process budget lets N workers exceed the provider's
        # limits N times over, and a missing key would send a placeholder to the provider.
        if self.deployed_stage is None:
            if self.openai_api_key is None and self.openai_base_url is None:
                raise ValueError("set OPENAI_API_KEY (or OPENAI_BASE_URL for a compatible server)")
            return self
        missing = [
            problem
            for problem, broken in (
                (
                    "LIMITER_TABLE is not set (every worker must share one provider budget)",
                    not self.limiter_table,
                ),
                ("OPENAI_API_KEY is not set", self.openai_api_key is None),
            )
            if broken
        ]
        if missing:
            raise ValueError(
                f"a worker deployed in stage {self.deployed_stage!r} refuses to start: " + "; ".join(missing)
            )
        return self


class WebhookAttemptSettings(SystemDatabaseSettings):
    """The webhook attempt Lambda (a step of the dispatcher state machine)."""

    webhooks_allow_private_targets: bool = Field(
        default=False, description="Local development only: deliver to private addresses and plain http."
    )
    webhook_connect_timeout_seconds: float = Field(
        default=5.0, gt=0, description="Connect time cap per attempt."
    )
    webhook_total_timeout_seconds: float = Field(
        default=15.0, gt=0, description="Total time cap per attempt."
    )
    webhook_max_response_bytes: int = Field(
        default=64 * 1024, ge=1024, description="Most of a receiver's response that is read."
    )
    endpoint_disable_after_days: float = Field(
        default=5.0, gt=0, description="An endpoint failing for this long is disabled and its tenant told."
    )


class SupportDatabaseSettings(SystemDatabaseSettings):
    """The support CLI's commands that need only the database (``jobs``, ``deliveries``)."""

    webhook_state_machine_arn: str | None = Field(
        default=None, description="Webhook dispatcher state machine; replays answer 503 without it."
    )
    redrive_extra_attempts: int = Field(
        default=3, ge=1, le=20, description="Attempts a redriven or retried job gets on top of those it used."
    )
    redrive_deadline_seconds: int = Field(
        default=3600, ge=60, description="A redriven job's deadline is at least this far from now."
    )
    documents_bucket: str | None = Field(
        default=None,
        description="Versioned S3 bucket holding tenants' documents; `tollgate reviews show|decide` read a "
        "document too large for its row from it.",
    )


class SupportSettings(SupportDatabaseSettings, JobQueueSettings):
    """The support CLI (``tollgate jobs|dlq|deliveries``), against AWS or the local system; the ``dlq``
    commands need every job type's queue and dead-letter queue too."""

    job_dlq_urls: dict[str, str] = Field(
        description="URL of each job type's dead-letter queue, by job type (JSON); every registered type "
        "needs one."
    )

    @model_validator(mode="after")
    def _every_type_has_a_dlq(self) -> SupportSettings:
        check_job_type_map("JOB_DLQ_URLS", self.job_dlq_urls, "dead-letter queue")
        return self


class OpsSettings(SupportSettings, TenantProvisioningSettings):
    """The operations Lambda (``tollgate --stage <stage> ...``): every support and admin command, inside the
    VPC, as tollgate_system; the settings the support and tenants commands take, set by the stack instead of
    a shell."""
