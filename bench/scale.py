"""Scale benchmark: what a claim, a peek and an acceptance cost as tenants, runnable jobs, waiting retries,
expired jobs and a tenant's backlog grow, each beside its floor measured in the same run on the same data.

``python -m bench.scale`` (``make bench``) writes bench/results/scale.json and prints tables; ``--quick`` is
a smoke run on small shapes. This is a report, not a test: nothing in it passes or fails on a time.
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from pydantic import SecretStr
from rich.console import Console
from rich.table import Table

from bench.acceptance import Phases, ScratchDatabase, scratch_database, stop_on_sigterm
from bench.machine import command_line, describe_machine, load_average, write_json
from tollgate.accept.models import CreateJobRequest
from tollgate.accept.service import AcceptanceDeps, accept_job
from tollgate.core.clock import SystemClock, new_id
from tollgate.db import Database, Queries, build_database, load_queries
from tollgate.db.database import Conn
from tollgate.db.migrations import apply_migrations
from tollgate.events import ExtractionRequested, outbox_row
from tollgate.execution.leasing import claim_in, peek_next_job
from tollgate.outbox.nudge import NoNudge
from tollgate.settings import MIGRATIONS_DIR, ApiSettings, SystemDatabaseSettings, WorkerSettings
from tollgate.wiring import acceptance_limits
from tollgate_dev.documents import MemoryDocuments
from tollgate_dev.samples import generate_invoice, request_body

BENCH_DIR = Path(__file__).resolve().parent
DEFAULT_OUTPUT = BENCH_DIR / "results" / "scale.json"
SCHEMA = "tollgate.bench.scale/v1"

# The targets of issue 14, checked by bench.report against the figures; no test asserts them.
TARGETS = {
    "claim_max_over_plain": 3.0,
    "accept_max_over_raw": 2.5,
    "max_largest_over_smallest": 1.5,
}

# Tenant groups (tenants are named '<group>:<ordinal>', see bench/queries/scale.sql).
RUNNABLE = "scale-runnable"  # tenants whose jobs are all READY
BLOCKED = "scale-blocked"  # tenants none of whose jobs can run: past their deadline, or waiting to retry
ACCEPTING = "scale-accept"  # the tenant whose backlog grows while acceptance is measured

WORKER_ID = "scale-bench"
TIMES = "\N{MULTIPLICATION SIGN}"


# ------------------------------------------------------------------------------------------------- sizes


@dataclass(frozen=True)
class Sizes:
    tenants: list[int]  # the "N tenants x R runnable" shapes, grown one from the other
    runnable_per_tenant: int
    blocked_tenants: int  # beside one tenant with a few runnable jobs
    past_deadline_per_tenant: int
    waiting_retries_per_tenant: int  # at least past_deadline_per_tenant: those jobs become the first retries
    few_runnable: int
    backlogs: list[int]  # acceptance; the largest is also the "1 tenant x N runnable" claim shape


FULL = Sizes(
    tenants=[1, 1_000, 10_000],
    runnable_per_tenant=100,
    blocked_tenants=999,
    past_deadline_per_tenant=100,
    waiting_retries_per_tenant=1_000,
    few_runnable=10,
    backlogs=[0, 100_000, 1_000_000],
)
QUICK = Sizes(
    tenants=[1, 100, 1_000],
    runnable_per_tenant=10,
    blocked_tenants=99,
    past_deadline_per_tenant=10,
    waiting_retries_per_tenant=100,
    few_runnable=10,
    backlogs=[0, 1_000, 10_000],
)


@dataclass(frozen=True)
class Config:
    sizes: Sizes
    samples: int
    min_samples: int
    warmup: int
    max_seconds: float  # per shape, across all its operations; at least min_samples rounds are taken
    quick: bool
    output: Path


# ------------------------------------------------------------------------------------------- statistics


def latency_summary(samples_ms: Sequence[float]) -> dict[str, float]:
    ordered = sorted(samples_ms)
    if len(ordered) < 2:
        only = ordered[0] if ordered else 0.0
        return {"mean": only, "p50": only, "p95": only, "p99": only, "max": only}
    cuts = statistics.quantiles(ordered, n=100, method="inclusive")
    return {
        "mean": statistics.fmean(ordered),
        "p50": cuts[49],
        "p95": cuts[94],
        "p99": cuts[98],
        "max": ordered[-1],
    }


def ratios(measured: dict[str, float], floor: dict[str, float]) -> dict[str, float]:
    return {key: measured[key] / floor[key] for key in ("p50", "p95", "p99")}


def measure_rounds(operations: dict[str, Callable[[int], None]], config: Config) -> dict[str, list[float]]:
    """Runs each operation once a round, in an order that rotates, until ``config.samples`` rounds or the
    shape's time budget (but never fewer than ``config.min_samples`` rounds). Interleaved, so a change in
    the machine's load lands on the operation and on its floor alike.

    Each call gets its round's number. Warm-up rounds come first and are numbered after the measured ones
    (``config.samples`` on), so an operation can tell them apart, and one that consumes prepared inputs (a
    request to accept) never uses one twice.
    """
    names = list(operations)
    for number in range(config.samples, config.samples + config.warmup):
        for name in names:
            operations[name](number)
    samples: dict[str, list[float]] = {name: [] for name in names}
    started = time.perf_counter()
    for number in range(config.samples):
        if number >= config.min_samples and time.perf_counter() - started > config.max_seconds:
            break
        shift = number % len(names)
        for name in names[shift:] + names[:shift]:
            begin = time.perf_counter_ns()
            operations[name](number)
            samples[name].append((time.perf_counter_ns() - begin) / 1e6)
    return samples


# ------------------------------------------------------------------------------------------- database


class PhaseTotals(Phases):
    """Phases whose names repeat (one seed step per shape, say) add up instead of replacing each other."""

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - start


def scale_queries() -> Queries:
    return load_queries(BENCH_DIR / "queries")


@contextmanager
def rolled_back(db: Database) -> Iterator[Conn]:
    """One of the project's transactions (pool, role, scope), rolled back at the end so the shape stays
    exactly as it was for the next sample."""
    with db.transaction() as conn:
        yield conn
        raise psycopg.Rollback()


class Seeder:
    """Builds the shapes set-based, as the owner, with triggers off where the server allows it."""

    def __init__(self, url: str, phases: Phases) -> None:
        self.url = url
        self.q = scale_queries()
        self.phases = phases
        self.batches = 0
        self.triggers_off: bool | None = None
        with psycopg.connect(url, row_factory=dict_row) as conn:
            row = conn.execute(self.q.scale_has_backfill).fetchone()
        self.has_backfill = bool(row and row["present"])

    @contextmanager
    def _seeding(self, step: str) -> Iterator[psycopg.Connection[Any]]:
        with self.phases(f"seed: {step}"), psycopg.connect(self.url, autocommit=True) as conn:
            try:
                conn.execute(self.q.scale_triggers_off)
                self.triggers_off = self.triggers_off is not False
            except psycopg.errors.InsufficientPrivilege:
                # Not a superuser: seeding is slower with the triggers on, and then needs no backfill.
                self.triggers_off = False
            yield conn
            conn.execute(self.q.scale_triggers_on)
            if self.has_backfill:
                conn.execute(self.q.scale_backfill)
            conn.execute(self.q.scale_vacuum_analyze)

    def tenants(self, group: str, first: int, last: int) -> None:
        if last < first:
            return
        with self._seeding(f"{group} tenants {first}-{last}") as conn:
            conn.execute(self.q.scale_seed_tenants, {"group": group, "first": first, "last": last})

    def jobs(
        self,
        group: str,
        first: int,
        last: int,
        per_tenant: int,
        *,
        state: str = "READY",
        attempt: int = 0,
        deadline_at: datetime,
        created_before: datetime,
        retry_after: datetime | None = None,
    ) -> None:
        if last < first or per_tenant < 1:
            return
        self.batches += 1
        step = f"{per_tenant:,} {state} jobs x {group} tenants {first}-{last}"
        with self._seeding(step) as conn:
            conn.execute(
                self.q.scale_seed_jobs,
                {
                    "group": group,
                    "first": first,
                    "last": last,
                    "per_tenant": per_tenant,
                    "batch": f"seed{self.batches}",
                    "state": state,
                    "attempt": attempt,
                    "deadline_at": deadline_at,
                    "created_before": created_before,
                    "retry_after": retry_after or created_before,
                },
            )

    def to_waiting_retries(self, group: str, retry_after: datetime, deadline_at: datetime) -> None:
        with self._seeding(f"{group} jobs to waiting retries") as conn:
            conn.execute(
                self.q.scale_jobs_to_waiting_retries,
                {"group": group, "retry_after": retry_after, "deadline_at": deadline_at},
            )

    def empty(self) -> None:
        with self._seeding("empty") as conn:
            conn.execute(self.q.scale_empty)

    def owner_query(self, name: str, params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        with psycopg.connect(self.url, row_factory=dict_row, autocommit=True) as conn:
            return conn.execute(getattr(self.q, name), params or {}).fetchall()

    def counts(self) -> dict[str, int]:
        return {key: int(value) for key, value in self.owner_query("scale_job_counts")[0].items()}

    def group_tenants(self, group: str) -> list[UUID]:
        return [row["tenant_id"] for row in self.owner_query("scale_group_tenants", {"group": group})]

    @contextmanager
    def plain_index(self) -> Iterator[list[str]]:
        """The plain claim's index while a shape's claims are measured; yields the indexes its plan uses."""
        with self.phases("plain claim index"), psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(self.q.scale_create_plain_index)
            conn.execute(self.q.scale_vacuum_analyze)
            plan = conn.execute(self.q.scale_plain_claim_plan).fetchone()
        try:
            yield sorted(plan_indexes(plan[0] if plan else []))
        finally:
            with psycopg.connect(self.url, autocommit=True) as conn:
                conn.execute(self.q.scale_drop_plain_index)


def plan_indexes(plan: Any) -> set[str]:
    """Every index an EXPLAIN (FORMAT JSON) plan names."""
    found: set[str] = set()
    if isinstance(plan, dict):
        if "Index Name" in plan:
            found.add(str(plan["Index Name"]))
        for value in plan.values():
            found |= plan_indexes(value)
    elif isinstance(plan, list):
        for item in plan:
            found |= plan_indexes(item)
    return found


# -------------------------------------------------------------------------------------------- claims


@dataclass
class ClaimShape:
    key: str
    label: str
    family: str  # tenants | blocked | backlog
    counts: dict[str, int]
    samples: int
    claim_ms: dict[str, float]
    peek_ms: dict[str, float]
    plain_ms: dict[str, float]
    claim_over_plain: dict[str, float]
    peek_over_plain: dict[str, float]
    # Did the fair claim take a job of a tenant that had runnable work? (A waiting retry or an expired job
    # is never runnable: a claim that took one would be wrong, however fast.)
    picks: dict[str, int]
    plain_plan_indexes: list[str]


class ClaimBench:
    """The fair claim (``claim_next_job``'s transaction, ``claim_in``), the peek (``peek_next_job``) and the
    plain claim, as the worker's role through the project's Database, each claim rolled back."""

    def __init__(self, url: str, config: Config, console: Console) -> None:
        settings = SystemDatabaseSettings(database_url=SecretStr(url))
        self.db = build_database(settings, pool_name="scale-system")
        self.config = config
        self.console = console
        self.clock = SystemClock()
        self.bench_q = scale_queries()
        self.tenant_cap = int(WorkerSettings.model_fields["tenant_max_in_flight"].default)
        self.lease = timedelta(seconds=int(WorkerSettings.model_fields["lease_seconds"].default))

    def close(self) -> None:
        self.db.close()

    def claim_params(self) -> dict[str, Any]:
        """What execution/leasing.py's claim_next_job passes to its query."""
        now = self.clock.now()
        return {
            "now": now,
            "worker_id": WORKER_ID,
            "lease_until": now + self.lease,
            "tenant_cap": self.tenant_cap,
        }

    def measure(
        self,
        key: str,
        label: str,
        family: str,
        counts: dict[str, int],
        runnable_tenants: set[UUID],
        plain_plan: list[str],
    ) -> ClaimShape:
        picks = {"runnable_tenant": 0, "other_tenant": 0, "nothing": 0, "peeked_nothing": 0}
        measured = self.config.samples

        def claim(number: int) -> None:
            params = self.claim_params()
            with rolled_back(self.db) as conn:
                job = claim_in(
                    conn,
                    self.db,
                    now=params["now"],
                    worker_id=WORKER_ID,
                    lease_seconds=self.lease.total_seconds(),
                    tenant_cap=self.tenant_cap,
                    new_id=new_id,
                )
            if number >= measured:
                return
            if job is None:
                picks["nothing"] += 1
            elif job.tenant_id in runnable_tenants:
                picks["runnable_tenant"] += 1
            else:
                picks["other_tenant"] += 1

        def peek(number: int) -> None:
            tokens = peek_next_job(self.db, self.clock, tenant_cap=self.tenant_cap)
            if tokens is None and number < measured:
                picks["peeked_nothing"] += 1

        def plain(_: int) -> None:
            with rolled_back(self.db) as conn:
                conn.execute(self.bench_q.scale_plain_claim, self.claim_params()).fetchone()

        samples = measure_rounds({"claim": claim, "peek": peek, "plain": plain}, self.config)
        claim_ms, peek_ms, plain_ms = (latency_summary(samples[n]) for n in ("claim", "peek", "plain"))
        shape = ClaimShape(
            key=key,
            label=label,
            family=family,
            counts=counts,
            samples=len(samples["claim"]),
            claim_ms=claim_ms,
            peek_ms=peek_ms,
            plain_ms=plain_ms,
            claim_over_plain=ratios(claim_ms, plain_ms),
            peek_over_plain=ratios(peek_ms, plain_ms),
            picks=picks,
            plain_plan_indexes=plain_plan,
        )
        self.console.print(
            f"  {label:<58} claim p50 {claim_ms['p50']:8.2f} ms  peek p50 {peek_ms['p50']:8.2f} ms  "
            f"plain p50 {plain_ms['p50']:6.2f} ms  claim/plain {shape.claim_over_plain['p50']:7.1f}x  "
            f"({shape.samples} rounds)"
        )
        return shape


# -------------------------------------------------------------------------------------------- accept

# Acceptance is measured, not admission's refusals: the tenant's limits are lifted, and the system-wide cap
# sits above every backlog measured, so admission counts the whole backlog, as it must to accept.
ADMISSION_OVERRIDES: dict[str, Any] = {
    "tenant_max_pending_jobs": 100_000_000,
    "tenant_max_pending_bytes": 10**13,
    "tenant_max_pending_tokens": 10**13,
    "system_max_backlog": 100_000_000,
}


@dataclass
class AcceptRow:
    backlog: int  # the tenant's unfinished jobs when the row started
    counts: dict[str, int]
    samples: int
    accept_ms: dict[str, float]
    raw_ms: dict[str, float]
    accept_over_raw: dict[str, float]
    outcomes: dict[str, int]


class AcceptBench:
    """``accept_job`` (tenant role, documents in memory) against the raw two inserts it makes (owner, one
    transaction, the named queries insert_job and insert_outbox_event), for one tenant."""

    def __init__(self, url: str, config: Config, console: Console, tenant_id: UUID, document_id: UUID):
        settings = ApiSettings(
            database_url=SecretStr(url), documents_bucket="scale-bench-in-memory", **ADMISSION_OVERRIDES
        )
        self.db = build_database(settings, pool_name="scale-api")
        self.deps = AcceptanceDeps(
            db=self.db,
            documents=MemoryDocuments(),
            limits=acceptance_limits(settings),
            clock=SystemClock(),
            new_id=new_id,
            nudger=NoNudge(),
        )
        # The same connection options as the API's pool, as bench.acceptance's floor uses.
        self.raw = psycopg.connect(url, prepare_threshold=None)
        self.q = load_queries()
        self.config = config
        self.console = console
        self.tenant_id = tenant_id
        self.document_id = document_id
        self.made = 0

    def close(self) -> None:
        self.raw.close()
        self.db.close()

    def requests(self, count: int) -> list[CreateJobRequest]:
        """Realistic invoices, each with text of its own, so every request is a new document and job."""
        made = []
        for _ in range(count):
            self.made += 1
            body: dict[str, Any] = request_body(generate_invoice(random.Random(self.made), self.made))
            body["document"]["pages"][0]["text"] += f"\nScale reference {self.made}"
            made.append(CreateJobRequest.model_validate(body))
        return made

    def raw_params(self, count: int) -> list[tuple[dict[str, Any], dict[str, Any]]]:
        deadline = datetime.now(UTC) + timedelta(days=1)
        prepared = []
        for _ in range(count):
            self.made += 1
            job_id = new_id()
            job = {
                "job_id": job_id,
                "tenant_id": self.tenant_id,
                "idempotency_key": f"scale-raw-{self.made}",
                "request_hash": f"{self.made:064x}",
                "job_type": "invoice_extraction",
                "document_id": self.document_id,
                "schema_version": "invoice.v1",
                "model_policy": "auto",
                "options": Jsonb({}),
                "metadata": Jsonb({}),
                "priority": 5,
                "service_tier": "normal",
                "max_attempts": 5,
                "estimated_tokens": 5000,
                "document_bytes": 1000,
                "deadline_at": deadline,
                "trace_context": None,
                # The raw baseline holds no spend reservation (0 adds nothing to the month).
                "reserved_usd": 0,
                "spend_month": None,
            }
            event = outbox_row(
                ExtractionRequested(job_id=job_id, tenant_id=self.tenant_id, state_version=1),
                event_id=new_id(),
                trace_context=None,
            )
            prepared.append((job, event))
        return prepared

    def measure(self, backlog: int, counts: dict[str, int]) -> AcceptRow:
        total = self.config.samples + self.config.warmup
        requests = self.requests(total)
        inserts = self.raw_params(total)
        run = f"scale-{self.made}"
        outcomes: dict[str, int] = {}

        def accept(number: int) -> None:
            try:
                accepted = accept_job(self.deps, self.tenant_id, f"{run}-{number}", requests[number])
                outcome = "replayed" if accepted.replayed else "accepted"
            except Exception as error:  # counted and shown: a refusal must not pass for a fast accept
                outcome = type(error).__name__
            if number < self.config.samples:
                outcomes[outcome] = outcomes.get(outcome, 0) + 1

        def raw(number: int) -> None:
            job, event = inserts[number]
            with self.raw.transaction():
                self.raw.execute(self.q.insert_job, job)
                self.raw.execute(self.q.insert_outbox_event, event)

        samples = measure_rounds({"accept": accept, "raw": raw}, self.config)
        accept_ms, raw_ms = latency_summary(samples["accept"]), latency_summary(samples["raw"])
        row = AcceptRow(
            backlog=backlog,
            counts=counts,
            samples=len(samples["accept"]),
            accept_ms=accept_ms,
            raw_ms=raw_ms,
            accept_over_raw=ratios(accept_ms, raw_ms),
            outcomes=dict(sorted(outcomes.items())),
        )
        self.console.print(
            f"  accept at a backlog of {backlog:>10,}   accept p50 {accept_ms['p50']:8.2f} ms  "
            f"raw p50 {raw_ms['p50']:6.2f} ms  accept/raw {row.accept_over_raw['p50']:6.2f}x  "
            f"{row.outcomes} ({row.samples} rounds)"
        )
        return row


# ---------------------------------------------------------------------------------------------- runner


@dataclass
class Run:
    """One run: every shape built on one scratch database, one after the other, each grown from the last
    where it can be."""

    config: Config
    url: str
    console: Console
    phases: Phases
    claims: list[ClaimShape] = field(default_factory=list)
    accepts: list[AcceptRow] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.seed = Seeder(self.url, self.phases)
        self.claim_bench = ClaimBench(self.url, self.config, self.console)
        # Fixed at the start: runnable jobs' deadlines and waiting retries' due times lie well past the end
        # of any run, and expired deadlines well before its start.
        self.now = datetime.now(UTC)

    def close(self) -> None:
        self.claim_bench.close()

    def claim_shape(self, key: str, label: str, family: str, runnable_group: str) -> None:
        counts = self.seed.counts()
        runnable = set(self.seed.group_tenants(runnable_group))
        with self.seed.plain_index() as plan, self.phases(f"measure: {key}"):
            shape = self.claim_bench.measure(key, label, family, counts, runnable, plan)
        self.claims.append(shape)

    def runnable_jobs(self, group: str, first: int, last: int, per_tenant: int) -> None:
        self.seed.jobs(
            group,
            first,
            last,
            per_tenant,
            deadline_at=self.now + timedelta(days=1),
            created_before=self.now,
        )

    def run_tenants(self) -> None:
        """1 tenant, then 1,000, then 10,000, each x the same runnable jobs: grown, never re-seeded."""
        sizes = self.config.sizes
        per = sizes.runnable_per_tenant
        self.console.print(f"[bold]Claims as tenants grow[/bold] ({per:,} runnable jobs each)")
        have = 0
        for tenants in sizes.tenants:
            self.seed.tenants(RUNNABLE, have, tenants - 1)
            self.runnable_jobs(RUNNABLE, have, tenants - 1, per)
            have = tenants
            self.claim_shape(
                f"tenants_{tenants}",
                f"{tenants:,} tenant{'s' if tenants > 1 else ''} {TIMES} {per:,} runnable",
                "tenants",
                RUNNABLE,
            )

    def run_blocked(self) -> None:
        """Many tenants with nothing runnable beside one with a few runnable jobs: first their jobs are past
        their deadline, then the same jobs, and more, wait for their retry's backoff."""
        sizes = self.config.sizes
        blocked, few = sizes.blocked_tenants, sizes.few_runnable
        self.console.print(
            f"[bold]Claims with {blocked:,} blocked tenants[/bold] beside 1 with {few} runnable"
        )
        self.seed.empty()
        self.seed.tenants(RUNNABLE, 0, 0)
        self.runnable_jobs(RUNNABLE, 0, 0, few)
        self.seed.tenants(BLOCKED, 0, blocked - 1)
        self.seed.jobs(
            BLOCKED,
            0,
            blocked - 1,
            sizes.past_deadline_per_tenant,
            deadline_at=self.now - timedelta(hours=1),
            created_before=self.now - timedelta(hours=2),
        )
        self.claim_shape(
            "past_deadline",
            f"{blocked:,} tenants {TIMES} {sizes.past_deadline_per_tenant:,} READY past deadline "
            f"+ 1 {TIMES} {few} runnable",
            "blocked",
            RUNNABLE,
        )
        retry_after, deadline = self.now + timedelta(hours=2), self.now + timedelta(days=1)
        self.seed.to_waiting_retries(BLOCKED, retry_after, deadline)
        self.seed.jobs(
            BLOCKED,
            0,
            blocked - 1,
            sizes.waiting_retries_per_tenant - sizes.past_deadline_per_tenant,
            state="RETRY_SCHEDULED",
            attempt=1,
            deadline_at=deadline,
            created_before=self.now,
            retry_after=retry_after,
        )
        self.claim_shape(
            "waiting_retries",
            f"{blocked:,} tenants {TIMES} {sizes.waiting_retries_per_tenant:,} retries waiting "
            f"+ 1 {TIMES} {few} runnable",
            "blocked",
            RUNNABLE,
        )

    def run_backlogs(self) -> None:
        """One tenant's backlog grows 0 -> 100k -> 1M; acceptance at each, then claims at the largest."""
        sizes = self.config.sizes
        self.console.print("[bold]Acceptance as one tenant's backlog grows[/bold]")
        self.seed.empty()
        self.seed.tenants(ACCEPTING, 0, 0)
        (tenant_id,) = self.seed.group_tenants(ACCEPTING)
        rows = self.seed.owner_query("scale_tenant_document", {"tenant_id": tenant_id})
        bench = AcceptBench(self.url, self.config, self.console, tenant_id, rows[0]["document_id"])
        try:
            seeded = 0
            for backlog in sorted(sizes.backlogs):
                self.runnable_jobs(ACCEPTING, 0, 0, backlog - seeded)
                seeded = backlog
                with self.phases(f"measure: accept at {backlog}"):
                    self.accepts.append(bench.measure(backlog, self.seed.counts()))
        finally:
            bench.close()
        largest = max(sizes.backlogs)
        if largest > 0:
            self.claim_shape(
                "one_tenant_backlog",
                f"1 tenant {TIMES} {largest:,} runnable (+ the jobs accepted above)",
                "backlog",
                ACCEPTING,
            )


# ---------------------------------------------------------------------------------------------- verdict


def verdict(claims: Sequence[ClaimShape], accepts: Sequence[AcceptRow]) -> dict[str, Any]:
    """The figures issue 14's targets are stated in; bench.report checks them against TARGETS."""
    summary: dict[str, Any] = {}
    if claims:
        worst = max(claims, key=lambda shape: shape.claim_over_plain["p50"])
        smallest = claims[0]

        def spread(figures: Callable[[ClaimShape], float]) -> dict[str, Any]:
            largest = max(claims, key=figures)
            return {"largest_over_smallest": figures(largest) / figures(smallest), "largest": largest.key}

        summary["claim"] = {
            "smallest": smallest.key,
            "worst_over_plain_p50": worst.claim_over_plain["p50"],
            "worst": worst.key,
            "claim": spread(lambda shape: shape.claim_ms["p50"]),
            "peek": spread(lambda shape: shape.peek_ms["p50"]),
            "plain": spread(lambda shape: shape.plain_ms["p50"]),
            "wrong_picks": sum(s.picks["other_tenant"] + s.picks["nothing"] for s in claims),
        }
    if accepts:
        worst_accept = max(accepts, key=lambda row: row.accept_over_raw["p50"])
        first, last = accepts[0], accepts[-1]
        summary["accept"] = {
            "worst_over_raw_p50": worst_accept.accept_over_raw["p50"],
            "worst": worst_accept.backlog,
            "accept_largest_over_smallest": last.accept_ms["p50"] / first.accept_ms["p50"],
            "raw_largest_over_smallest": last.raw_ms["p50"] / first.raw_ms["p50"],
            "not_accepted": sum(n for row in accepts for k, n in row.outcomes.items() if k != "accepted"),
        }
    return summary


# ---------------------------------------------------------------------------------------------- output


def print_report(console: Console, claims: Sequence[ClaimShape], accepts: Sequence[AcceptRow]) -> None:
    table = Table(title="Claim and peek by shape: p50 / p95 / p99 (ms), and ÷ the plain claim at p50")
    for column in ("shape", "jobs", "claim", "peek", "plain claim", "claim ÷ plain", "peek ÷ plain", "picks"):
        table.add_column(column, justify="left" if column in {"shape", "picks"} else "right")
    for shape in claims:
        table.add_row(
            shape.label,
            f"{shape.counts['jobs']:,}",
            _triple(shape.claim_ms),
            _triple(shape.peek_ms),
            _triple(shape.plain_ms),
            f"{shape.claim_over_plain['p50']:.2f}x",
            f"{shape.peek_over_plain['p50']:.2f}x",
            ", ".join(f"{n} {what}" for what, n in shape.picks.items() if n),
        )
    console.print(table)
    accept_table = Table(title="Acceptance by tenant backlog: p50 / p95 / p99 (ms), and ÷ the raw inserts")
    for column in ("backlog", "accept_job", "raw two inserts", "÷ raw p50", "÷ raw p99", "outcomes"):
        accept_table.add_column(column, justify="left" if column == "outcomes" else "right")
    for row in accepts:
        accept_table.add_row(
            f"{row.backlog:,}",
            _triple(row.accept_ms),
            _triple(row.raw_ms),
            f"{row.accept_over_raw['p50']:.2f}x",
            f"{row.accept_over_raw['p99']:.2f}x",
            ", ".join(f"{n} {what}" for what, n in row.outcomes.items()),
        )
    console.print(accept_table)


def _triple(figures: dict[str, float]) -> str:
    return f"{figures['p50']:.2f} / {figures['p95']:.2f} / {figures['p99']:.2f}"


# ------------------------------------------------------------------------------------------------ main


def _counts(text: str) -> list[int]:
    return sorted({int(part.replace("_", "")) for part in text.split(",") if part.strip()})


def parse_args(argv: Sequence[str] | None) -> Config:
    parser = argparse.ArgumentParser(prog="python -m bench.scale", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="smoke run on small shapes (sizes below are then ignored)"
    )
    parser.add_argument("--tenants", default="1,1000,10000", help="tenant counts of the runnable shapes")
    parser.add_argument("--runnable-per-tenant", type=int, default=FULL.runnable_per_tenant)
    parser.add_argument("--blocked-tenants", type=int, default=FULL.blocked_tenants)
    parser.add_argument("--past-deadline-per-tenant", type=int, default=FULL.past_deadline_per_tenant)
    parser.add_argument("--waiting-retries-per-tenant", type=int, default=FULL.waiting_retries_per_tenant)
    parser.add_argument(
        "--backlogs",
        default="0,100000,1000000",
        help="one tenant's backlogs for acceptance; the largest is also a claim shape",
    )
    parser.add_argument("--samples", type=int, default=200, help="measured rounds per shape (default 200)")
    parser.add_argument(
        "--max-seconds",
        type=float,
        default=60.0,
        help="stop a shape's rounds after this long, once 20 were taken (default 60)",
    )
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="where the JSON report goes")
    args = parser.parse_args(argv)
    if args.quick:
        sizes, samples, max_seconds = QUICK, 30, 5.0
    else:
        sizes = Sizes(
            tenants=_counts(args.tenants),
            runnable_per_tenant=args.runnable_per_tenant,
            blocked_tenants=args.blocked_tenants,
            past_deadline_per_tenant=args.past_deadline_per_tenant,
            waiting_retries_per_tenant=args.waiting_retries_per_tenant,
            few_runnable=FULL.few_runnable,
            backlogs=_counts(args.backlogs),
        )
        samples, max_seconds = args.samples, args.max_seconds
    if (
        not sizes.tenants
        or min(sizes.tenants) < 1
        or min(sizes.runnable_per_tenant, sizes.blocked_tenants, sizes.past_deadline_per_tenant) < 1
        or sizes.waiting_retries_per_tenant < sizes.past_deadline_per_tenant
        or not sizes.backlogs
        or min(sizes.backlogs) < 0
        or samples < 2
    ):
        parser.error(
            "need tenant counts and per-tenant sizes of at least 1, at least as many waiting retries as "
            "jobs past deadline per tenant, backlogs of 0 or more, and at least 2 samples"
        )
    return Config(
        sizes=sizes,
        samples=samples,
        min_samples=min(samples, 20),
        warmup=3,
        max_seconds=max_seconds,
        quick=args.quick,
        output=args.output,
    )


def main(argv: Sequence[str] | None = None) -> int:
    config = parse_args(argv)
    signal.signal(signal.SIGTERM, stop_on_sigterm)
    console = Console(width=None if sys.stdout.isatty() else 170)
    started = datetime.now(UTC)
    clock_start = time.perf_counter_ns()
    phases = PhaseTotals()
    db: ScratchDatabase
    with phases("database"), scratch_database() as db:
        console.print(f"Database: fresh scratch database on the {db.source} server")
        with phases("migrations"):
            apply_migrations(db.url, MIGRATIONS_DIR)
        machine = describe_machine(
            db_url=db.url, database=db.source, aws="not used: documents go to an in-memory store"
        )
        run = Run(config, db.url, console, phases)
        try:
            run.run_tenants()
            run.run_blocked()
            run.run_backlogs()
        finally:
            run.close()
        machine["load_average_after"] = load_average()
        seeding = {"triggers_off": run.seed.triggers_off, "backfill": run.seed.has_backfill}

    document = {
        "schema": SCHEMA,
        "command": command_line("bench.scale", argv),
        "started_at": started.isoformat(),
        "duration_s": (time.perf_counter_ns() - clock_start) / 1e9,
        "machine": machine,
        "config": {
            "quick": config.quick,
            "sizes": asdict(config.sizes),
            "samples": config.samples,
            "min_samples": config.min_samples,
            "warmup": config.warmup,
            "max_seconds_per_shape": config.max_seconds,
            "tenant_cap": run.claim_bench.tenant_cap,
            "lease_seconds": run.claim_bench.lease.total_seconds(),
            "admission_overrides": ADMISSION_OVERRIDES,
            "seeding": seeding,
            "plain_claim_index": "scale_plain_claim_order on ((-priority), created_at) WHERE state IN "
            "('READY', 'RETRY_SCHEDULED'), made only while claims are measured",
        },
        "targets": TARGETS,
        # Where the run's own wall time went (phases nest: "database" holds everything after it opened).
        "phases_s": phases.seconds,
        "claims": [asdict(shape) for shape in run.claims],
        "accept": [asdict(row) for row in run.accepts],
        "summary": verdict(run.claims, run.accepts),
    }
    write_json(config.output, document)
    print_report(console, run.claims, run.accepts)
    console.print(json.dumps(document["summary"], indent=2))
    console.print(f"Report written to {config.output} in {document['duration_s']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
