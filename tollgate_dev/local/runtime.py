"""Assembles the whole system in one process: PostgreSQL, moto, the simulated provider, the API and its
authorizer, the relay, the scheduler, two workers (each serving a group of service tiers) and live
notifications (the WebSocket server and the notifier), each piece built by the same wiring as in AWS."""

from __future__ import annotations

import json
import logging
import os
import secrets
import threading
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any
from uuid import UUID

import boto3
from pydantic import SecretStr

from tollgate.core.metrics import RecordedMetrics
from tollgate.core.reach import enforce
from tollgate.core.tiers import ServiceTier
from tollgate.db import Database, build_database
from tollgate.db.migrations import apply_migrations
from tollgate.delivery.attempts import attempt_delivery
from tollgate.delivery.ssrf import Resolver, system_resolver
from tollgate.notify.connections import InMemoryConnections
from tollgate.notify.service import NotifyDeps, close_revoked
from tollgate.outbox.nudge import EventNudger
from tollgate.outbox.relay import relay_outbox
from tollgate.scheduler.tick import run_scheduler
from tollgate.settings import (
    MIGRATIONS_DIR,
    ApiSettings,
    AuthorizerSettings,
    DatabaseSettings,
    NotificationSettings,
    OpsSettings,
    RelaySettings,
    SchedulerSettings,
    WebhookAttemptSettings,
    WorkerSettings,
)
from tollgate.support.configuration import DISCOVERY_FILE, local_aws
from tollgate.tenants.authorizer import authorize_request
from tollgate.tenants.keys import ApiKeyResolver
from tollgate.wiring import (
    build_api,
    build_authorizer,
    build_batch,
    build_execution,
    build_ingress,
    build_notify,
    build_ops,
    build_relay,
    build_scheduler,
    build_webhook_attempts,
    worker_config,
)
from tollgate_dev.local.aws import (
    JobsQueues,
    LocalAws,
    ResultsBus,
    create_documents_bucket,
    create_job_type_queues,
    create_jobs_queues,
    create_limiter_table,
    create_results_bus,
    dlq_urls,
    keep_moto_sqs_sends_flat,
    queue_urls,
    serialize_moto_dynamodb,
)
from tollgate_dev.local.erp import DemoErp
from tollgate_dev.local.foreground import StartCancelled
from tollgate_dev.local.gateway import BODY_READ_TIMEOUT_SECONDS, AppPool, LocalGateway
from tollgate_dev.local.logs import as_component
from tollgate_dev.local.loops import Loop
from tollgate_dev.local.notifications import (
    LocalWebSocketServer,
    NotifierThread,
    SocketSender,
    deliver_notifications,
)
from tollgate_dev.local.ops import LocalOpsFunction
from tollgate_dev.local.ports import PortsUnavailable, binding, check_ports
from tollgate_dev.local.postgres import server_url
from tollgate_dev.local.stepfunctions import create_dispatcher, release_dispatcher
from tollgate_dev.local.workers import WorkerThread
from tollgate_dev.simulator.server import Latency, SimulatedProvider, SimulatorConfig

DEFAULT_DATA_DIR = Path(".tollgate")
# Requests the local gateway handles at once (Lambda would run that many instances of the API function).
API_CONCURRENCY = 8
LOCAL_BUCKET = "tollgate-documents-local"
# 5 s -> 0.05 s, 2 h -> 72 s: retries of a receiver that is down play out while one watches.
DELIVERY_TIME_SCALE = 0.01
# A provider with realistic latency and quotas generous enough that the demo is not about throttling. Run
# with PROVIDER_STRUCTURED_OUTPUT=prompt, it answers like a prompt-only model: now and then a fence or a
# closing remark, which the worker takes as invalid output and retries.
LOCAL_SIMULATOR = SimulatorConfig(
    requests_per_minute=3000,
    tokens_per_minute=6_000_000,
    max_concurrency=16,
    latency=Latency(0.25),
    prompt_only_rates={"code_fence": 0.05, "trailing_prose": 0.05},
    seed=7,
)
# Live notifications: a revoked key's connections close within seconds rather than the stage's minute, and
# the sweep that closes them looks every second.
LOCAL_NOTIFICATIONS: dict[str, Any] = {"key_check_seconds": 5}
KEY_SWEEP_SECONDS = 1.0


@dataclass
class LocalStack:
    port: int = 8080
    # The demo ERP's port; 0 picks a free one (tests), `tollgate local up` asks for 8081.
    erp_port: int = 0
    erp: DemoErp | None = None
    data_dir: Path = DEFAULT_DATA_DIR
    api_overrides: dict[str, Any] = field(default_factory=dict)
    database_url: str = ""
    aws: LocalAws | None = None
    gateway: LocalGateway | None = None
    # How long the gateway waits for a request body to arrive in full; tests that send a short one wait less.
    gateway_body_read_timeout: float = BODY_READ_TIMEOUT_SECONDS
    system_db: Database | None = None
    # Tests that drive the relay, scheduler and ingress themselves turn the background loops off.
    pipeline: bool = True
    relay_sweep_seconds: float = 60.0
    scheduler_interval_seconds: float = 60.0
    metrics: RecordedMetrics = field(default_factory=RecordedMetrics)
    # The start of this system's queue, bus and table names. moto keeps one state per process, whichever
    # server serves it, so systems started one after another in a process (tests) would otherwise take
    # over each other's queues, messages and budget. `tollgate local up` names them as the README does.
    resource_prefix: str = field(default_factory=lambda: f"tollgate-{secrets.token_hex(3)}")
    # Each job type's queue and dead-letter queue, by job type.
    queues: dict[str, JobsQueues] | None = None
    results_bus: ResultsBus | None = None
    dispatcher_arn: str | None = None
    # The operations function behind its SigV4-checking URL stand-in: `tollgate --ops-url <url> ...`; 0 picks
    # a free port (tests), `tollgate local up` asks for 8082.
    ops: LocalOpsFunction | None = None
    ops_port: int = 0
    # The WebSocket server of live notifications; 0 picks a free port (tests), `tollgate local up` asks for
    # 8083. NotificationSettings fields for it (replay window, cap, key checks) go in notification_overrides.
    websocket: LocalWebSocketServer | None = None
    ws_port: int = 0
    notification_overrides: dict[str, Any] = field(default_factory=dict)
    notify: NotifyDeps | None = None
    notifications_queue: JobsQueues | None = None
    loops: dict[str, Loop] = field(default_factory=dict)
    workers: int = 2
    # The service tiers each worker claims, highest first, in turn: like the deployed tier services, a
    # high-tier job always finds a worker that high work comes first for, and a batch backlog has a worker
    # of its own to drain on, while normal jobs (what most callers send) have both.
    worker_tiers: tuple[tuple[ServiceTier, ...], ...] = (("high", "normal"), ("normal", "batch"))
    worker_overrides: dict[str, Any] = field(default_factory=dict)
    # How the API resolves webhook hosts at registration when private targets are not allowed; tests that
    # run the strict policy pass an in-memory DNS so no query leaves the machine.
    webhook_resolver: Resolver = system_resolver
    simulator_config: SimulatorConfig = field(default_factory=lambda: LOCAL_SIMULATOR)
    simulator: SimulatedProvider | None = None
    activity: threading.Condition = field(default_factory=threading.Condition)
    # Set by a Ctrl-C while starting: the start ends at its next step and what had started is stopped.
    cancelled: threading.Event = field(default_factory=threading.Event)
    # Calls an entrypoint made that tollgate.core.reach does not declare for it (each also raised where made).
    undeclared_calls: list[str] = field(default_factory=list)
    _closers: list[Any] = field(default_factory=list)

    def notify_activity(self) -> None:
        with self.activity:
            self.activity.notify_all()

    def wait_for(self, predicate: Callable[[], bool], timeout: float) -> bool:
        """Blocks until ``predicate`` holds, re-checking whenever a loop or worker did something."""
        with self.activity:
            return self.activity.wait_for(predicate, timeout)

    @property
    def limiter_table(self) -> str:
        """The provider budget's table, which this system's workers share."""
        return f"{self.resource_prefix}-provider-budget-local"

    @property
    def api_url(self) -> str:
        assert self.gateway is not None
        return self.gateway.url

    @property
    def websocket_url(self) -> str:
        assert self.websocket is not None
        return self.websocket.url

    def cancel(self) -> None:
        """Asks a start in progress (on another thread, or interrupted by a signal) to end early."""
        self.cancelled.set()

    @property
    def fixed_ports(self) -> dict[str, int]:
        """The ports this system will listen on, by field name; 0 means any free port."""
        ports = {"port": self.port}
        if self.pipeline:
            ports |= {"erp_port": self.erp_port, "ops_port": self.ops_port, "ws_port": self.ws_port}
        return ports

    def check_ports(self) -> None:
        """Raises PortsUnavailable (nothing started) when a port this system will bind cannot be had."""
        if problems := check_ports(self.fixed_ports):
            raise PortsUnavailable(problems, started=False)

    def _unless_cancelled(self) -> None:
        if self.cancelled.is_set():
            raise StartCancelled

    def start(self) -> LocalStack:
        """Starts every piece in order; each is registered to be stopped as soon as it runs, so ``stop``
        after a start that failed or was cancelled (StartCancelled) stops exactly what had started."""
        # First, before PostgreSQL and the migrations take their half a minute: a taken port stops it here.
        self.check_ports()
        # Every entrypoint's AWS calls are held to its declaration, which makes its grants, subnets and the
        # stage's endpoints: a call it misses fails here rather than in a deployed stage.
        enforcing = ExitStack()
        self.undeclared_calls = enforcing.enter_context(enforce())
        self._closers.append(enforcing.close)
        if not self.database_url:
            self.database_url, pg_handle = server_url(self.data_dir.resolve() / "pgdata")
            if pg_handle is not None:
                self._closers.append(pg_handle.cleanup)
        self._unless_cancelled()
        if self.aws is None:
            self.aws = LocalAws()
            self.aws.start()
            self._closers.append(self.aws.stop)
        # Job bursts with no worker taking them (tests, a stopped worker) keep queues deep: moto's sends must
        # not slow down with them.
        self._closers.append(keep_moto_sqs_sends_flat())
        create_documents_bucket(LOCAL_BUCKET)
        self.queues = create_job_type_queues(self.resource_prefix)
        self._unless_cancelled()
        apply_migrations(self.database_url, MIGRATIONS_DIR)
        self._unless_cancelled()

        url = SecretStr(self.database_url)
        if self.pipeline:
            self.dispatcher_arn = self._start_dispatcher(url)
        # The demo's receiver listens on http://127.0.0.1, which only local development may register.
        overrides = {
            "webhooks_allow_private_targets": True,
            "webhook_state_machine_arn": self.dispatcher_arn,
            **self.api_overrides,
        }
        api_settings = ApiSettings(database_url=url, documents_bucket=LOCAL_BUCKET, **overrides)
        relay_wake = EventNudger()
        deps = build_api(api_settings, nudger=relay_wake, webhook_resolver=self.webhook_resolver)
        self._closers.append(deps.acceptance.db.close)
        authorizer_settings = AuthorizerSettings(database_url=url)
        authorizer_db = build_database(authorizer_settings, pool_name="authorizer")
        self._closers.append(authorizer_db.close)
        resolver = build_authorizer(authorizer_settings, authorizer_db)
        self.system_db = build_database(
            DatabaseSettings(database_url=url, database_role="tollgate_system"), pool_name="system"
        )
        self._closers.append(self.system_db.close)

        with binding("port", self.port):
            self.gateway = LocalGateway(
                api=as_component("api", AppPool(deps, size=API_CONCURRENCY).handle),
                authorizer=as_component(
                    "authorizer", lambda token, arn: authorize_request(resolver, token, arn)
                ),
                port=self.port,
                body_read_timeout=self.gateway_body_read_timeout,
            )
        self.gateway.start()
        self._closers.append(self.gateway.stop)
        if self.pipeline:
            self._unless_cancelled()
            with binding("erp_port", self.erp_port):
                self.erp = DemoErp(self.system_db, port=self.erp_port).start()
            self._closers.append(self.erp.stop)
            self._start_pipeline(url, relay_wake, resolver)
            self._start_ops(url)
            self._write_discovery()
        return self

    def _start_ops(self, url: SecretStr) -> None:
        """The operations function as a stage runs it, on this system's database, queues and dispatcher."""
        assert self.aws is not None
        assert self.queues is not None
        settings = OpsSettings(
            database_url=url,
            job_queue_urls=queue_urls(self.queues),
            job_dlq_urls=dlq_urls(self.queues),
            webhook_state_machine_arn=self.dispatcher_arn,
            documents_bucket=LOCAL_BUCKET,
        )
        deps = build_ops(settings, aws=local_aws(self.aws.endpoint_url))
        self._closers.append(deps.db.close)
        with binding("ops_port", self.ops_port):
            self.ops = LocalOpsFunction(deps, port=self.ops_port).start()
        self._closers.append(self.ops.stop)

    def _write_discovery(self) -> None:
        """Tells other commands on this machine (the support CLI) where this system's parts listen."""
        assert self.aws is not None
        assert self.queues is not None
        path = self.data_dir.resolve() / DISCOVERY_FILE
        bus = self.results_bus
        path.parent.mkdir(parents=True, exist_ok=True)
        facts = {
            "api_url": self.api_url,
            "ops_url": self.ops.url if self.ops else None,
            "erp_url": self.erp.url if self.erp else None,
            "websocket_url": self.websocket.url if self.websocket else None,
            "notifications_queue_url": self.notifications_queue.url if self.notifications_queue else None,
            "aws_endpoint_url": self.aws.endpoint_url,
            "job_queue_urls": queue_urls(self.queues),
            "job_dlq_urls": dlq_urls(self.queues),
            "results_bus_name": bus.name if bus else None,
            "results_subscriber_queue_url": bus.subscriber_queue_url if bus else None,
            "webhook_state_machine_arn": self.dispatcher_arn,
            "database_url": self.database_url,
            "documents_bucket": LOCAL_BUCKET,
        }
        path.write_text(json.dumps(facts, indent=2), encoding="utf-8")
        path.chmod(0o600)
        self._closers.append(lambda: path.unlink(missing_ok=True))

    def _start_pipeline(self, url: SecretStr, relay_wake: EventNudger, resolver: ApiKeyResolver) -> None:
        """The relay (nudged by the API, swept on an interval), the scheduler, live notifications and the
        workers."""
        assert self.queues is not None
        urls = queue_urls(self.queues)
        self.results_bus = create_results_bus(f"{self.resource_prefix}-local-results")
        self.notifications_queue = create_jobs_queues(f"{self.resource_prefix}-notifications")
        relay = build_relay(
            RelaySettings(
                database_url=url,
                job_queue_urls=urls,
                webhook_state_machine_arn=self.dispatcher_arn,
                results_bus_name=self.results_bus.name,
                results_event_source=self.results_bus.source,
                notifications_queue_url=self.notifications_queue.url,
            )
        )
        scheduler = build_scheduler(
            SchedulerSettings(
                database_url=url, webhook_state_machine_arn=self.dispatcher_arn, documents_bucket=LOCAL_BUCKET
            ),
            self.metrics,
        )
        for db in (relay.db, scheduler.db):
            self._closers.append(db.close)
        loops = [
            Loop(
                "relay",
                as_component("relay", lambda: relay_outbox(relay)),
                self.relay_sweep_seconds,
                wake=relay_wake.event,
            ),
            Loop(
                "scheduler",
                as_component("scheduler", lambda: run_scheduler(scheduler)),
                self.scheduler_interval_seconds,
            ),
        ]
        for loop in loops:
            loop.on_step = self.notify_activity
            loop.start()
            self._closers.append(loop.stop)
            self.loops[loop.name] = loop
        self._unless_cancelled()
        self._start_notifications(url, resolver)
        self._unless_cancelled()
        self._start_workers(url, urls, relay_wake)

    def _start_notifications(self, url: SecretStr, resolver: ApiKeyResolver) -> None:
        """The WebSocket API's stand-in and the notifier on the notifications queue, with the use cases the
        Lambdas run. Connections are kept in memory (the same rules as the DynamoDB table, without a moto
        round trip per lease and advance)."""
        assert self.notifications_queue is not None
        settings = NotificationSettings(
            database_url=url,
            # Neither is read: the store and the sender below are this process's own.
            connections_table="in-memory",
            websocket_endpoint="local-sockets",
            **{**LOCAL_NOTIFICATIONS, **self.notification_overrides},
        )
        sender = SocketSender()
        self.notify = deps = build_notify(settings, connections=InMemoryConnections(), sender=sender)
        self._closers.append(deps.db.close)
        with binding("ws_port", self.ws_port):
            self.websocket = LocalWebSocketServer(deps, sender, resolver, port=self.ws_port).start()
        self._closers.append(self.websocket.stop)
        sqs = boto3.client("sqs")
        queue_url = self.notifications_queue.url
        notifier = NotifierThread(
            as_component("notifier", lambda: deliver_notifications(deps, sqs, queue_url)),
            self.notify_activity,
        )
        notifier.start()
        self._closers.append(notifier.stop)
        sweep = Loop(
            "notifier-keys", as_component("notifier", lambda: close_revoked(deps)), KEY_SWEEP_SECONDS
        )
        sweep.on_step = self.notify_activity
        sweep.start()
        self._closers.append(sweep.stop)
        self.loops[sweep.name] = sweep

    def _start_dispatcher(self, url: SecretStr) -> str:
        """The webhook dispatcher in moto's state machine executor; its waits are compressed so that a
        schedule of minutes and hours plays out in seconds (the recorded delays stay the real ones)."""
        settings = WebhookAttemptSettings(database_url=url, webhooks_allow_private_targets=True)
        deps = build_webhook_attempts(settings, time_scale=DELIVERY_TIME_SCALE)
        self._closers.append(deps.db.close)

        @partial(as_component, "webhooks")
        def attempt(payload: dict[str, Any]) -> dict[str, Any]:
            outcome = attempt_delivery(deps, UUID(payload["delivery_id"])).as_state_output()
            self.notify_activity()
            return outcome

        arn = create_dispatcher(attempt, suffix=f"-{secrets.token_hex(3)}")
        self._closers.append(partial(release_dispatcher, arn))
        return arn

    def _start_workers(self, url: SecretStr, urls: dict[str, str], relay_wake: EventNudger) -> None:
        # One provider budget for both workers, in DynamoDB on moto, as the deployed workers share one.
        create_limiter_table(boto3.client("dynamodb"), self.limiter_table)
        self._closers.append(serialize_moto_dynamodb())
        overrides: dict[str, Any] = {"limiter_table": self.limiter_table}
        if not (os.environ.get("OPENAI_API_KEY") or os.environ.get("OPENAI_BASE_URL")):
            self.simulator = SimulatedProvider(self.simulator_config)
            overrides["openai_base_url"] = self.simulator.start()
            overrides["openai_api_key"] = SecretStr("simulated")
            self._closers.append(self.simulator.stop)
        for number in range(1, self.workers + 1):
            tiers = self.worker_tiers[(number - 1) % len(self.worker_tiers)]
            settings = WorkerSettings(
                database_url=url,
                job_queue_urls=urls,
                documents_bucket=LOCAL_BUCKET,
                worker_id=f"local-worker-{number}",
                worker_service_tiers=tiers,
                # Short waits keep Ctrl-C prompt; in AWS the worker long-polls for 20 s.
                ingress_wait_seconds=1,
                claim_idle_seconds=1.0,
                drain_seconds=10.0,
                **overrides,
                **self.worker_overrides,
            )
            db = build_database(settings, pool_name=f"worker-{number}")
            execution = build_execution(settings, db, nudger=relay_wake)
            worker = WorkerThread(
                f"worker-{number}",
                build_ingress(settings, db),
                execution,
                worker_config(settings),
                self.notify_activity,
                # With BATCH_API on (the environment or worker_overrides), the worker serving the batch tier
                # sends it through the Batch API, as worker/main.py does.
                batch=build_batch(settings, execution),
            )
            worker.start()
            self._closers.append(db.close)
            self._closers.append(worker.stop)

    def stop(self) -> None:
        """Stops what was started, last first; one piece failing to stop does not keep the rest running
        (a start cut short by Ctrl-C leaves pieces half made)."""
        while self._closers:
            closer = self._closers.pop()
            try:
                closer()
            except Exception:
                logging.getLogger("tollgate_dev.local").exception("a part of the local system failed to stop")

    def __enter__(self) -> LocalStack:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
