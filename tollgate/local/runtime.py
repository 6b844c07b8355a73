"""Assembles the local system in one process: PostgreSQL, moto, migrations, the authorizer and the API."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from tollgate.api.app import create_app, handle
from tollgate.authorizer import authorize_request
from tollgate.db import Database, build_database
from tollgate.db.migrations import apply_migrations
from tollgate.ingress import ingest_once
from tollgate.local.aws import JobsQueues, LocalAws, create_documents_bucket, create_jobs_queues
from tollgate.local.gateway import LocalGateway
from tollgate.local.loops import Loop
from tollgate.local.postgres import server_url
from tollgate.metrics import RecordedMetrics
from tollgate.nudge import EventNudger
from tollgate.outbox import relay_outbox
from tollgate.scheduling import run_scheduler
from tollgate.settings import (
    REPO_ROOT,
    ApiSettings,
    AuthorizerSettings,
    DatabaseSettings,
    RelaySettings,
    SchedulerSettings,
    WorkerSettings,
)
from tollgate.wiring import build_api, build_authorizer, build_ingress, build_relay, build_scheduler

DEFAULT_DATA_DIR = Path(".tollgate")
LOCAL_BUCKET = "tollgate-documents-local"


@dataclass
class LocalStack:
    port: int = 8080
    data_dir: Path = DEFAULT_DATA_DIR
    api_overrides: dict[str, Any] = field(default_factory=dict)
    database_url: str = ""
    aws: LocalAws | None = None
    gateway: LocalGateway | None = None
    system_db: Database | None = None
    # Tests that drive the relay, scheduler and ingress themselves turn the background loops off.
    pipeline: bool = True
    relay_sweep_seconds: float = 60.0
    scheduler_interval_seconds: float = 60.0
    metrics: RecordedMetrics = field(default_factory=RecordedMetrics)
    queues: JobsQueues | None = None
    loops: dict[str, Loop] = field(default_factory=dict)
    _closers: list[Any] = field(default_factory=list)

    @property
    def api_url(self) -> str:
        assert self.gateway is not None
        return self.gateway.url

    def start(self) -> LocalStack:
        if not self.database_url:
            self.database_url, pg_handle = server_url(self.data_dir.resolve() / "pgdata")
            if pg_handle is not None:
                self._closers.append(pg_handle.cleanup)
        if self.aws is None:
            self.aws = LocalAws()
            self.aws.start()
            self._closers.append(self.aws.stop)
        create_documents_bucket(LOCAL_BUCKET)
        self.queues = create_jobs_queues()
        apply_migrations(self.database_url, REPO_ROOT / "migrations")

        url = SecretStr(self.database_url)
        api_settings = ApiSettings(database_url=url, documents_bucket=LOCAL_BUCKET, **self.api_overrides)
        relay_wake = EventNudger()
        deps = build_api(api_settings, nudger=relay_wake)
        self._closers.append(deps.acceptance.db.close)
        app = create_app(deps)
        authorizer_settings = AuthorizerSettings(database_url=url)
        authorizer_db = build_database(authorizer_settings, pool_name="authorizer")
        self._closers.append(authorizer_db.close)
        resolver = build_authorizer(authorizer_settings, authorizer_db)
        self.system_db = build_database(
            DatabaseSettings(database_url=url, database_role="tollgate_system"), pool_name="system"
        )
        self._closers.append(self.system_db.close)

        self.gateway = LocalGateway(
            api=lambda event, context: handle(app, deps, event, context),
            authorizer=lambda token, arn: authorize_request(resolver, token, arn),
            port=self.port,
        )
        self.gateway.start()
        self._closers.append(self.gateway.stop)
        if self.pipeline:
            self._start_pipeline(url, relay_wake)
        return self

    def _start_pipeline(self, url: SecretStr, relay_wake: EventNudger) -> None:
        """The relay (nudged by the API, swept on an interval), the scheduler and the worker's ingress."""
        assert self.queues is not None
        queue_url = self.queues.url
        relay = build_relay(RelaySettings(database_url=url, jobs_queue_url=queue_url))
        scheduler = build_scheduler(SchedulerSettings(database_url=url), self.metrics)
        # A short long-poll keeps Ctrl-C prompt; in AWS the worker waits the full 20 s.
        ingress = build_ingress(
            WorkerSettings(
                database_url=url,
                jobs_queue_url=queue_url,
                documents_bucket=LOCAL_BUCKET,
                ingress_wait_seconds=1,
            )
        )
        for db in (relay.db, scheduler.db, ingress.db):
            self._closers.append(db.close)
        loops = [
            Loop("relay", lambda: relay_outbox(relay), self.relay_sweep_seconds, wake=relay_wake.event),
            Loop("scheduler", lambda: run_scheduler(scheduler), self.scheduler_interval_seconds),
            Loop("ingress", lambda: ingest_once(ingress), 0),
        ]
        for loop in loops:
            loop.start()
            self._closers.append(loop.stop)
            self.loops[loop.name] = loop

    def stop(self) -> None:
        while self._closers:
            self._closers.pop()()

    def __enter__(self) -> LocalStack:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
