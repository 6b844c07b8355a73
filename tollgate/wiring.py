"""Builds each entrypoint's dependencies from its settings, once per process (cold start)."""

from __future__ import annotations

import getpass
import random
import time
from datetime import timedelta
from typing import TYPE_CHECKING

from aws_lambda_powertools import Logger

# Only what the API and the authorizer build is imported here. Every other entrypoint's pieces are imported
# inside its build_*, so a Lambda's cold start does not load the worker's, the relay's or the CLI's modules
# (a quarter of a second of the API's import, measured in BENCHMARKS.md's cold-start section).
from tollgate.accept.service import AcceptanceDeps, AcceptanceLimits
from tollgate.api.deps import ApiDeps
from tollgate.core.aws import aws_client, lazy_client
from tollgate.core.clock import Clock, SystemClock, new_id
from tollgate.core.documents import S3DocumentStore
from tollgate.db import Database, build_database
from tollgate.delivery.deliveries import ReplayDeps, StepFunctionsStarter
from tollgate.delivery.endpoints import EndpointDeps
from tollgate.delivery.signing import new_secret
from tollgate.delivery.ssrf import Resolver, system_resolver
from tollgate.outbox.nudge import LambdaNudger, NoNudge, Nudger
from tollgate.review.service import ReviewDeps
from tollgate.settings import (
    ApiSettings,
    AuthorizerSettings,
    NotificationSettings,
    OpsSettings,
    RelaySettings,
    RetrySettings,
    SchedulerSettings,
    SupportDatabaseSettings,
    SupportSettings,
    TenantProvisioningSettings,
    WebhookAttemptSettings,
    WorkerSettings,
)
from tollgate.tenants.keys import ApiKeyResolver
from tollgate.tenants.usage_keys import ApiGatewayUsagePlan, NoUsagePlan, UsagePlan

if TYPE_CHECKING:
    import boto3
    from mypy_boto3_sqs import SQSClient

    from tollgate.core.metrics import MetricsSink
    from tollgate.core.retry import RetryPolicy
    from tollgate.delivery.attempts import AttemptDeps
    from tollgate.delivery.deliveries import DeliveryStarter
    from tollgate.execution.attempt import ExecutionDeps
    from tollgate.execution.batch.deps import BatchDeps
    from tollgate.execution.limiter import Limiter
    from tollgate.execution.limiter.batch_pool import BatchPool
    from tollgate.execution.llm.batch_api import BatchApi
    from tollgate.execution.llm.client import LlmClient
    from tollgate.execution.worker import WorkerConfig
    from tollgate.ingress.consumer import IngressDeps
    from tollgate.notify.connections import ConnectionStore
    from tollgate.notify.sender import Sender
    from tollgate.notify.service import NotifyDeps
    from tollgate.ops.service import OpsDeps
    from tollgate.outbox.eventbridge import PutEventsClient
    from tollgate.outbox.relay import Publisher, RelayDeps
    from tollgate.scheduler.tick import SchedulerDeps
    from tollgate.support.configuration import AwsEndpoint
    from tollgate.support.service import SupportDeps

logger = Logger(service="tollgate-relay", child=True)


def build_api(
    settings: ApiSettings,
    db: Database | None = None,
    nudger: Nudger | None = None,
    *,
    webhook_resolver: Resolver = system_resolver,
) -> ApiDeps:
    """``webhook_resolver`` resolves endpoint hosts at registration; tests pass an in-memory DNS."""
    db = db or build_database(settings, pool_name="api")
    store = S3DocumentStore(lazy_client("s3", "api"), settings.documents_bucket)
    if nudger is None:
        nudger = _relay_nudger(settings.relay_function_name, "api")
    clock = SystemClock()
    replays = (
        ReplayDeps(
            db,
            clock,
            StepFunctionsStarter(lazy_client("stepfunctions", "api"), settings.webhook_state_machine_arn),
        )
        if settings.webhook_state_machine_arn
        else None
    )
    return ApiDeps(
        AcceptanceDeps(
            db=db,
            documents=store,
            limits=acceptance_limits(settings),
            clock=clock,
            new_id=new_id,
            nudger=nudger,
        ),
        webhooks=EndpointDeps(
            db,
            clock,
            new_id,
            new_secret,
            allow_private_targets=settings.webhooks_allow_private_targets,
            resolver=webhook_resolver,
        ),
        replays=replays,
        reviews=ReviewDeps(db, store, clock, new_id, nudger),
    )


def acceptance_limits(settings: ApiSettings) -> AcceptanceLimits:
    return AcceptanceLimits(**settings.model_dump(include=set(AcceptanceLimits.__dataclass_fields__)))


def build_authorizer(settings: AuthorizerSettings, db: Database | None = None) -> ApiKeyResolver:
    db = db or build_database(settings, pool_name="authorizer")
    return ApiKeyResolver(db, SystemClock(), settings.api_key_cache_ttl_seconds)


def build_usage_plan(settings: TenantProvisioningSettings, entrypoint: str | None = None) -> UsagePlan:
    """Tenants' usage keys go to the stage's usage plan; without one (local development) nowhere."""
    if settings.usage_plan_id is None:
        return NoUsagePlan()
    return ApiGatewayUsagePlan(aws_client("apigateway", entrypoint=entrypoint), settings.usage_plan_id)


def build_relay(
    settings: RelaySettings,
    db: Database | None = None,
    starter: DeliveryStarter | None = None,
    events_client: PutEventsClient | None = None,
) -> RelayDeps:
    """The routing table lives here: requested events to the jobs queue, outcome events to webhooks and the
    results bus, job state changes to the live notifier's queue."""
    from tollgate.delivery.deliveries import NoDispatcher, WebhookDispatcher
    from tollgate.events import (
        BUS_ONLY_EVENT_TYPES,
        EXTRACTION_REQUESTED,
        JOB_STATE_CHANGED,
        OUTCOME_EVENT_TYPES,
    )
    from tollgate.outbox.eventbridge import EventBridgePublisher
    from tollgate.outbox.fanout import FanOutPublisher, NoSubscriber
    from tollgate.outbox.job_queues import JobTypeQueues
    from tollgate.outbox.notifications import TenantNewsPublisher
    from tollgate.outbox.relay import RelayDeps
    from tollgate.outbox.sqs import SqsFifoPublisher

    db = db or build_database(settings, pool_name="relay")
    sqs = lazy_client("sqs", "outbox_relay")
    job_queues = JobTypeQueues(
        {
            job_type: SqsFifoPublisher(sqs, url, settings.message_group_shards)
            for job_type, url in settings.job_queue_urls.items()
        }
    )
    if starter is None:
        starter = (
            StepFunctionsStarter(
                lazy_client("stepfunctions", "outbox_relay"), settings.webhook_state_machine_arn
            )
            if settings.webhook_state_machine_arn
            else NoDispatcher()
        )
    webhooks = WebhookDispatcher(db, starter)
    outcomes: Publisher = webhooks
    # With no bus, a bus-only event has no subscriber anywhere: it is confirmed as published to nobody,
    # rather than claimed again by every run. A deployed stage always has its bus.
    bus_only: Publisher = NoSubscriber()
    if settings.results_bus_name:
        # Confirmed only when both confirmed: a bus that is down keeps the event for the next run, whose
        # republish the webhook side absorbs (one delivery per event and endpoint).
        bus = EventBridgePublisher(
            events_client or lazy_client("events", "outbox_relay"),
            settings.results_bus_name,
            settings.results_event_source,
        )
        outcomes = FanOutPublisher((("webhooks", webhooks), ("results bus", bus)))
        bus_only = bus
    else:
        logger.warning("no RESULTS_BUS_NAME: outcome events go to webhooks only, none to a results bus")
    # Grouped per tenant as the job queues are: the notifier reads a tenant's events from PostgreSQL in
    # sequence order, so neither the queue's order nor a duplicate can misorder what a client gets. Without a
    # queue (no notifications in this deployment) the events are confirmed as published to nobody.
    notifications: Publisher = (
        TenantNewsPublisher(sqs, settings.notifications_queue_url)
        if settings.notifications_queue_url
        else NoSubscriber()
    )
    return RelayDeps(
        db=db,
        clock=SystemClock(),
        routes={
            EXTRACTION_REQUESTED: job_queues,
            **dict.fromkeys(OUTCOME_EVENT_TYPES, outcomes),
            **dict.fromkeys(BUS_ONLY_EVENT_TYPES, bus_only),
            JOB_STATE_CHANGED: notifications,
        },
        batch_size=settings.relay_batch_size,
        claim_seconds=settings.relay_claim_seconds,
    )


def retry_policy(settings: RetrySettings) -> RetryPolicy:
    from tollgate.core.retry import RetryPolicy

    return RetryPolicy(
        base_seconds=settings.retry_base_seconds,
        cap_seconds=settings.retry_cap_seconds,
        attempt_timeout_seconds=settings.attempt_timeout_seconds,
    )


def build_scheduler(
    settings: SchedulerSettings, metrics: MetricsSink, db: Database | None = None
) -> SchedulerDeps:
    from tollgate.scheduler.retention import RetentionPolicy, S3RetentionStore
    from tollgate.scheduler.tick import SchedulerDeps

    return SchedulerDeps(
        db=db or build_database(settings, pool_name="scheduler"),
        clock=SystemClock(),
        new_id=new_id,
        metrics=metrics,
        retry_policy=retry_policy(settings),
        jitter=random.uniform,
        batch_size=settings.scheduler_batch_size,
        deliveries=(
            StepFunctionsStarter(
                lazy_client("stepfunctions", "scheduler"), settings.webhook_state_machine_arn
            )
            if settings.webhook_state_machine_arn
            else None
        ),
        delivery_stall=timedelta(seconds=settings.delivery_stall_seconds),
        retention_store=S3RetentionStore(lazy_client("s3", "scheduler"), settings.documents_bucket),
        retention=RetentionPolicy(
            default_days=settings.retention_default_days,
            outbox_days=settings.retention_outbox_days,
            inbox_days=settings.retention_inbox_days,
            state_event_hours=settings.retention_state_event_hours,
            batch_size=settings.retention_batch_size,
            max_batches=settings.retention_max_batches,
        ),
    )


def _relay_nudger(function_name: str | None, entrypoint: str) -> Nudger:
    return LambdaNudger(lazy_client("lambda", entrypoint), function_name) if function_name else NoNudge()


def build_execution(
    settings: WorkerSettings,
    db: Database,
    llm: LlmClient | None = None,
    limiter: Limiter | None = None,
    nudger: Nudger | None = None,
    *,
    metrics: MetricsSink | None = None,
) -> ExecutionDeps:
    from tollgate.core.metrics import RecordedMetrics
    from tollgate.execution.attempt import ExecutionDeps, ModelRouter
    from tollgate.execution.limiter.factory import build_limiter
    from tollgate.execution.llm.client import OpenAIExtractor

    clock = SystemClock()
    if llm is None:
        import openai  # the worker's dependency only; the API's cold start does without it

        # Only a compatible server named by OPENAI_BASE_URL may go without a key (settings refuse the rest);
        # the SDK insists on a string, and such servers ignore it.
        api_key = settings.openai_api_key.get_secret_value() if settings.openai_api_key else "none"
        client = openai.AsyncOpenAI(api_key=api_key, base_url=settings.openai_base_url, max_retries=0)
        llm = OpenAIExtractor(client, clock, settings.provider_structured_output)
    return ExecutionDeps(
        db=db,
        documents=S3DocumentStore(lazy_client("s3", "worker"), settings.documents_bucket),
        llm=llm,
        limiter=limiter or build_limiter(settings, clock),
        clock=clock,
        new_id=new_id,
        retry_policy=retry_policy(settings),
        jitter=random.uniform,
        router=ModelRouter(settings.model_small, settings.model_large, settings.escalate_to_large_model),
        prices=settings.model_prices,
        worker_id=settings.worker_id,
        provider_pool=settings.provider_pool,
        lease_seconds=settings.lease_seconds,
        heartbeat_seconds=settings.heartbeat_seconds,
        max_output_tokens=settings.max_output_tokens,
        nudger=nudger or _relay_nudger(settings.relay_function_name, "worker"),
        metrics=metrics or RecordedMetrics(),
        system_monthly_budget_usd=settings.system_monthly_budget_usd,
    )


def build_batch(
    settings: WorkerSettings,
    execution: ExecutionDeps,
    api: BatchApi | None = None,
    pool: BatchPool | None = None,
) -> BatchDeps | None:
    """The batch path's dependencies when BATCH_API is on (None otherwise): the provider's Batch API over the
    same key and endpoint as the immediate calls, and the Batch API's own budget beside the immediate one."""
    if not settings.batch_api:
        return None
    from tollgate.execution.batch.deps import BatchConfig, BatchDeps
    from tollgate.execution.limiter.factory import build_batch_pool
    from tollgate.execution.llm.batch_api import OpenAIBatchApi

    if api is None:
        import openai

        api_key = settings.openai_api_key.get_secret_value() if settings.openai_api_key else "none"
        api = OpenAIBatchApi(openai.OpenAI(api_key=api_key, base_url=settings.openai_base_url, max_retries=0))
    return BatchDeps(
        execution=execution,
        api=api,
        pool=pool or build_batch_pool(settings, None, execution.clock),
        config=BatchConfig(
            max_requests=settings.batch_max_requests,
            max_bytes=settings.batch_max_bytes,
            settle_seconds=settings.batch_settle_seconds,
            fallback_seconds=settings.batch_fallback_seconds,
            hold_seconds=settings.batch_hold_seconds,
            poll_seconds=settings.batch_poll_seconds,
            interval_seconds=settings.batch_interval_seconds,
            budget_wait_seconds=settings.batch_budget_wait_seconds,
            tenant_cap=settings.batch_tenant_max_jobs,
            price_factor=settings.batch_price_factor,
        ),
        structured_output=settings.provider_structured_output,
    )


def build_notify(
    settings: NotificationSettings,
    db: Database | None = None,
    *,
    connections: ConnectionStore | None = None,
    sender: Sender | None = None,
    clock: Clock | None = None,
    entrypoint: str = "notifier",
) -> NotifyDeps:
    """Live notifications: the connections table and API Gateway's management API of the WebSocket stage (the
    local system passes its own store and sender), for the notifier or the WebSocket route Lambda."""
    from tollgate.notify.connections import DynamoDbConnections
    from tollgate.notify.sender import ApiGatewaySender
    from tollgate.notify.service import NotifyDeps, ReplayAllowance

    if connections is None:
        connections = DynamoDbConnections(lazy_client("dynamodb", entrypoint), settings.connections_table)
    if sender is None:
        sender = ApiGatewaySender(
            aws_client(
                "apigatewaymanagementapi", entrypoint=entrypoint, endpoint_url=settings.websocket_endpoint
            )
        )
    return NotifyDeps(
        # The notifier's sweep runs every minute and needs PostgreSQL only while some client is connected (to
        # check its key), so nothing connects before a use case asks: an idle stage's cluster can pause.
        db=db or build_database(settings, pool_name="notify", connect_at_start=False),
        connections=connections,
        sender=sender,
        clock=clock or SystemClock(),
        replay_max_events=settings.replay_max_events,
        replay_max_hours=settings.replay_max_hours,
        max_connections_per_tenant=settings.max_connections_per_tenant,
        connection_ttl_seconds=settings.connection_ttl_seconds,
        key_check_seconds=settings.key_check_seconds,
        replay_allowance=ReplayAllowance(
            per_connection=settings.replays_per_connection,
            per_tenant=settings.replays_per_tenant,
            seconds=settings.replay_allowance_seconds,
        ),
    )


def worker_config(settings: WorkerSettings) -> WorkerConfig:
    from tollgate.execution.worker import WorkerConfig

    return WorkerConfig(
        slots=settings.execution_slots,
        tenant_cap=settings.tenant_max_in_flight,
        idle_seconds=settings.claim_idle_seconds,
        drain_seconds=settings.drain_seconds,
        service_tiers=settings.worker_service_tiers,
    )


def build_webhook_attempts(
    settings: WebhookAttemptSettings,
    db: Database | None = None,
    metrics: MetricsSink | None = None,
    *,
    time_scale: float = 1.0,
) -> AttemptDeps:
    """``time_scale`` below 1 compresses the retry waits: only the local system passes one."""
    from tollgate.core.metrics import RecordedMetrics
    from tollgate.delivery.attempts import AttemptDeps
    from tollgate.delivery.sender import SenderLimits, WebhookSender

    sender = WebhookSender(
        allow_private_targets=settings.webhooks_allow_private_targets,
        limits=SenderLimits(
            connect_timeout=settings.webhook_connect_timeout_seconds,
            total_timeout=settings.webhook_total_timeout_seconds,
            max_response_bytes=settings.webhook_max_response_bytes,
        ),
    )
    return AttemptDeps(
        db=db or build_database(settings, pool_name="webhooks"),
        clock=SystemClock(),
        sender=sender,
        jitter=random.uniform,
        time_scale=time_scale,
        disable_after=timedelta(days=settings.endpoint_disable_after_days),
        metrics=metrics or RecordedMetrics(),
    )


def build_ingress(settings: WorkerSettings, db: Database | None = None) -> tuple[IngressDeps, ...]:
    """One consumer per job type's queue, sharing the database pool and the SQS client (boto3 clients are
    thread-safe): the worker runs a receive loop for each, so a quiet queue's long poll delays no other."""
    from tollgate.ingress.consumer import IngressDeps

    db = db or build_database(settings, pool_name="ingress")
    sqs = lazy_client("sqs", "worker")
    clock = SystemClock()
    return tuple(
        IngressDeps(
            db=db,
            sqs=sqs,
            queue_url=url,
            clock=clock,
            wait_seconds=settings.ingress_wait_seconds,
            failure_visibility_seconds=settings.ingress_failure_visibility_seconds,
            job_type=job_type,
        )
        for job_type, url in settings.job_queue_urls.items()
    )


def _aws_session(aws: AwsEndpoint | None) -> boto3.session.Session:
    """The default credential chain, or the given endpoint's keys (the local system's moto) without touching
    the environment. boto3 is imported here so the Lambdas' wiring does not load it at init."""
    import boto3

    if aws is None:
        return boto3.session.Session()
    return boto3.session.Session(
        aws_access_key_id=aws.access_key_id,
        aws_secret_access_key=aws.secret_access_key,
        region_name=aws.region,
    )


def build_support(
    settings: SupportDatabaseSettings,
    actor: str | None = None,
    *,
    aws: AwsEndpoint | None = None,
    entrypoint: str | None = None,
) -> SupportDeps:
    """The support CLI's dependencies. With plain ``SupportDatabaseSettings`` there are no queue clients, so
    commands that only use the database need nothing else. ``aws`` points the clients somewhere other than
    the default chain (the local system's moto) without touching the environment. The actor defaults to the
    login name."""
    from tollgate.support.service import SupportDeps, TypeQueues

    arn = settings.webhook_state_machine_arn
    # boto3 only for a command that uses AWS: reading jobs and deliveries needs the database alone.
    session = _aws_session(aws) if isinstance(settings, SupportSettings) or arn else None
    endpoint_url = aws.url if aws else None
    # Clients first: one that cannot be made (no region, say) then leaves no database pool behind.
    sqs: SQSClient | None = None
    type_queues: dict[str, TypeQueues] = {}
    if isinstance(settings, SupportSettings):
        sqs = aws_client("sqs", entrypoint=entrypoint, session=session, endpoint_url=endpoint_url)
        type_queues = {
            job_type: TypeQueues(url, settings.job_dlq_urls[job_type])
            for job_type, url in settings.job_queue_urls.items()
        }
    starter = (
        StepFunctionsStarter(
            aws_client("stepfunctions", entrypoint=entrypoint, session=session, endpoint_url=endpoint_url),
            arn,
        )
        if arn
        else None
    )
    db = build_database(settings, pool_name="support")
    clock = SystemClock()
    replays = ReplayDeps(db, clock, starter) if starter else None
    return SupportDeps(
        db=db,
        clock=clock,
        new_id=new_id,
        sleep=time.sleep,
        actor=actor or getpass.getuser(),
        sqs=sqs,
        type_queues=type_queues,
        replays=replays,
        extra_attempts=settings.redrive_extra_attempts,
        deadline_seconds=settings.redrive_deadline_seconds,
    )


def build_review_cli(settings: SupportDatabaseSettings, *, aws: AwsEndpoint | None = None) -> ReviewDeps:
    """The review commands' dependencies: the database as the system role, and the documents bucket when
    the settings name one (a document kept in its row needs none)."""
    store = None
    if settings.documents_bucket:
        client = _aws_session(aws).client("s3", endpoint_url=aws.url if aws else None)
        store = S3DocumentStore(client, settings.documents_bucket)
    return ReviewDeps(build_database(settings, pool_name="reviews"), store, SystemClock(), new_id)


def build_ops(settings: OpsSettings, *, aws: AwsEndpoint | None = None) -> OpsDeps:
    """The operations function's dependencies: the support CLI's (database as the system role, every job
    type's queues, the webhook dispatcher) and the review commands' documents store, on one database pool.
    Each request names its own caller, so the actor here is only a placeholder that is never written."""
    from tollgate.ops.service import OpsDeps

    support = build_support(settings, "tollgate-ops", aws=aws, entrypoint="ops")
    store = None
    if settings.documents_bucket:
        client = aws_client(
            "s3", entrypoint="ops", session=_aws_session(aws), endpoint_url=aws.url if aws else None
        )
        store = S3DocumentStore(client, settings.documents_bucket)
    return OpsDeps(
        support=support,
        reviews=ReviewDeps(support.db, store, support.clock, support.new_id),
        usage_plan=build_usage_plan(settings, "ops"),
    )
