"""``tollgate local chaos``: a bounded fault-injection run on the local system, then the ledger check.

Tenants submit sample invoices at a steady pace, every fourth on the batch tier through the provider's Batch
API, while a plan drawn from the seed injects every kind of fault (workers and the relay killed at their worst
moments, the batch path's included, the AWS endpoint and PostgreSQL taken away, provider 429 storms, timeouts
and broken output, failed batch lines, the ERP down), each armed by an event the run observes (the Nth job
accepted, reaching RUNNING or finished) and counted only once it showed (a process died at its crash point,
the provider served the fault). Then the faults are healed, the system gets until the time limit to settle,
and the ledger check reconciles the database, the queues, the dead letters, the ERP's log and the Batch API's
budget. The run fails
if any invariant broke, any planned fault did not happen, or anything else surprised.
"""

from __future__ import annotations

import json
import logging
import os
import random
import shutil
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import IO, Any
from uuid import UUID

import boto3
from rich.console import Console
from rich.table import Table

from tollgate.core.clock import new_id
from tollgate.core.job_states import FINISHED_STATES, UNFINISHED_STATES, JobState
from tollgate.db import Database
from tollgate.delivery.states import DeliveryState
from tollgate.scheduler.tick import read_pipeline_progress
from tollgate.tenants.keys import create_tenant
from tollgate.tenants.suppliers import add_supplier
from tollgate_dev.chaos.erp import ErpEndpoint, ErpLog
from tollgate_dev.chaos.fleet import Fleet
from tollgate_dev.chaos.gate import Gate
from tollgate_dev.chaos.ledger import (
    Expectations,
    LedgerReport,
    check_ledger,
    read_batch_pool,
    read_type_queues,
)
from tollgate_dev.chaos.plan import (
    BATCH_LINE_FAULTS,
    CRASHPOINTS,
    EARLY_FAULTS,
    PROVIDER_FAULTS,
    FaultKind,
    Milestone,
    PlannedFault,
    plan_faults,
)
from tollgate_dev.chaos.postgres import (
    ChaosDatabase,
    close_server,
    create_chaos_database,
    drop_chaos_database,
    postgres_outage,
)
from tollgate_dev.chaos.waiting import Waited, Waiter
from tollgate_dev.local.aws import JobsQueues, LocalAws, queue_urls
from tollgate_dev.local.client import ApiClient
from tollgate_dev.local.runtime import LOCAL_BUCKET, LocalStack
from tollgate_dev.queries import dev_queries
from tollgate_dev.reporting import delivery_states, job_states
from tollgate_dev.samples import CONSISTENT_KINDS, SUPPLIERS, SampleInvoice, generate_invoices, request_body
from tollgate_dev.simulator.batches import BatchSimulation
from tollgate_dev.simulator.server import Fault, Latency, SimulatorConfig

DEFAULT_DATA_DIR = Path(".tollgate/chaos")
TENANTS = ("nordwind-buyers", "lumiere-achats", "thames-accounts")
# Faults drawn at random on top of the planned ones, so that no request is ever quite safe.
BACKGROUND_FAULTS = {"429": 0.01, "malformed_json": 0.01, "wrong_schema": 0.01, "timeout": 0.004}
# Short leases and attempt timeouts, so a killed worker's jobs and a held provider call come back within
# seconds; a fast retry schedule, so the retries play out inside the run.
WORKER_SETTINGS = {
    "EXECUTION_SLOTS": "4",
    "INGRESS_WAIT_SECONDS": "1",
    "INGRESS_FAILURE_VISIBILITY_SECONDS": "1",
    "CLAIM_IDLE_SECONDS": "0.5",
    "LEASE_SECONDS": "6",
    "HEARTBEAT_SECONDS": "1",
    "ATTEMPT_TIMEOUT_SECONDS": "3",
    "RETRY_BASE_SECONDS": "0.5",
    "RETRY_CAP_SECONDS": "2",
    "DRAIN_SECONDS": "5",
    "LIMITER_PERMIT_TTL_SECONDS": "10",
    "PROVIDER_REQUESTS_PER_MINUTE": "6000",
    "PROVIDER_TOKENS_PER_MINUTE": "20000000",
    "PROVIDER_MAX_IN_FLIGHT": "32",
    # The batch path on every worker (each serves every tier), its minutes made seconds: a batch goes out
    # every couple of seconds, is looked at every second, and a worker killed while preparing or settling one
    # leaves it to another (or to itself, restarted) within seconds. The 24 h window and the settle and
    # fallback hours stay: they decide which jobs a batch takes, not how long the run waits.
    "BATCH_API": "true",
    "BATCH_INTERVAL_SECONDS": "2",
    "BATCH_POLL_SECONDS": "1",
    "BATCH_HOLD_SECONDS": "5",
}
# Every BATCH_EVERY-th invoice is submitted on the batch tier with a deadline that leaves the Batch API's
# window, the settle and an immediate attempt after them (BatchConfig.offers: more than 26 h).
BATCH_EVERY = 4
BATCH_DEADLINE_SECONDS = 3 * 24 * 3600
# The simulated provider ends a batch this long after it was created, its lines answered evenly over it.
BATCH_COMPLETION_SECONDS = 3.0
RELAY_SETTINGS = {"RELAY_CLAIM_SECONDS": "5", "RELAY_BATCH_SIZE": "50", "RELAY_SWEEP_SECONDS": "0.2"}
# A crashed worker's undelivered messages come back this soon (the deployed queue waits 60 s).
QUEUE_VISIBILITY_SECONDS = 5
# Kept back from the time limit for the ledger check and the report.
LEDGER_RESERVE_SECONDS = 10.0
# Of the time left after the traffic, the share that planned faults may still wait for their events; the
# rest is for settling. A fault whose event has not come by then is reported as not injected, with what it
# awaited.
FAULT_WAIT_SHARE = 0.5
# How long the traffic waits for the fleet's processes to start (at most a quarter of the time limit).
FLEET_START_SECONDS = 60.0
# How often a fault's wait looks again at what it awaits (a count in the database, a crash, the provider).
WAIT_INTERVAL_SECONDS = 0.2


@dataclass(frozen=True)
class ChaosConfig:
    seed: int = 1
    jobs: int = 300
    time_limit: float = 480.0
    data_dir: Path = DEFAULT_DATA_DIR
    workers: int = 2

    @property
    def traffic_seconds(self) -> float:
        return min(max(20.0, self.jobs * 0.3), 0.45 * self.time_limit)


@dataclass
class FaultRecord:
    planned: PlannedFault
    injected: int = 0
    detail: str = ""
    at: float | None = None  # seconds after the traffic started, when it was injected


@dataclass
class ChaosReport:
    config: ChaosConfig
    faults: list[FaultRecord]
    ledger: LedgerReport | None
    checks: list[tuple[str, bool, str]]
    seconds: float
    facts: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.ledger is not None and self.ledger.ok and all(ok for _, ok, _ in self.checks)


@dataclass
class Tenant:
    name: str
    tenant_id: UUID
    client: ApiClient


def expected_states(invoice: SampleInvoice) -> frozenset[str]:
    """Where a job may end by extraction: its invoice adds up, or it does not (misprinted totals)."""
    if invoice.kind in CONSISTENT_KINDS:
        return frozenset({JobState.SUCCEEDED.value})
    return frozenset({JobState.REVIEW_REQUIRED.value})


class ChaosRun:
    def __init__(
        self, config: ChaosConfig, console: Console, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.config = config
        self.console = console
        self.clock = clock
        self.rng = random.Random(config.seed)  # noqa: S311 - a reproducible run, not a secret
        self.started = clock()
        self.deadline = self.started + config.time_limit
        self.abort = threading.Event()
        self.waiter = Waiter(clock, self.abort.wait, WAIT_INTERVAL_SECONDS)
        self._milestones: tuple[float, dict[Milestone, int]] | None = None
        self._milestones_lock = threading.Lock()
        self.faults_deadline = self.deadline
        self.logs_dir = config.data_dir.resolve() / "logs"
        self.plan = plan_faults(config.seed, config.traffic_seconds, config.jobs)
        self.records = [FaultRecord(planned) for planned in self.plan]
        self.erp_log = ErpLog()
        self.endpoints: list[ErpEndpoint] = []
        self.tenants: list[Tenant] = []
        self.acknowledged: dict[UUID, frozenset[str]] = {}
        self.cancel_requested: set[UUID] = set()
        self.retried: Counter[str] = Counter()
        self.problems: list[str] = []
        self._lock = threading.Lock()
        self.database: ChaosDatabase | None = None
        self.aws: LocalAws | None = None
        self.gate: Gate | None = None
        self.traffic_started = self.started
        self.log_stream: IO[str] | None = None
        self.stack: LocalStack | None = None
        self.fleet: Fleet | None = None

    # -- the run ----------------------------------------------------------------------------------------

    def run(self) -> ChaosReport:
        report: ChaosReport | None = None
        try:
            self._set_up()
            self._traffic_with_faults()
            settled, stuck = self._settle()
            ledger = self._reconcile()
            report = self._report(ledger, settled, stuck)
            return report
        finally:
            self._tear_down(keep_database=report is not None and not report.ok)

    def elapsed(self) -> float:
        return self.clock() - self.started

    def _set_up(self) -> None:
        config = self.config
        shutil.rmtree(self.logs_dir, ignore_errors=True)
        self.logs_dir.mkdir(parents=True)
        self.log_stream = (self.logs_dir / "chaos.log").open("a", encoding="utf-8", buffering=1)
        _logs_into(self.log_stream)
        self.database = create_chaos_database(config.data_dir, config.seed)
        self.aws = LocalAws()
        self.aws.start()
        # Every client of this run reaches AWS through the gate, which the AWS outage closes.
        self.gate = Gate(int(self.aws.endpoint_url.rsplit(":", 1)[1])).open()
        os.environ["AWS_ENDPOINT_URL"] = self.gate.url
        self.stack = LocalStack(
            port=0,
            data_dir=config.data_dir,
            database_url=self.database.url,
            aws=self.aws,
            workers=0,
            scheduler_interval_seconds=1.0,
            simulator_config=SimulatorConfig(
                requests_per_minute=None,
                tokens_per_minute=None,
                max_concurrency=32,
                latency=Latency(0.1),
                fault_rates=BACKGROUND_FAULTS,
                storm_retry_after_seconds=1.0,
                timeout_hold_seconds=5.0,
                seed=config.seed,
                batches=BatchSimulation(completion_seconds=BATCH_COMPLETION_SECONDS),
            ),
        ).start()
        _logs_into(self.log_stream)  # the parts just built brought loggers of their own
        # The relay runs as a process of its own here, so that it can be killed for real.
        self.stack.loops["relay"].stop()
        assert self.stack.queues is not None
        for pair in self.stack.queues.values():
            boto3.client("sqs").set_queue_attributes(
                QueueUrl=pair.url, Attributes={"VisibilityTimeout": str(QUEUE_VISIBILITY_SECONDS)}
            )
        self._create_tenants()
        self.fleet = self._start_fleet()
        fleet_started = self._until_fleet_started()
        self.console.print(
            f"[bold]chaos[/bold] seed {config.seed}: {config.jobs} invoices over "
            f"{config.traffic_seconds:.0f} s from {len(self.tenants)} tenants, {len(self.plan)} faults "
            f"planned, time limit {config.time_limit:.0f} s; workers and relay up in {fleet_started:.0f} s; "
            f"logs in {self.logs_dir}"
        )

    def _create_tenants(self) -> None:
        assert self.stack is not None
        assert self.stack.system_db is not None
        db = self.stack.system_db
        currencies = sorted({supplier.currency for supplier in SUPPLIERS})
        for base in TENANTS:
            tenant = create_tenant(db, f"{base}-{self.config.seed}", new_id, allowed_currencies=currencies)
            for supplier in SUPPLIERS:
                add_supplier(db, tenant.tenant_id, supplier.name, supplier.iban, new_id)
            client = ApiClient(self.stack.api_url, tenant.api_key, timeout=30.0)
            created = client.request(
                "POST", "/webhook-endpoints", json_body={"url": "http://127.0.0.1:9/pending"}
            ).json
            endpoint = ErpEndpoint(created["secret"], self.erp_log)
            client.request(
                "PATCH",
                f"/webhook-endpoints/{created['endpoint_id']}",
                json_body={"url": f"{endpoint.url}/erp"},
            )
            self.endpoints.append(endpoint)
            self.tenants.append(Tenant(tenant.name, tenant.tenant_id, client))

    def _start_fleet(self) -> Fleet:
        stack, database = self.stack, self.database
        assert stack is not None
        assert stack.queues is not None
        assert stack.simulator is not None
        assert database is not None
        common = {
            **os.environ,
            "DATABASE_URL": database.url,
            "JOB_QUEUE_URLS": json.dumps(queue_urls(stack.queues)),
        }
        fleet = Fleet(
            self.logs_dir,
            self.config.data_dir.resolve() / "crash-tokens",
            worker_env={
                **common,
                **WORKER_SETTINGS,
                "DOCUMENTS_BUCKET": LOCAL_BUCKET,
                "LIMITER_TABLE": stack.limiter_table,
                "OPENAI_BASE_URL": stack.simulator.base_url,
                "OPENAI_API_KEY": "simulated",
            },
            relay_env={
                **common,
                **RELAY_SETTINGS,
                "WEBHOOK_STATE_MACHINE_ARN": stack.dispatcher_arn or "",
            },
            clock=self.clock,
        )
        fleet.start_relay()
        for number in range(1, self.config.workers + 1):
            fleet.start_worker(f"worker-{number}")
        return fleet

    def _until_fleet_started(self) -> float:
        """The traffic starts once every worker and the relay can take work: on a busy machine a process
        needs seconds to start, and tenants' jobs would otherwise pile up before any worker is there.
        Returns the seconds waited."""
        fleet = self.fleet
        assert fleet is not None
        limit = min(FLEET_START_SECONDS, 0.25 * self.config.time_limit)
        started = self.waiter.until(
            lambda: not fleet.starting(),
            self.clock() + limit,
            "the workers and the relay to start",
            seen=lambda: "still starting: " + ", ".join(fleet.starting()),
        )
        if not started.met:
            self.console.print(f"[yellow]{started.shortfall}; the traffic starts anyway[/yellow]")
        return started.seconds

    # -- traffic and faults -----------------------------------------------------------------------------

    def _traffic_with_faults(self) -> None:
        invoices = generate_invoices(self.config.jobs, seed=self.config.seed)
        cancels = set(self.rng.sample(range(self.config.jobs), max(1, self.config.jobs // 40)))
        traffic_started = self.clock()
        self.traffic_started = traffic_started
        traffic_ends = traffic_started + self.config.traffic_seconds
        settle_from = self.deadline - LEDGER_RESERVE_SECONDS
        self.faults_deadline = traffic_ends + FAULT_WAIT_SHARE * max(settle_from - traffic_ends, 0.0)
        timeline = threading.Thread(target=self._inject_all, name="chaos-faults")
        timeline.start()
        spacing = self.config.traffic_seconds / self.config.jobs
        try:
            with ThreadPoolExecutor(max_workers=6, thread_name_prefix="tenant") as pool:
                for index, invoice in enumerate(invoices):
                    if self._pause_until(traffic_started + index * spacing):
                        break
                    tenant = self.tenants[index % len(self.tenants)]
                    pool.submit(self._submit, index, tenant, invoice, index in cancels)
        except BaseException:
            self.abort.set()  # Ctrl-C: the tenants and the fault timeline stop at once, not at the time limit
            raise
        timeline.join()

    def _pause_until(self, moment: float) -> bool:
        """Waits for ``moment`` (monotonic); True when the run was aborted meanwhile."""
        return self.abort.wait(max(0.0, moment - self.clock()))

    def _submit(self, index: int, tenant: Tenant, invoice: SampleInvoice, cancel: bool) -> None:
        key = f"chaos-{self.config.seed}-{index}"
        tier: dict[str, object] = {}
        if index % BATCH_EVERY == BATCH_EVERY - 1:
            tier = {"service_tier": "batch", "deadline_seconds": BATCH_DEADLINE_SECONDS}
        body = request_body(invoice, metadata={"number": invoice.invoice_number}, **tier)
        answer = self._until_answered(
            key, lambda: tenant.client.submit(body, key), final=lambda status: status in {200, 202}
        )
        if answer is None:
            return
        job_id = UUID(answer.json["job_id"])
        with self._lock:
            self.acknowledged[job_id] = expected_states(invoice)
        if cancel:
            with self._lock:
                self.cancel_requested.add(job_id)
            self._until_answered(
                f"cancel {key}",
                lambda: tenant.client.request("POST", f"/extraction-jobs/{job_id}/cancel"),
                final=lambda status: status in {200, 409},
            )

    def _until_answered(self, what: str, call: Callable[[], Any], final: Callable[[int], bool]) -> Any:
        """Calls until the API gives a final answer, as a tenant's client would: the same request (and
        Idempotency-Key) again after a refused connection, a 5xx or a 429/503."""
        while not self.abort.is_set() and self.clock() < self.deadline - LEDGER_RESERVE_SECONDS:
            try:
                response = call()
            except OSError as error:
                reason = type(error).__name__
            else:
                if final(response.status):
                    return response
                if response.status < 500 and response.status not in {429, 503}:
                    with self._lock:
                        self.problems.append(f"{what}: HTTP {response.status} {response.body[:200]!r}")
                    return None
                reason = f"HTTP {response.status}"
            with self._lock:
                self.retried[reason] += 1
            self.abort.wait(self.rng.uniform(0.2, 0.6))
        with self._lock:
            self.problems.append(f"{what}: never answered before the time limit")
        return None

    def _inject_all(self) -> None:
        """Injects each planned fault once its event came. The crashes go one after another, each awaited
        until a process met its crash point; the other faults follow them, each on its own event, and may
        overlap. No outage starts while a crash is pending, so none keeps a process from its crash point."""
        crashes = [r for r in self.records if r.planned.kind in CRASHPOINTS]
        # The early faults that are no crash (failed batch lines) keep no process from its crash point: they
        # are armed beside the crashes, while the batch-tier traffic they need is still to come.
        beside = [
            self._injector(r) for r in self.records if r.planned.kind in EARLY_FAULTS - CRASHPOINTS.keys()
        ]
        for thread in beside:
            thread.start()
        for record in crashes:
            if self._armed(record):
                self._inject(record)
        others = [self._injector(r) for r in self.records if r.planned.kind not in EARLY_FAULTS]
        for thread in others:
            thread.start()
        for thread in beside + others:
            thread.join()

    def _injector(self, record: FaultRecord) -> threading.Thread:
        return threading.Thread(
            target=self._inject_when_armed, args=(record,), name=f"chaos-{record.planned.kind.name}"
        )

    def _inject_when_armed(self, record: FaultRecord) -> None:
        if self._armed(record):
            self._inject(record)

    def _armed(self, record: FaultRecord) -> bool:
        """Waits for the fault's event; False (and the report says what was awaited) if it did not come."""
        planned = record.planned
        trigger = planned.trigger
        armed = self.waiter.until(
            lambda: self._reached(trigger.milestone) >= trigger.count,
            self.faults_deadline,
            trigger.describe(),
            seen=lambda: f"{self._reached(trigger.milestone)} {trigger.milestone}",
        )
        if not armed.met:
            record.detail = f"not injected: {armed.shortfall}"
            return False
        record.at = self.clock() - self.traffic_started
        self.console.print(
            f"{record.at:6.1f} s  after {trigger}: {planned.kind.value} ({planned.unit})", highlight=False
        )
        return True

    def _reached(self, milestone: Milestone) -> int:
        """How many of the run's jobs got as far as ``milestone``; raises while the database is away. The
        database is read at most once per wait interval, however many faults are waiting."""
        if milestone is Milestone.ACCEPTED:
            with self._lock:
                return len(self.acknowledged)
        with self._milestones_lock:
            if self._milestones is None or self.clock() - self._milestones[0] >= WAIT_INTERVAL_SECONDS:
                self._milestones = (self.clock(), self._read_milestones())
            counts = self._milestones[1]
        return counts[milestone]

    def _read_milestones(self) -> dict[Milestone, int]:
        assert self.stack is not None
        assert self.stack.system_db is not None
        db = self.stack.system_db
        with db.transaction() as conn:
            row = conn.execute(
                dev_queries().chaos_job_milestones,
                {
                    "tenant_ids": [t.tenant_id for t in self.tenants],
                    "terminal_states": sorted(state.value for state in FINISHED_STATES),
                },
            ).fetchone()
        assert row is not None
        return {Milestone.RUNNING: int(row["running"]), Milestone.FINISHED: int(row["finished"])}

    def _inject(self, record: FaultRecord) -> None:
        kind, amount = record.planned.kind, record.planned.amount
        try:
            if kind in CRASHPOINTS:
                self._crash(record, CRASHPOINTS[kind])
            elif kind in PROVIDER_FAULTS:
                self._provider_fault(record, PROVIDER_FAULTS[kind], int(amount))
            elif kind in BATCH_LINE_FAULTS:
                self._line_fault(record, BATCH_LINE_FAULTS[kind], int(amount))
            elif kind is FaultKind.AWS_DOWN:
                record.detail = self._aws_outage(amount)
                record.injected = 1
            elif kind is FaultKind.POSTGRES_DOWN:
                assert self.database is not None
                record.detail = postgres_outage(self.database, amount, self.abort.wait)
                record.injected = 1
            elif kind is FaultKind.ERP_DOWN:
                for endpoint in self.endpoints:
                    endpoint.go_down()
                self.abort.wait(amount)
                for endpoint in self.endpoints:
                    endpoint.come_back()
                record.detail = (
                    f"all {len(self.endpoints)} tenants' ERPs refused connections for {amount:.1f} s"
                )
                record.injected = 1
        except Exception as error:  # a fault that could not be injected is reported, not fatal
            logging.getLogger("tollgate-chaos").exception("fault injection failed")
            record.detail = f"not injected: {type(error).__name__}: {error}"

    def _crash(self, record: FaultRecord, crashpoint: str) -> None:
        """Arms ``crashpoint`` for whichever process meets it next, and waits until one died there."""
        fleet = self.fleet
        assert fleet is not None
        token = fleet.arm(crashpoint)
        waited = self._await_crash(token, self.faults_deadline, f"a process to meet {crashpoint}")
        if not waited.met and not fleet.disarm(token):
            # Taken as the wait ran out: the process is dying at its crash point right now.
            waited = self._await_crash(token, self.clock() + 30.0, f"the process that took {token} to exit")
        crash = fleet.crash(token)
        if crash is None:
            record.detail = f"not injected: {waited.shortfall}"
            return
        record.injected = 1
        record.detail = (
            f"armed for the next process there; {crash.member} exited 137 at its crash point "
            f"{waited.seconds:.1f} s later, at {crash.at - self.traffic_started:.1f} s"
        )

    def _await_crash(self, token: str, deadline: float, awaited: str) -> Waited:
        fleet = self.fleet
        assert fleet is not None
        return self.waiter.until(
            lambda: fleet.crash(token) is not None,
            deadline,
            awaited,
            seen=lambda: ", ".join(fleet.alive()) + " alive",
        )

    def _provider_fault(self, record: FaultRecord, fault: Fault, count: int) -> None:
        """Queues ``count`` of ``fault`` for the next requests, and waits until the provider served one."""
        simulator = self.stack.simulator if self.stack is not None else None
        assert simulator is not None
        before = simulator.stats.faults.get(fault.value, 0)
        simulator.queue_fault(fault, count)
        waited = self.waiter.until(
            lambda: simulator.stats.faults.get(fault.value, 0) > before,
            self.faults_deadline,
            f"the provider to serve a queued {fault.value}",
            seen=lambda: f"{len(simulator.queued_faults())} faults still queued",
        )
        if not waited.met:
            record.detail = f"not injected: {waited.shortfall}"

    def _line_fault(self, record: FaultRecord, fault: Fault, count: int) -> None:
        """Queues ``fault`` for the next ``count`` lines of batches created from now on, and waits until a
        batch ended with one of them failed (the provider's count of failed lines went up)."""
        simulator = self.stack.simulator if self.stack is not None else None
        assert simulator is not None
        before = simulator.stats.batch_lines_failed
        simulator.queue_line_fault(fault, count)
        waited = self.waiter.until(
            lambda: simulator.stats.batch_lines_failed > before,
            self.faults_deadline,
            f"a provider batch to end with a line failed by a queued {fault.value}",
            seen=lambda: f"{sum(simulator.stats.batches.values())} batches created so far",
        )
        if not waited.met:
            record.detail = f"not injected: {waited.shortfall}"
            return
        failed = simulator.stats.batch_lines_failed - before
        record.injected = failed
        record.detail = (
            f"queued {count} for the next batch lines; {failed} failed lines seen "
            f"{waited.seconds:.1f} s later (more may follow)"
        )

    def _aws_outage(self, seconds: float) -> str:
        assert self.gate is not None
        self.gate.close()
        self.abort.wait(seconds)
        self.gate.open()
        return (
            f"API, relay and workers refused by the AWS endpoint for {seconds:.1f} s (moto and the "
            "dispatcher behind it kept running, as inside AWS)"
        )

    # -- settling and reconciling -----------------------------------------------------------------------

    def _settle(self) -> tuple[bool, list[str]]:
        """Waits until nothing is left to happen (or the time limit); returns whether the system settled,
        and the deliveries whose dispatcher execution ended without delivering them."""
        assert self.stack is not None
        stuck: list[str] = []

        def settled() -> bool:
            try:
                done, found = self._nothing_left()
            except Exception:  # a database or endpoint still coming back: look again later
                return False
            stuck[:] = found
            return done

        remaining = self.deadline - LEDGER_RESERVE_SECONDS - self.clock()
        ok = self.stack.wait_for(settled, timeout=max(remaining, 0.0)) and not stuck
        self.console.print(f"settled after {self.elapsed():.0f} s" if ok else "[red]did not settle[/red]")
        return ok, stuck

    def _nothing_left(self) -> tuple[bool, list[str]]:
        stack = self.stack
        assert stack is not None
        assert stack.system_db is not None
        assert stack.queues is not None
        db, tenant_ids = stack.system_db, [t.tenant_id for t in self.tenants]
        states = job_states(db, tenant_ids)
        if any(states.get(state.value, 0) for state in UNFINISHED_STATES):
            return False, []
        progress = read_pipeline_progress(db)
        if progress.events != progress.published:
            return False, []
        if read_type_queues(boto3.client("sqs"), _pairs(stack.queues), 0).messages_left:
            return False, []
        if _open_batches(db, tenant_ids):
            return False, []
        if not delivery_states(db, tenant_ids).get(DeliveryState.PENDING):
            return True, []
        stuck = self._stuck_deliveries(db, tenant_ids)
        # Pending deliveries whose executions all ended will never move: waiting longer changes nothing.
        return len(stuck) == delivery_states(db, tenant_ids).get(DeliveryState.PENDING, 0), stuck

    def _stuck_deliveries(self, db: Database, tenant_ids: list[UUID]) -> list[str]:
        stack = self.stack
        assert stack is not None
        assert stack.dispatcher_arn is not None
        sfn = boto3.client("stepfunctions")
        prefix = stack.dispatcher_arn.replace(":stateMachine:", ":execution:")
        stuck = []
        with db.transaction() as conn:
            rows = conn.execute(dev_queries().ledger_deliveries, {"tenant_ids": tenant_ids}).fetchall()
        for row in rows:
            if row["state"] != DeliveryState.PENDING:
                continue
            execution = sfn.describe_execution(executionArn=f"{prefix}:{row['delivery_id']}")
            if execution["status"] != "RUNNING":
                stuck.append(f"delivery {row['delivery_id']}: its execution {execution['status']}")
        return stuck

    def _reconcile(self) -> LedgerReport:
        stack = self.stack
        assert stack is not None
        assert stack.system_db is not None
        assert stack.queues is not None
        return check_ledger(
            stack.system_db,
            [t.tenant_id for t in self.tenants],
            queues=read_type_queues(boto3.client("sqs"), _pairs(stack.queues)),
            erp_effects=self.erp_log.effects,
            expectations=Expectations(
                acknowledged=dict(self.acknowledged), cancel_requested=frozenset(self.cancel_requested)
            ),
            batch_pool=read_batch_pool(boto3.client("dynamodb"), stack.limiter_table),
        )

    def _report(self, ledger: LedgerReport, settled: bool, stuck: list[str]) -> ChaosReport:
        assert self.fleet is not None
        assert self.stack is not None
        assert self.stack.simulator is not None
        drawn = self.stack.simulator.stats.faults
        by_kind: Counter[FaultKind] = Counter(r.planned.kind for r in self.records)
        for record in self.records:
            kind = record.planned.kind
            if kind in PROVIDER_FAULTS and record.at is not None and not record.detail:
                # Served from the queue first, then drawn at random (and the random ones before it count too).
                total = drawn.get(PROVIDER_FAULTS[kind].value, 0)
                record.injected = total
                extra = total - int(record.planned.amount)
                record.detail = f"queued {record.planned.amount:.0f}; {max(extra, 0)} more drawn at random"
        checks = [
            (
                "every planned fault was injected",
                all(r.injected for r in self.records),
                "; ".join(f"{r.planned.kind}: {r.detail}" for r in self.records if not r.injected)
                or f"{len(self.records)} faults of {len(by_kind)} kinds",
            ),
            (
                "every submission was acknowledged (retrying as clients do)",
                not self.problems and len(self.acknowledged) == self.config.jobs,
                "; ".join(self.problems[:3])
                or f"{len(self.acknowledged)} jobs; retries: "
                + (", ".join(f"{n}x {why}" for why, n in self.retried.most_common()) or "none"),
            ),
            (
                "the system settled before the time limit",
                settled,
                "; ".join(stuck[:3]) or f"after {self.elapsed():.0f} s",
            ),
            (
                "no process died unexpectedly",
                not self.fleet.surprises,
                "; ".join(self.fleet.surprises[:3]) or "only the planned crashes",
            ),
        ]
        provider = self.stack.simulator.stats
        facts = {
            "provider completions": provider.completions,
            "provider requests": provider.requests,
            "batches created at the provider": sum(provider.batches.values()),
            "batch lines answered": provider.batch_lines_answered,
            "batch lines failed": provider.batch_lines_failed,
            "ERP repeats recognised": self.erp_log.redeliveries,
            "cancellations asked": len(self.cancel_requested),
        }
        return ChaosReport(self.config, self.records, ledger, checks, self.elapsed(), facts)

    def _tear_down(self, keep_database: bool) -> None:
        self.abort.set()
        steps: list[Callable[[], object]] = []
        if self.fleet is not None:
            steps.append(partial(self.fleet.stop, timeout=15.0))
        if self.stack is not None:
            steps.append(self.stack.stop)
        steps += [endpoint.stop for endpoint in self.endpoints]
        if self.gate is not None:
            steps.append(self.gate.close)
        if self.aws is not None:
            steps.append(self.aws.stop)
        if self.database is not None:
            if keep_database:
                self.console.print(f"the run's database is kept for a look: {self.database.name}")
            else:
                steps.append(partial(drop_chaos_database, self.database))
            steps.append(partial(close_server, self.database))
        for step in steps:
            try:
                step()
            except Exception:
                logging.getLogger("tollgate-chaos").exception("tear-down step failed")
        if self.log_stream is not None:
            _turn_handlers({self.log_stream}, sys.stderr)  # nothing may write to a closed file
            self.log_stream.close()


def _logs_into(stream: IO[str]) -> None:
    """The in-process parts keep writing their usual lines, into the run's log file: the terminal is for the
    report. Handlers that write to the terminal are turned to the file; other records reach it by the root."""
    root = logging.getLogger()
    if not any(getattr(h, "stream", None) is stream for h in root.handlers):
        handler = logging.StreamHandler(stream)
        handler.setFormatter(
            logging.Formatter("%(asctime)s %(threadName)s %(name)s %(levelname)s %(message)s")
        )
        root.addHandler(handler)
        root.setLevel(logging.WARNING)
    _turn_handlers({sys.stdout, sys.stderr}, stream)


def _turn_handlers(streams: set[IO[str]], to: IO[str]) -> None:
    loggers = [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]
    for candidate in loggers:
        if not isinstance(candidate, logging.Logger):
            continue
        for handler in candidate.handlers:
            if isinstance(handler, logging.StreamHandler) and handler.stream in streams:
                handler.setStream(to)


def run_chaos(config: ChaosConfig, console: Console | None = None) -> ChaosReport:
    console = console or Console()
    report = ChaosRun(config, console).run()
    print_report(report, console)
    return report


def print_report(report: ChaosReport, console: Console) -> None:
    faults = Table(title=f"Faults injected (seed {report.config.seed})")
    for column in ("armed after", "at (s)", "fault", "planned", "injected", "detail"):
        right = {"armed after", "at (s)", "planned", "injected"}
        faults.add_column(column, justify="right" if column in right else "left")
    for record in report.faults:
        injected = f"[green]{record.injected}[/green]" if record.injected else "[red]0[/red]"
        faults.add_row(
            f"{record.planned.trigger}",
            "" if record.at is None else f"{record.at:.1f}",
            record.planned.kind.value,
            record.planned.unit,
            injected,
            record.detail,
        )
    console.print(faults)

    invariants = Table(title="Invariants")
    for column in ("invariant", "checked", "result", "detail"):
        invariants.add_column(column, justify="right" if column == "checked" else "left")
    if report.ledger is not None:
        for invariant in report.ledger.invariants.values():
            detail = "; ".join(invariant.violations[:3])
            if len(invariant.violations) > 3:
                detail += f" (+{len(invariant.violations) - 3} more)"
            invariants.add_row(invariant.title, str(invariant.checked), _verdict(invariant.held), detail)
    for name, ok, detail in report.checks:
        invariants.add_row(name, "", _verdict(ok), detail)
    console.print(invariants)

    totals = {**(report.ledger.totals if report.ledger else {}), **report.facts}
    console.print(", ".join(f"{name}: {value}" for name, value in totals.items()), highlight=False)
    verdict = "[green]all invariants held[/green]" if report.ok else "[red]INVARIANTS BROKEN[/red]"
    console.print(f"{verdict} in {report.seconds:.0f} s (time limit {report.config.time_limit:.0f} s)")


def _verdict(ok: bool) -> str:
    return "[green]held[/green]" if ok else "[red]BROKEN[/red]"


def _open_batches(db: Database, tenant_ids: list[UUID]) -> int:
    with db.transaction() as conn:
        row = conn.execute(dev_queries().chaos_open_batches, {"tenant_ids": tenant_ids}).fetchone()
    assert row is not None
    return int(row["open"])


def _pairs(queues: dict[str, JobsQueues]) -> dict[str, tuple[str, str]]:
    return {name: (pair.url, pair.dlq_url) for name, pair in queues.items()}
