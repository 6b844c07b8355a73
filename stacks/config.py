"""Per-stage deployment settings, read from CDK context (``cdk.json`` and ``-c key=value``).

One validated, frozen ``StageConfig`` is built per synth; stacks read nothing else from context.
"""

from __future__ import annotations

import ipaddress
import json
import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

import aws_cdk as cdk
from aws_cdk import aws_events as events
from aws_cdk import aws_logs as logs
from pydantic import BaseModel, ConfigDict, Field, create_model, field_validator, model_validator
from pydantic_settings import BaseSettings

from tollgate.core.tiers import SERVICE_TIERS, ServiceTier
from tollgate.execution.batch.deps import BatchConfig
from tollgate.settings import (
    AdmissionSettings,
    ApiSettings,
    AuthorizerSettings,
    BatchSettings,
    NotificationSettings,
    PricingSettings,
    RelaySettings,
    RetrySettings,
    SchedulerSettings,
    WebhookAttemptSettings,
    WorkerSettings,
)

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_LAYER_DIR = REPO_ROOT / "build" / "layer"

_SECTION_CONFIG = ConfigDict(frozen=True, extra="forbid")


def _settings_section(
    name: str, settings: type[BaseSettings], fields: Iterable[str], *, base: type[BaseModel] | None = None
) -> type[BaseModel]:
    """Copy some fields of a Lambda settings model (type, default, bounds) into a plain context model.

    Copying instead of retyping keeps one source of truth for defaults and limits, and a plain model
    never reads the synth machine's own environment the way a ``BaseSettings`` would. ``base`` adds fields
    that only the stack reads (it carries the section's frozen, extra-forbidding config).
    """
    definitions: dict[str, Any] = {
        field: (settings.model_fields[field].annotation, settings.model_fields[field]) for field in fields
    }
    if base is not None:
        return create_model(name, __base__=base, **definitions)
    return create_model(name, __config__=_SECTION_CONFIG, **definitions)


AdmissionLimits = _settings_section("AdmissionLimits", AdmissionSettings, AdmissionSettings.model_fields)
"""Admission limits the API Lambda enforces; the fields of ``AdmissionSettings``."""

JobLimits = _settings_section(
    "JobLimits",
    ApiSettings,
    (
        "max_document_bytes",
        "document_row_max_bytes",
        "default_deadline_seconds",
        "max_deadline_seconds",
        "default_max_attempts",
        "max_output_tokens",
    ),
)
"""Per-job limits and defaults the API Lambda applies at acceptance; fields of ``ApiSettings``."""

AuthorizerLimits = _settings_section("AuthorizerLimits", AuthorizerSettings, ("api_key_cache_ttl_seconds",))
"""The authorizer's own key cache; fields of ``AuthorizerSettings``."""

RelayLimits = _settings_section(
    "RelayLimits",
    RelaySettings,
    ("relay_batch_size", "relay_max_batches", "relay_claim_seconds", "message_group_shards"),
)
"""How much the outbox relay claims and sends per run; fields of ``RelaySettings``."""

RetryLimits = _settings_section("RetryLimits", RetrySettings, RetrySettings.model_fields)
"""The job retry policy. One section for both readers, the scheduler (reaped leases) and the worker (failed
attempts), so the two can never schedule retries differently; the fields of ``RetrySettings``."""

SchedulerLimits = _settings_section(
    "SchedulerLimits", SchedulerSettings, ("scheduler_batch_size", "delivery_stall_seconds")
)
"""The scheduler's batch per pass and when it restarts a stalled delivery; fields of ``SchedulerSettings``."""

RetentionLimits = _settings_section(
    "RetentionLimits",
    SchedulerSettings,
    (
        "retention_default_days",
        "retention_outbox_days",
        "retention_inbox_days",
        "retention_state_event_hours",
        "retention_batch_size",
        "retention_max_batches",
    ),
)
"""How long the scheduler keeps what jobs leave behind and how much it deletes per tick; fields of
``SchedulerSettings``. A tenant's own ``retention_days`` (``tollgate tenants set-retention``) wins over
``retention_default_days``."""

BatchPath = _settings_section("BatchPath", BatchSettings, BatchSettings.model_fields)
"""The batch path (batch-tier jobs through the provider's Batch API): on or off, file limits and its times;
the fields of ``BatchSettings``. Only the worker service that serves the batch tier acts on them."""

Pricing = _settings_section("Pricing", PricingSettings, PricingSettings.model_fields)
"""The price table and the optional system spend budget, one section for the two that must agree: the API
Lambda (cost estimates at admission) and the worker (attempt costs, the stop before a call); the fields of
``PricingSettings``."""

WorkerTuning = _settings_section(
    "WorkerTuning",
    WorkerSettings,
    (
        "ingress_wait_seconds",
        "ingress_failure_visibility_seconds",
        "model_small",
        "model_large",
        "escalate_to_large_model",
        "execution_slots",
        "lease_seconds",
        "heartbeat_seconds",
        "tenant_max_in_flight",
        "claim_idle_seconds",
        "provider_pool",
        "provider_requests_per_minute",
        "provider_tokens_per_minute",
        "provider_max_in_flight",
        "provider_structured_output",
        "limiter_share_normal",
        "limiter_share_batch",
        "limiter_recall_seconds",
        "drain_seconds",
    ),
)
"""The worker's models, prices, slots, leases, provider budget and what structured output the provider takes:
fields of ``WorkerSettings`` that need no resource. Not ``max_output_tokens``: the worker takes the API's
(``jobs``), which acceptance used."""

WebhookLimits = _settings_section(
    "WebhookLimits",
    WebhookAttemptSettings,
    (
        "webhook_connect_timeout_seconds",
        "webhook_total_timeout_seconds",
        "webhook_max_response_bytes",
        "endpoint_disable_after_days",
    ),
)
"""How one webhook attempt talks to a tenant's endpoint, and when a failing endpoint is disabled; fields of
``WebhookAttemptSettings``. Not ``webhooks_allow_private_targets``: it exists only to run the dispatcher
locally, and a deployed stage keeps its default."""


class NotificationsEdge(BaseModel):
    """What the Notifications stack itself reads: the WebSocket stage's throttle and the notifier's
    concurrency. The rest of the ``notifications`` section is ``NotificationSettings``' fields."""

    model_config = _SECTION_CONFIG

    throttle_rate: float = Field(
        default=50,
        gt=0,
        description="WebSocket stage: steady messages per second, connects and subscribes included, for all "
        "tenants together (API Gateway's default route throttle).",
    )
    throttle_burst: int = Field(default=100, ge=1, description="WebSocket stage: the throttle's burst.")
    notifier_max_concurrency: int = Field(
        default=5,
        ge=2,
        le=1000,
        description="Notifier Lambdas the notifications queue runs at once (SQS's event source allows 2 at "
        "least): each one reads events from PostgreSQL, so this bounds the connections live notifications "
        "take; a busier stage raises it as tenants with open connections grow.",
    )

    @model_validator(mode="after")
    def _burst_covers_rate(self) -> NotificationsEdge:
        if self.throttle_burst < self.throttle_rate:
            raise ValueError("notifications.throttle_burst must be at least throttle_rate")
        return self

    def function_environment(self) -> dict[str, str]:
        """The section's ``NotificationSettings`` fields as the route and notifier Lambdas read them."""
        return {
            name: value
            for name, value in settings_environment(self).items()
            if name.lower() in NotificationSettings.model_fields
        }


Notifications = _settings_section(
    "Notifications",
    NotificationSettings,
    (
        "replay_max_events",
        "replay_max_hours",
        "max_connections_per_tenant",
        "connection_ttl_seconds",
        "key_check_seconds",
        "replays_per_connection",
        "replays_per_tenant",
        "replay_allowance_seconds",
    ),
    base=NotificationsEdge,
)
"""Live notifications (WebSocket API): the stage's throttle and the notifier's concurrency
(``NotificationsEdge``), then the replay window, the per-tenant connection cap, the connection and key
times and the replay allowances, fields of ``NotificationSettings`` that both the route Lambda and the
notifier get."""


# The window of the web ACL's rate rule (waf_rate_limit counts requests in it).
WAF_RATE_WINDOW_SECONDS = 300

# What one webhook attempt does besides sending: load the delivery, record the outcome (through RDS Proxy).
WEBHOOK_ATTEMPT_DATABASE_SECONDS = 15

# How long a jobs-queue message may wait for a worker service scaled to zero: the queue-depth alarm, the
# scaling action and a Fargate task's start take a few minutes, but SQS publishes no metrics for a queue idle
# for six hours and its first ones after that can come up to about 15 minutes late.
WORKER_COLD_START_SECONDS = 1200

# Longest wait for a PostgreSQL connection in a stage whose cluster pauses: Aurora's resume takes about
# 15 s, and the API must still answer within API Gateway's 29 s.
RESUMING_DATABASE_WAIT_SECONDS = 20

# In a stage whose cluster pauses, PostgreSQL closes sessions idle this long (idle_session_timeout): a warm
# Lambda environment's pooled connection would otherwise keep the cluster awake for as long as the
# environment lives. Pools check a connection before lending it, so a closed one is simply replaced.
IDLE_SESSION_TIMEOUT_SECONDS = 60

# ECS sends SIGTERM, then SIGKILL this much later; Fargate allows no more.
WORKER_STOP_TIMEOUT_SECONDS = 120

# Fargate's CPU units -> the memory (MiB) each size accepts.
FARGATE_MEMORY = {
    256: (512, 1024, 2048),
    512: tuple(range(1024, 4097, 1024)),
    1024: tuple(range(2048, 8193, 1024)),
    2048: tuple(range(4096, 16385, 1024)),
    4096: tuple(range(8192, 30721, 1024)),
}


class WorkerTierService(BaseModel):
    """A worker service of its own for one service tier (``worker_tiers``). The service of the normal tier is
    the one ``worker`` and ``worker_min_tasks``/``worker_max_tasks`` size; it also runs the jobs of every tier
    that has no service of its own."""

    model_config = _SECTION_CONFIG

    execution_slots: int = Field(
        default=0,
        ge=0,
        le=256,
        description="Attempts one task of the tier's service runs at once; 0: the tier gets no service and "
        "the normal service runs its jobs.",
    )
    min_tasks: int = Field(
        default=1, ge=0, description="Scaling minimum of the tier's service; 0 as for worker_min_tasks."
    )
    max_tasks: int = Field(default=2, ge=1, le=100, description="Scaling ceiling of the tier's service.")
    claim_idle_seconds: float | None = Field(
        default=None,
        gt=0,
        description="The service's wait between claims when idle, instead of worker.claim_idle_seconds: a "
        "job's queue message may wake another tier's worker, so an idle service finds its tier's new jobs by "
        "looking, and a high tier may want to look more often.",
    )

    @model_validator(mode="after")
    def _bounds(self) -> WorkerTierService:
        if self.min_tasks > self.max_tasks:
            raise ValueError("min_tasks exceeds max_tasks")
        return self


class WorkerService(BaseModel):
    """One ECS worker service as the stack builds it: which tiers it claims, its slots and its scaling."""

    model_config = _SECTION_CONFIG

    tier: ServiceTier
    serves: tuple[ServiceTier, ...]
    execution_slots: int
    min_tasks: int
    max_tasks: int
    claim_idle_seconds: float


def settings_environment(section: BaseModel) -> dict[str, str]:
    """Render a settings section as environment variables (upper-case names, string values).

    Structured values (a dict of model prices) become JSON, which is how pydantic-settings reads them back.
    An unset optional value (None) is left out, so the function reads its default, not the text "None".
    """
    return {
        name.upper(): json.dumps(value) if isinstance(value, dict | list) else str(value)
        for name, value in section.model_dump(mode="json").items()
        if value is not None
    }


class StageConfig(BaseModel):
    """Everything that differs between dev, staging and prod."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    stage: str = Field(
        pattern=r"^[a-z][a-z0-9]{1,11}$", description="Short name used in stack and resource names."
    )
    account: str | None = Field(default=None, pattern=r"^\d{12}$")
    region: str | None = Field(default=None, pattern=r"^[a-z]{2}(-[a-z]+)+-\d$")

    vpc_cidr: str = "10.40.0.0/16"
    max_azs: int = Field(default=2, ge=2, le=3, description="An Aurora subnet group needs two AZs at least.")
    nat_gateways: int = Field(
        default=1,
        ge=1,
        le=3,
        description=(
            "NAT gateways for the worker's egress subnets (the LLM provider's public API). One is cheapest; "
            "max_azs of them give each AZ its own, so losing an AZ never cuts the others off."
        ),
    )

    aurora_min_acu: float = Field(
        default=0.5,
        ge=0,
        le=256,
        description=(
            "Aurora Serverless v2 floor. 0 lets the cluster pause after aurora_auto_pause_seconds without "
            "connections (no capacity charge while paused); the first connection after a pause waits about "
            "15 s for the resume."
        ),
    )
    aurora_max_acu: float = Field(default=4, ge=1, le=256)
    aurora_auto_pause_seconds: int = Field(
        default=300,
        ge=300,
        le=86_400,
        description=(
            "With aurora_min_acu 0: seconds without connections before Aurora pauses (AWS allows 300 to "
            "86,400). Ignored otherwise."
        ),
    )
    database_proxy: bool = Field(
        default=True,
        description=(
            "Put RDS Proxy in front of Aurora (billed for at least 8 ACUs with Serverless v2, about $88 a "
            "month). Off: every client connects to the cluster's writer endpoint, each Lambda environment "
            "with one connection, so the stage's concurrency must stay well under Aurora's max_connections."
        ),
    )
    interface_endpoints: bool = Field(
        default=True,
        description=(
            "Reach AWS APIs through interface VPC endpoints (one ENI per AZ each, about $7.30 a month "
            "per ENI). Off: no interface endpoints, and every Lambda runs in the egress subnets and reaches "
            "AWS through the NAT gateway instead (data charged per GB). The S3 and DynamoDB gateway "
            "endpoints are free and stay either way."
        ),
    )
    tick_minutes: int = Field(
        default=1,
        ge=1,
        le=60,
        description=(
            "Minutes between the outbox relay's sweeps and the scheduler's ticks, and the period of the "
            "scheduler's gauges in alarms and scaling. Each tick connects to PostgreSQL, so with "
            "aurora_min_acu 0 the cluster can only pause if ticks are further apart than the pause delay. "
            "Longer ticks delay what only the scheduler does: reaping a dead worker's leases, deadlines, "
            "restarting stalled deliveries, and the sweep's pick-up of an event whose nudge was lost. A "
            "divisor of 60, so both schedules fire at the same minutes of the hour and wake the cluster once."
        ),
    )

    @field_validator("tick_minutes")
    @classmethod
    def _divides_the_hour(cls, value: int) -> int:
        if 60 % value:
            raise ValueError("tick_minutes must divide 60 (1, 2, 3, 4, 5, 6, 10, 12, 15, 20, 30 or 60)")
        return value

    aurora_readers: int = Field(default=0, ge=0, le=2, description="Serverless v2 readers for failover.")
    backup_retention_days: int = Field(default=7, ge=1, le=35)
    iam_database_authentication: bool = True

    api_throttle_rate: float = Field(default=50, gt=0, description="Stage-wide steady requests per second.")
    api_throttle_burst: int = Field(default=100, ge=1)
    usage_plan_rate: float = Field(default=10, gt=0, description="Per-tenant steady requests per second.")
    usage_plan_burst: int = Field(default=20, ge=1)
    usage_plan_daily_quota: int = Field(default=50_000, ge=1, description="Requests per tenant per day.")
    enforce_usage_plan: bool = Field(
        default=True,
        description=(
            "Require a usage-plan key on authorized routes, so API Gateway meters, throttles and caps each "
            "tenant by the usage plan. The authorizer names the tenant's key (usageIdentifierKey) and "
            "`tollgate tenants create` adds it to the plan; a tenant without one (created before migration "
            "0018, until `tollgate tenants sync-usage-keys` runs) is answered 403."
        ),
    )
    api_gateway_cloudwatch_role: bool = Field(
        default=True,
        description=(
            "Create the API Gateway CloudWatch role and set it on the account (AWS::ApiGateway::Account), "
            "which access and execution logging need. It is one setting per account and region: let one "
            "stage per account and region own it and set false on the others. Both are retained when the "
            "stack is deleted or the setting turned off, so other stages' logging keeps working."
        ),
    )
    waf_enabled: bool = Field(
        default=False,
        description=(
            "Put a WAFv2 web ACL in front of the REST API stage: a rate limit per source address (blocks a "
            "flood of wrong keys before the authorizer runs) and AWS's common rule set."
        ),
    )
    waf_rate_limit: int = Field(
        default=6000,
        ge=10,
        le=2_000_000_000,
        description=(
            "Requests one source address may send in any five minutes before the web ACL blocks it with "
            "429. At least a tenant's usage plan rate for five minutes, so a tenant behind one address is "
            "limited by its plan, not by the firewall."
        ),
    )
    authorizer_cache_ttl_seconds: int = Field(
        default=300, ge=0, le=3600, description="How long API Gateway caches an authorizer decision."
    )

    jobs_queue_max_receive_count: int = Field(
        default=5,
        ge=1,
        le=1000,
        description="Receives of one jobs-queue message before SQS moves it to the dead-letter queue.",
    )
    jobs_queue_visibility_seconds: int = Field(
        default=60,
        ge=30,
        le=43_200,
        description=(
            "How long a received message stays hidden. The worker's ingress only records it in the inbox "
            "and deletes it, which takes well under a second; the margin covers a slow database."
        ),
    )
    relay_reserved_concurrency: int = Field(
        default=2,
        ge=0,
        le=20,
        description=(
            "Concurrency reserved for the outbox relay, and so the most runs at once: nudges after each "
            "commit must not stampede the database. 0: no reservation, for an account whose Lambda quota "
            "(Concurrent executions, L-B99A9384) cannot spare one, as a new account's 10 cannot, since "
            "Lambda keeps 100 unreserved. Runs then share the account's unreserved pool, up to one per nudge "
            "in flight (a nudge per accepted job, so at most the stage's API throttle a second), each with "
            "its own database connection. Two runs still never claim the same event: a run claims its batch "
            "with FOR UPDATE SKIP LOCKED under a claim lease (relay.relay_claim_seconds, the run's "
            "timeout), and one that finds nothing claimable ends after that one query. Write 0, not null: "
            "the CDK drops a null from context, which would give the default."
        ),
    )
    scheduler_reserved_concurrency: int = Field(
        default=1,
        ge=0,
        le=1,
        description=(
            "Concurrency reserved for the scheduler: 1 runs its ticks one at a time. 0: no reservation, as "
            "for relay_reserved_concurrency. Ticks then overlap only by accident: a tick's 55 s timeout "
            "ends it before the next one, a minute or more later, and a failed tick is not retried, so only "
            "a schedule event that EventBridge delivers twice starts two at once. Two ticks are safe: every "
            "step locks its rows with FOR UPDATE SKIP LOCKED and conditions its updates on the fence it "
            "read, a stalled delivery's restart is counted in the database before its execution starts, "
            "and the backlog check gives way after 500 ms waiting for a lock; they only contend for rows."
        ),
    )
    outbox_age_alarm_seconds: int = Field(
        default=300, ge=60, description="Alarm when the oldest unpublished outbox event is older."
    )
    jobs_queue_age_alarm_seconds: int = Field(
        default=300, ge=60, description="Alarm when the oldest jobs-queue message waits longer for ingress."
    )
    eligible_job_age_alarm_seconds: int = Field(
        default=900,
        ge=60,
        description=(
            "Alarm when a job that could run now has waited longer for a worker. Above "
            "worker_scale_out_job_age_seconds, so it reports a wait that adding tasks did not cure, and "
            "below the jobs' default deadline, so it comes while the job can still finish."
        ),
    )
    provider_throttle_alarm_percent: float = Field(
        default=10,
        gt=0,
        le=100,
        description=(
            "Alarm when more than this share of provider requests is answered 429 for 15 minutes. A few "
            "429s are how the adaptive rate finds the ceiling; a steady share means the configured budget "
            "is above the provider's real quota."
        ),
    )
    review_rate_alarm_percent: float = Field(
        default=20,
        gt=0,
        le=100,
        description=(
            "The review rate's target: alarm when more than this share of validated results goes to review "
            "for three hours in a row. A rising share is a model, prompt or document change that people now "
            "pay for, even while nothing wrong reaches an ERP."
        ),
    )
    review_age_alarm_seconds: int = Field(
        default=86_400,
        ge=600,
        description=(
            "Alarm when the oldest result waiting for a reviewer has waited longer: its invoice has not "
            "reached the ERP. A day by default; a stage with a review service level sets its own."
        ),
    )
    alarm_email: str | None = Field(
        default=None,
        pattern=r"^[^@\s]+@[^@\s]+\.[^@\s]+$",
        description="Subscribed to the alarm topic; the address must confirm the subscription.",
    )
    runbook_url: str | None = Field(
        default=None,
        pattern=r"^https://\S+$",
        description=(
            "Where the dashboard's note links for the runbook: README.md's Operations section wherever the "
            "team reads it. Without it the note names the section."
        ),
    )

    worker_cpu: int = Field(default=512, description="Fargate CPU units of one worker task.")
    worker_memory_mib: int = Field(default=1024, description="Memory of one worker task.")
    worker_min_tasks: int = Field(
        default=1,
        ge=0,
        description=(
            "Scaling minimum of the normal worker service. 0 lets it stop when idle: a message waiting on a "
            "jobs queue starts a task (SQS's own queue-depth metric, which exists without a worker), so "
            "jobs_queue_age_alarm_seconds must then allow for a task's start."
        ),
    )
    worker_max_tasks: int = Field(
        default=4,
        ge=1,
        le=100,
        description=(
            "Ceiling of the worker service. More tasks than the provider budget can feed only wait on the "
            "limiter, so size it with the requests/tokens per minute in mind."
        ),
    )
    worker_scale_out_runnable_jobs: int = Field(
        default=20,
        ge=1,
        description="Runnable jobs at which one worker task is added (four times as many add three).",
    )
    worker_scale_out_job_age_seconds: int = Field(
        default=120,
        ge=60,
        description="Age of the oldest eligible job at which a task is added even if the backlog is small.",
    )
    worker_tiers: dict[Literal["high", "batch"], WorkerTierService] = Field(
        default_factory=dict,
        description=(
            'A worker service per service tier: {"high": {"execution_slots": 4, "min_tasks": 1, '
            '"max_tasks": 2}, "batch": {...}}. A tier left out (or with 0 slots) is run by the normal '
            "service, which the worker_* fields size."
        ),
    )

    archive_infrequent_access_days: int = Field(
        default=30,
        ge=30,
        description=(
            "Days after which S3 moves a results archive (archive/ in the documents bucket) to Standard-IA: "
            "archives are written once and rarely read. S3 allows no earlier move."
        ),
    )
    archive_expiration_days: int = Field(
        default=400,
        ge=31,
        description=(
            "Days after which S3 deletes a results archive: a year and a month, so last year's jobs are "
            "still there for an annual review. Tollgate is not the tenant's system of record for invoices."
        ),
    )

    log_retention: str = Field(default="ONE_MONTH", description="A member name of aws_logs.RetentionDays.")
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    removal_policy: Literal["retain", "destroy"] = Field(
        default="destroy", description="'retain' keeps data stores (and turns on deletion protection)."
    )

    admission: AdmissionLimits = Field(default_factory=AdmissionLimits)  # type: ignore[valid-type]
    jobs: JobLimits = Field(default_factory=JobLimits)  # type: ignore[valid-type]
    authorizer: AuthorizerLimits = Field(default_factory=AuthorizerLimits)  # type: ignore[valid-type]
    relay: RelayLimits = Field(default_factory=RelayLimits)  # type: ignore[valid-type]
    retry: RetryLimits = Field(default_factory=RetryLimits)  # type: ignore[valid-type]
    scheduler: SchedulerLimits = Field(default_factory=SchedulerLimits)  # type: ignore[valid-type]
    retention: RetentionLimits = Field(default_factory=RetentionLimits)  # type: ignore[valid-type]
    worker: WorkerTuning = Field(default_factory=WorkerTuning)  # type: ignore[valid-type]
    pricing: Pricing = Field(default_factory=Pricing)  # type: ignore[valid-type]
    batch_path: BatchPath = Field(default_factory=BatchPath)  # type: ignore[valid-type]
    webhooks: WebhookLimits = Field(default_factory=WebhookLimits)  # type: ignore[valid-type]
    notifications: Notifications = Field(default_factory=Notifications)  # type: ignore[valid-type]

    layer_dir: Path = Field(
        default=DEFAULT_LAYER_DIR, description="Folder holding python/ with the Lambda dependencies."
    )

    @field_validator("vpc_cidr")
    @classmethod
    def _private_cidr(cls, value: str) -> str:
        network = ipaddress.ip_network(value)
        if not network.is_private or network.prefixlen > 20:
            raise ValueError("vpc_cidr must be a private range of /20 or larger")
        return value

    @field_validator("log_retention")
    @classmethod
    def _known_retention(cls, value: str) -> str:
        if value not in logs.RetentionDays.__members__ or value == "INFINITE":
            raise ValueError("log_retention must name a finite aws_logs.RetentionDays member")
        return value

    @field_validator("layer_dir")
    @classmethod
    def _anchor_layer_dir(cls, value: Path) -> Path:
        # Relative paths in cdk.json mean "from the repository", whatever the caller's working directory.
        return value if value.is_absolute() else REPO_ROOT / value

    @model_validator(mode="after")
    def _consistent(self) -> StageConfig:
        if self.aurora_min_acu > self.aurora_max_acu:
            raise ValueError("aurora_min_acu exceeds aurora_max_acu")
        if self.api_throttle_burst < self.api_throttle_rate or self.usage_plan_burst < self.usage_plan_rate:
            raise ValueError("a throttle burst must be at least its rate")
        if self.usage_plan_rate > self.api_throttle_rate:
            raise ValueError("a tenant's usage plan rate cannot exceed the stage throttle")
        if self.worker_min_tasks > self.worker_max_tasks:
            raise ValueError("worker_min_tasks exceeds worker_max_tasks")
        if self.worker_memory_mib not in FARGATE_MEMORY.get(self.worker_cpu, ()):
            raise ValueError(
                f"Fargate has no task size of {self.worker_cpu} CPU units with {self.worker_memory_mib} MiB"
            )
        if self.worker.drain_seconds >= WORKER_STOP_TIMEOUT_SECONDS:
            raise ValueError(
                f"worker.drain_seconds must end before ECS kills the task {WORKER_STOP_TIMEOUT_SECONDS} s "
                "after SIGTERM, leaving time to hand unfinished attempts back"
            )
        if self.relay.relay_claim_seconds > 900:
            # The relay's timeout is its claim lease (PipelineStack), and Lambda stops at 15 minutes.
            raise ValueError("relay.relay_claim_seconds cannot exceed Lambda's 900-second limit")
        if self.webhooks.webhook_connect_timeout_seconds > self.webhooks.webhook_total_timeout_seconds:
            raise ValueError("webhooks.webhook_connect_timeout_seconds exceeds webhook_total_timeout_seconds")
        if self.webhook_attempt_timeout_seconds > 900:
            raise ValueError(
                "webhooks.webhook_total_timeout_seconds leaves no room for the attempt's database work "
                "within Lambda's 900-second limit"
            )
        if self.archive_expiration_days <= self.archive_infrequent_access_days:
            raise ValueError("archive_expiration_days must come after archive_infrequent_access_days")
        if self.nat_gateways > self.max_azs:
            raise ValueError("nat_gateways exceeds max_azs: a NAT gateway lives in one AZ's public subnet")
        if self.max_azs > 2 and (self.account is None or self.region is None):
            # An environment-agnostic stack can only address two AZs (Fn::GetAZs); say so instead of
            # silently deploying fewer than asked.
            raise ValueError("max_azs > 2 needs account and region")
        return self

    @model_validator(mode="after")
    def _firewall_above_a_tenants_plan(self) -> StageConfig:
        if self.waf_rate_limit < self.usage_plan_rate * WAF_RATE_WINDOW_SECONDS:
            raise ValueError(
                "waf_rate_limit is below usage_plan_rate for five minutes: the firewall would block a tenant "
                "sending from one address before its usage plan does"
            )
        return self

    @model_validator(mode="after")
    def _idle_settings_hold_together(self) -> StageConfig:
        if self.auto_pause and self.tick_minutes * 60 <= self.database_awake_after_tick_seconds:
            raise ValueError(
                "aurora_min_acu 0 needs tick_minutes longer than aurora_auto_pause_seconds plus "
                f"{IDLE_SESSION_TIMEOUT_SECONDS} s: every tick connects to the cluster, so with ticks closer "
                "together it never pauses and bills its 0.5 ACU floor all the time"
            )
        if self.tick_minutes * 60 >= self.outbox_age_alarm_seconds:
            raise ValueError(
                "outbox_age_alarm_seconds must exceed tick_minutes: an event whose nudge was lost waits for "
                "the next sweep, and the scheduler reports the age only once a tick"
            )
        if (
            any(service.min_tasks == 0 for service in self.worker_services)
            and self.jobs_queue_age_alarm_seconds < WORKER_COLD_START_SECONDS
        ):
            raise ValueError(
                f"a worker service with 0 min_tasks needs jobs_queue_age_alarm_seconds >= "
                f"{WORKER_COLD_START_SECONDS}: its first message waits for a task to be started"
            )
        return self

    @model_validator(mode="after")
    def _job_age_alarm_between_scaling_and_deadline(self) -> StageConfig:
        if self.eligible_job_age_alarm_seconds <= self.worker_scale_out_job_age_seconds:
            raise ValueError(
                "eligible_job_age_alarm_seconds must exceed worker_scale_out_job_age_seconds: the alarm is "
                "for a wait that adding tasks did not cure"
            )
        if self.eligible_job_age_alarm_seconds >= self.jobs.default_deadline_seconds:
            raise ValueError(
                "eligible_job_age_alarm_seconds must be below jobs.default_deadline_seconds, or the alarm "
                "would only report jobs that have already expired"
            )
        return self

    @property
    def worker_services(self) -> list[WorkerService]:
        """The normal tier's service first (it serves every tier without a service of its own), then one per
        tier with slots, highest first."""
        own = {tier: service for tier, service in self.worker_tiers.items() if service.execution_slots}
        normal = WorkerService(
            tier="normal",
            serves=tuple(tier for tier in SERVICE_TIERS if tier == "normal" or tier not in own),
            execution_slots=self.worker.execution_slots,
            min_tasks=self.worker_min_tasks,
            max_tasks=self.worker_max_tasks,
            claim_idle_seconds=self.worker.claim_idle_seconds,
        )
        return [normal] + [
            WorkerService(
                tier=tier,
                serves=(tier,),
                execution_slots=own[tier].execution_slots,
                min_tasks=own[tier].min_tasks,
                max_tasks=own[tier].max_tasks,
                claim_idle_seconds=own[tier].claim_idle_seconds or self.worker.claim_idle_seconds,
            )
            for tier in SERVICE_TIERS
            if tier in own
        ]

    @property
    def environment(self) -> cdk.Environment | None:
        if self.account is None and self.region is None:
            return None
        return cdk.Environment(account=self.account, region=self.region)

    @property
    def auto_pause(self) -> bool:
        """Whether the Aurora cluster pauses when idle (min capacity 0)."""
        return self.aurora_min_acu == 0

    @property
    def database_awake_after_tick_seconds(self) -> int:
        """How long an otherwise idle cluster stays up after a tick: the tick's session is closed after
        IDLE_SESSION_TIMEOUT_SECONDS, then Aurora waits the pause delay."""
        return IDLE_SESSION_TIMEOUT_SECONDS + self.aurora_auto_pause_seconds

    @property
    def tick_words(self) -> str:
        """ "every minute" or "every N minutes", for descriptions."""
        return "every minute" if self.tick_minutes == 1 else f"every {self.tick_minutes} minutes"

    @property
    def tick_schedule(self) -> events.Schedule:
        """Every minute, or at fixed minutes of the hour: two rules on one rate would each fire at an offset
        of its own creation time, and two unaligned ticks would wake a pausing cluster twice per period."""
        if self.tick_minutes == 1:
            return events.Schedule.rate(cdk.Duration.minutes(1))
        return events.Schedule.cron(minute=f"0/{self.tick_minutes}")

    @property
    def tick_period(self) -> cdk.Duration:
        """The sweep's and the scheduler's schedule, and the period of the gauges the scheduler publishes."""
        return cdk.Duration.minutes(self.tick_minutes)

    @property
    def batch_age_alarm_seconds(self) -> int:
        """How long a provider batch may stay open: the lease its jobs wait under, the provider's completion
        window plus ``batch_path.batch_settle_seconds`` (25 hours by default), as the worker computes it. An
        older batch is followed by no poller, and its jobs go back as their leases end."""
        return math.ceil(BatchConfig(settle_seconds=self.batch_path.batch_settle_seconds).lease_seconds)

    def database_wait_environment(self) -> dict[str, str]:
        """DATABASE_WAIT_SECONDS for clients whose first connection may have to wait for a paused cluster to
        resume; empty (the settings' default) when the cluster never pauses."""
        if not self.auto_pause:
            return {}
        return {"DATABASE_WAIT_SECONDS": str(RESUMING_DATABASE_WAIT_SECONDS)}

    @property
    def retains_data(self) -> bool:
        return self.removal_policy == "retain"

    @property
    def cdk_removal_policy(self) -> cdk.RemovalPolicy:
        return cdk.RemovalPolicy.RETAIN if self.retains_data else cdk.RemovalPolicy.DESTROY

    @property
    def log_retention_days(self) -> logs.RetentionDays:
        return logs.RetentionDays[self.log_retention]

    @property
    def webhook_attempt_timeout_seconds(self) -> int:
        """The attempt Lambda's timeout: the sender's own cap, then the database work around it, so a slow
        endpoint ends as a recorded failed attempt rather than a killed invocation."""
        resume = RESUMING_DATABASE_WAIT_SECONDS if self.auto_pause else 0
        return (
            math.ceil(self.webhooks.webhook_total_timeout_seconds) + WEBHOOK_ATTEMPT_DATABASE_SECONDS + resume
        )

    @property
    def documents_bucket_name(self) -> str:
        """The documents bucket's physical name, unique per account and region, kept from its first deploy.
        Only DataStack uses it: other stacks import the bucket from DataStack's exports."""
        return f"tollgate-{self.stage}-documents-{cdk.Aws.ACCOUNT_ID}-{cdk.Aws.REGION}"

    def stack_name(self, concern: str) -> str:
        return f"Tollgate-{self.stage}-{concern}"

    @classmethod
    def from_context(cls, context: Mapping[str, Any]) -> StageConfig:
        """Pick ``stages[stage]`` from context; top-level ``layer_dir`` (e.g. ``-c layer_dir=...``) wins."""
        stage = str(context.get("stage") or "dev")
        stages = context.get("stages") or {}
        if stage not in stages:
            known = ", ".join(sorted(stages)) or "none"
            raise ValueError(f"stage {stage!r} is not in the 'stages' context map (known: {known})")
        values: dict[str, Any] = {**stages[stage], "stage": stage}
        if context.get("layer_dir"):
            values["layer_dir"] = context["layer_dir"]
        return cls.model_validate(values)

    @classmethod
    def from_node(cls, node: Any) -> StageConfig:
        """Read the keys ``from_context`` needs from a construct node's context."""
        return cls.from_context({key: node.try_get_context(key) for key in ("stage", "stages", "layer_dir")})
