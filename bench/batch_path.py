"""Batch path benchmark: what the same invoices cost through the provider's Batch API and through immediate
calls, measured side by side in one run on one scratch database against the simulated provider on 127.0.0.1.

The same sample invoices (clean and with mistakes, as bench.accuracy mixes them) are accepted twice, once
per path, each path under a tenant of its own and a three-day deadline:

- immediate: normal-tier jobs, worked by the worker's own execution slots (``run_worker``), each attempt a
  chat completion under the worker's budget limiter;
- batch: batch-tier jobs, worked by the worker's batch path (``run_batch_path``: ``prepare_round``,
  ``submit_batch``, ``poll_batches``) through the simulator's Files and Batches API, whose completion is
  compressed to seconds on the real clock; whatever it hands back (a failed line, a job escalated to the large
  model) runs on the immediate path, as in production.

Reported per path: jobs by state, attempts by route and model, the sum of ``job_attempts.cost_usd`` (exact),
per 1,000 invoices, the batch discount (``discount_usd``), tokens, the immediate budget taken (the limiter's
permits and the simulator's chat counters), the Batch API pool's peak enqueued tokens (the simulator's and the
batch pool's), provider batches and lines, and wall time. Prices are the worker's defaults (``model_prices``,
``batch_price_factor``). A report, not a test. ``python -m bench.batch_path [--quick]``; results in
bench/results/batch_path.json.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import secrets
import signal
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any
from uuid import UUID

import psycopg
from psycopg.rows import dict_row
from pydantic import SecretStr
from rich.console import Console
from rich.table import Table

from bench.acceptance import scratch_database, stop_on_sigterm
from bench.machine import command_line, describe_machine, load_average, write_json
from tollgate.accept.models import CreateJobRequest
from tollgate.accept.service import AcceptanceDeps, accept_job
from tollgate.core.clock import SystemClock, new_id
from tollgate.core.tiers import ServiceTier
from tollgate.db import Database, build_database, load_queries
from tollgate.db.migrations import apply_migrations
from tollgate.execution.attempt import ExecutionDeps
from tollgate.execution.batch.deps import BatchDeps
from tollgate.execution.limiter.base import Denied, Limiter, Outcome, Permit, Reservation
from tollgate.execution.limiter.batch_pool import BatchPool, Enqueue, Enqueued
from tollgate.execution.limiter.factory import build_batch_pool, build_limiter
from tollgate.execution.worker import run_worker
from tollgate.jobtypes.registry import JOB_TYPES
from tollgate.outbox.nudge import NoNudge
from tollgate.settings import MIGRATIONS_DIR, REPO_ROOT, ApiSettings, DatabaseSettings, WorkerSettings
from tollgate.tenants.keys import create_tenant
from tollgate.tenants.suppliers import add_supplier
from tollgate.wiring import acceptance_limits, build_batch, build_execution, worker_config
from tollgate_dev.documents import MemoryDocuments
from tollgate_dev.local.logs import logs_into
from tollgate_dev.samples import KINDS, SUPPLIERS, generate_invoices, request_body
from tollgate_dev.simulator.batches import BatchSimulation
from tollgate_dev.simulator.server import SimulatedProvider, SimulatorConfig, SimulatorStats

BENCH_DIR = Path(__file__).resolve().parent
DEFAULT_OUTPUT = BENCH_DIR / "results" / "batch_path.json"
LOG_PATH = REPO_ROOT / ".tollgate" / "batch_path.log"
SCHEMA = "tollgate.bench.batch_path/v1"
BUCKET = "batch-path-bench-in-memory"
POOL = "bench-batch-path"
# Leaves the Batch API's 24 h window, the settle and an immediate attempt after them (BatchConfig.offers);
# both paths get it, so the tier is the only difference between their jobs.
DEADLINE_SECONDS = 3 * 24 * 3600
# What the run waits for: a job in review waits for a reviewer, not for the worker.
SETTLED = ("SUCCEEDED", "REVIEW_REQUIRED", "FAILED_TERMINAL", "CANCELLED")
# The path's figures measure what was spent, not how fast: the budget is wide enough never to make a call
# wait, and the limiter is there to count what each path takes from it.
REQUESTS_PER_MINUTE = 1_000_000
TOKENS_PER_MINUTE = 10**10
ADMISSION_OVERRIDES: dict[str, Any] = {
    "tenant_max_pending_jobs": 10_000_000,
    "tenant_max_pending_bytes": 10**13,
    "tenant_max_pending_tokens": 10**13,
    "system_max_backlog": 10_000_000,
}
MICRO = Decimal("0.000001")


@dataclass(frozen=True)
class PathSpec:
    key: str
    title: str
    tier: ServiceTier


PATHS = (
    PathSpec("immediate", "immediate: normal tier, execution slots", "normal"),
    PathSpec("batch", "batch: Batch API, then the immediate path for what it hands back", "batch"),
)


@dataclass(frozen=True)
class Config:
    invoices: int
    seed: int
    slots: int
    completion_seconds: float
    poll_seconds: float
    timeout_s: float
    quick: bool
    output: Path


# -------------------------------------------------------------------------------------- counted budgets


class CountingLimiter:
    """The worker's limiter with a count of what went through it: permits granted, given back unused
    (cancelled), and released after a call, with the tokens reserved for those calls and the tokens they
    used as reconciled. Calls made = released permits; that is the path's draw on the immediate pool."""

    def __init__(self, inner: Limiter) -> None:
        self._inner = inner
        self._lock = threading.Lock()
        self.granted = self.denied = self.cancelled = self.released = self.throttled = 0
        self.reserved_tokens = self.used_tokens = 0

    def try_acquire(self, reservation: Reservation) -> Permit | Denied:
        granted = self._inner.try_acquire(reservation)
        with self._lock:
            if isinstance(granted, Permit):
                self.granted += 1
            else:
                self.denied += 1
        return granted

    def release(self, permit: Permit, outcome: Outcome) -> None:
        self._inner.release(permit, outcome)
        with self._lock:
            self.released += 1
            self.reserved_tokens += permit.tokens
            self.used_tokens += outcome.used_tokens or 0
            self.throttled += int(outcome.throttled)

    def resize(self, permit: Permit, tokens: int) -> Permit:
        return self._inner.resize(permit, tokens)

    def cancel(self, permit: Permit) -> None:
        self._inner.cancel(permit)
        with self._lock:
            self.cancelled += 1

    def figures(self) -> dict[str, int]:
        with self._lock:
            return {
                "requests": self.released,
                "reserved_tokens": self.reserved_tokens,
                "used_tokens": self.used_tokens,
                "permits_granted": self.granted,
                "permits_given_back": self.cancelled,
                "denials": self.denied,
                "throttled": self.throttled,
            }


class RecordingBatchPool:
    """The batch pool, with the most tokens each model held at once after a grant: what the Batch API's
    pool of enqueued tokens had to make room for."""

    def __init__(self, inner: BatchPool) -> None:
        self._inner = inner
        self._lock = threading.Lock()
        self.peak: dict[str, int] = {}
        self.enqueued = self.denied = 0

    def try_enqueue(self, request: Enqueue) -> Enqueued | Denied:
        granted = self._inner.try_enqueue(request)
        if isinstance(granted, Enqueued):
            self._note(request.pool, request.model, enqueued=1)
        else:
            with self._lock:
                self.denied += 1
        return granted

    def resize(self, held: Enqueued, tokens: int) -> Enqueued:
        resized = self._inner.resize(held, tokens)
        self._note(held.pool, held.model)
        return resized

    def release(self, pool: str, model: str, holder: str) -> None:
        self._inner.release(pool, model, holder)

    def room(self, pool: str, model: str) -> int:
        return self._inner.room(pool, model)

    def limit(self, model: str) -> int:
        return self._inner.limit(model)

    def _note(self, pool: str, model: str, *, enqueued: int = 0) -> None:
        held = self._inner.limit(model) - self._inner.room(pool, model)
        with self._lock:
            self.enqueued += enqueued
            self.peak[model] = max(self.peak.get(model, 0), held)

    def figures(self) -> dict[str, Any]:
        with self._lock:
            return {
                "peak_held_tokens": dict(self.peak),
                "limit_tokens": {model: self._inner.limit(model) for model in self.peak},
                "grants": self.enqueued,
                "denials": self.denied,
            }


# ----------------------------------------------------------------------------------------- environment


@dataclass
class Environment:
    db_url: str
    db_source: str
    simulator: SimulatedProvider
    settings: WorkerSettings
    acceptance: AcceptanceDeps
    system_db: Database
    documents: MemoryDocuments
    tenants: dict[str, UUID]
    closers: list[Database] = field(default_factory=list)

    def rows(self, name: str, **params: Any) -> list[dict[str, Any]]:
        with psycopg.connect(self.db_url, row_factory=dict_row, autocommit=True) as conn:
            return conn.execute(getattr(load_queries(BENCH_DIR / "queries"), name), params).fetchall()

    def execution(self, limiter: Limiter) -> ExecutionDeps:
        """The worker's execution dependencies as its wiring builds them, with the documents in memory."""
        built = build_execution(self.settings, self.system_db, limiter=limiter, nudger=NoNudge())
        return dataclasses.replace(built, documents=self.documents)


def worker_settings(config: Config, db_url: str, provider_url: str) -> WorkerSettings:
    return WorkerSettings(
        database_url=SecretStr(db_url),
        job_queue_urls=dict.fromkeys(JOB_TYPES, "unused: the benchmark's jobs are claimed from the database"),
        documents_bucket=BUCKET,
        openai_base_url=provider_url,
        # A placeholder, so no key from this environment is ever sent anywhere, even to 127.0.0.1.
        openai_api_key=SecretStr("simulated"),
        provider_pool=POOL,
        provider_requests_per_minute=REQUESTS_PER_MINUTE,
        provider_tokens_per_minute=TOKENS_PER_MINUTE,
        provider_max_in_flight=config.slots,
        execution_slots=config.slots,
        tenant_max_in_flight=config.slots,
        database_pool_size=config.slots + 4,
        worker_id=f"bench-batch-path-{secrets.token_hex(3)}",
        batch_api=True,
        # The batch's hours are compressed to seconds, so its polls and rounds are too.
        batch_poll_seconds=config.poll_seconds,
        batch_interval_seconds=config.poll_seconds,
    )


@contextmanager
def environment(config: Config) -> Iterator[Environment]:
    """A scratch database with every migration, the simulated provider with its Batches API, and one tenant
    per path that knows every sample supplier and currency, so only the document decides the outcome."""
    with scratch_database() as scratch:
        apply_migrations(scratch.url, MIGRATIONS_DIR)
        simulator = SimulatedProvider(
            SimulatorConfig(
                # The immediate path's quotas are the limiter's business here, and it never waits on them.
                requests_per_minute=None,
                tokens_per_minute=None,
                max_concurrency=None,
                batches=BatchSimulation(completion_seconds=config.completion_seconds),
                seed=config.seed,
            )
        )
        provider_url = simulator.start()
        closers: list[Database] = []
        try:
            documents = MemoryDocuments()
            api_settings = ApiSettings(
                database_url=SecretStr(scratch.url),
                documents_bucket=BUCKET,
                max_deadline_seconds=DEADLINE_SECONDS,
                **ADMISSION_OVERRIDES,
            )
            api_db = build_database(api_settings, pool_name="batch-path-api")
            closers.append(api_db)
            acceptance = AcceptanceDeps(
                db=api_db,
                documents=documents,
                limits=acceptance_limits(api_settings),
                clock=SystemClock(),
                new_id=new_id,
                nudger=NoNudge(),
            )
            settings = worker_settings(config, scratch.url, provider_url)
            system_db = build_database(
                DatabaseSettings(
                    database_url=SecretStr(scratch.url),
                    database_role="tollgate_system",
                    database_pool_size=config.slots + 4,
                ),
                pool_name="batch-path",
            )
            closers.append(system_db)
            currencies = sorted({supplier.currency for supplier in SUPPLIERS})
            tenants = {}
            for path in PATHS:
                tenant = create_tenant(
                    system_db,
                    f"batch-path-{path.key}-{secrets.token_hex(3)}",
                    new_id,
                    allowed_currencies=currencies,
                )
                for supplier in SUPPLIERS:
                    add_supplier(system_db, tenant.tenant_id, supplier.name, supplier.iban, new_id)
                tenants[path.key] = tenant.tenant_id
            yield Environment(
                scratch.url,
                scratch.source,
                simulator,
                settings,
                acceptance,
                system_db,
                documents,
                tenants,
                closers,
            )
        finally:
            for db in closers:
                db.close()
            simulator.stop()


# ------------------------------------------------------------------------------------------------ runs


def accept_invoices(env: Environment, config: Config, path: PathSpec) -> int:
    samples = generate_invoices(config.invoices, seed=config.seed, kinds=KINDS)
    for sample in samples:
        body = request_body(sample, service_tier=path.tier, deadline_seconds=DEADLINE_SECONDS)
        accept_job(
            env.acceptance,
            env.tenants[path.key],
            f"batch-path-{path.key}-{secrets.token_hex(8)}",
            CreateJobRequest.model_validate(body),
        )
    return len(samples)


def settled(env: Environment, path: PathSpec) -> bool:
    [row] = env.rows("path_unfinished", tenant_id=env.tenants[path.key])
    return bool(row["jobs"] == 0 and row["open_batches"] == 0)


async def drive(
    env: Environment, config: Config, path: PathSpec, execution: ExecutionDeps, batch: BatchDeps | None
) -> tuple[float, list[str]]:
    """Runs the worker's loops for the path's tier until every one of its jobs has settled (and every
    provider batch): the wall time it took, and what went wrong."""
    errors: list[str] = []
    stop = asyncio.Event()
    worker_settings_ = dataclasses.replace(worker_config(env.settings), service_tiers=(path.tier,))
    started = time.perf_counter()
    worker = asyncio.create_task(run_worker([], execution, worker_settings_, stop, batch=batch))
    try:
        while not await asyncio.to_thread(settled, env, path):
            if worker.done():
                errors.append("the worker's loops ended before the path's jobs settled")
                break
            if time.perf_counter() - started > config.timeout_s:
                errors.append(f"jobs still unsettled after {config.timeout_s:.0f} s")
                break
            await asyncio.sleep(0.1)
        wall = time.perf_counter() - started
    finally:
        stop.set()
        await asyncio.gather(worker, return_exceptions=True)
    return wall, errors


def stats_delta(before: SimulatorStats, after: SimulatorStats) -> dict[str, Any]:
    """What the simulated provider saw during one path: the chat endpoint's counters (the immediate pool)
    and the Batch API's files, batches and lines."""
    chat = ("requests", "completions", "rate_limited", "server_errors", "prompt_tokens", "completion_tokens")
    lines = ("batch_files", "batch_lines_answered", "batch_lines_failed", "batch_lines_unrun")
    batches = Counter(after.batches)
    batches.subtract(before.batches)
    return {
        "chat": {name: getattr(after, name) - getattr(before, name) for name in chat},
        "batches": {name: getattr(after, name) - getattr(before, name) for name in lines}
        | {"by_status": {status: n for status, n in batches.items() if n}},
        # The simulator keeps one peak for the whole run; only the batch path enqueues anything.
        "peak_enqueued_tokens": dict(after.peak_enqueued_tokens),
    }


def money(value: Decimal) -> str:
    return str(value.quantize(MICRO))


def attempt_totals(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    cost = sum((Decimal(r["cost_usd"]) for r in rows), Decimal(0))
    discount = sum((Decimal(r["discount_usd"]) for r in rows), Decimal(0))
    return {
        "attempts": sum(int(r["attempts"]) for r in rows),
        "cost_usd": money(cost),
        "discount_usd": money(discount),
        "list_cost_usd": money(cost + discount),
        "input_tokens": sum(int(r["input_tokens"]) for r in rows),
        "output_tokens": sum(int(r["output_tokens"]) for r in rows),
    }


def path_result(
    env: Environment,
    path: PathSpec,
    invoices: int,
    wall_s: float,
    limiter: CountingLimiter,
    pool: RecordingBatchPool | None,
    provider: dict[str, Any],
    errors: list[str],
) -> dict[str, Any]:
    tenant_id = env.tenants[path.key]
    states = {r["state"]: int(r["jobs"]) for r in env.rows("path_job_states", tenant_id=tenant_id)}
    attempts = env.rows("path_attempts", tenant_id=tenant_id)
    totals = attempt_totals(attempts)
    cost = Decimal(totals["cost_usd"])
    result: dict[str, Any] = {
        "key": path.key,
        "title": path.title,
        "tier": path.tier,
        "invoices": invoices,
        "jobs": sum(states.values()),
        "job_states": states,
        "wall_s": wall_s,
        "totals": totals,
        "cost_per_1000_invoices_usd": money(cost * 1000 / invoices) if invoices else None,
        "by_route": {
            route: attempt_totals([r for r in attempts if r["via_batch"] == via_batch])
            for route, via_batch in (("batch_line", True), ("immediate_call", False))
        },
        "attempts": [
            {
                "route": "batch_line" if r["via_batch"] else "immediate_call",
                "model": r["model"],
                "outcome": r["outcome"],
                "attempts": int(r["attempts"]),
                "cost_usd": money(Decimal(r["cost_usd"])),
                "discount_usd": money(Decimal(r["discount_usd"])),
                "input_tokens": int(r["input_tokens"]),
                "output_tokens": int(r["output_tokens"]),
            }
            for r in attempts
        ],
        "immediate_pool": {"limiter": limiter.figures(), "provider_chat": provider["chat"]},
        "batch_pool": None,
        "provider_batches": None,
        "errors": errors,
    }
    if pool is not None:
        batches = env.rows("path_batches")
        result["batch_pool"] = {
            **pool.figures(),
            "provider_peak_enqueued_tokens": provider["peak_enqueued_tokens"],
        }
        result["provider_batches"] = {
            "batches": sum(int(r["batches"]) for r in batches),
            "lines": sum(int(r["lines"]) for r in batches),
            "bytes": sum(int(r["bytes"]) for r in batches),
            "enqueued_tokens": sum(int(r["enqueued_tokens"]) for r in batches),
            "states": {r["state"]: int(r["batches"]) for r in batches},
            "member_outcomes": {r["outcome"]: int(r["members"]) for r in env.rows("path_batch_members")},
            "provider": provider["batches"],
        }
    return result


def run_path(
    env: Environment, config: Config, path: PathSpec, invoices: int, console: Console
) -> dict[str, Any]:
    limiter = CountingLimiter(build_limiter(env.settings, SystemClock()))
    execution = env.execution(limiter)
    pool = None
    batch = None
    if path.key == "batch":
        pool = RecordingBatchPool(build_batch_pool(env.settings, None, execution.clock))
        batch = build_batch(env.settings, execution, pool=pool)
    before = env.simulator.stats
    wall, errors = asyncio.run(drive(env, config, path, execution, batch))
    provider = stats_delta(before, env.simulator.stats)
    for problem in errors:
        console.print(f"    [red]{problem}[/red]")
    return path_result(env, path, invoices, wall, limiter, pool, provider, errors)


def summarize(paths: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    immediate, batch = paths["immediate"], paths["batch"]
    immediate_cost = Decimal(immediate["totals"]["cost_usd"])
    batch_cost = Decimal(batch["totals"]["cost_usd"])
    immediate_requests = immediate["immediate_pool"]["limiter"]["requests"]
    return {
        "batch_over_immediate_cost": float(batch_cost / immediate_cost) if immediate_cost else None,
        "batch_discount_usd": batch["totals"]["discount_usd"],
        "batch_immediate_requests_over_immediate": (
            batch["immediate_pool"]["limiter"]["requests"] / immediate_requests
            if immediate_requests
            else None
        ),
    }


# ---------------------------------------------------------------------------------------------- output


def print_report(console: Console, document: Mapping[str, Any]) -> None:
    table = Table(
        title=f"Batch path against immediate calls: {document['config']['invoices']:,} invoices each"
    )
    for column in (
        "path",
        "jobs",
        "SUCCEEDED / REVIEW",
        "attempts (batch + immediate)",
        "cost",
        "per 1,000",
        "discount",
        "tokens in / out",
        "immediate pool: req / tokens",
        "batch pool peak",
        "wall",
    ):
        table.add_column(column, justify="left" if column == "path" else "right")
    for key in ("immediate", "batch"):
        run = document["paths"][key]
        routes = run["by_route"]
        states = run["job_states"]
        limiter = run["immediate_pool"]["limiter"]
        pool = run["batch_pool"]
        table.add_row(
            key,
            f"{run['jobs']:,}",
            f"{states.get('SUCCEEDED', 0):,} / {states.get('REVIEW_REQUIRED', 0):,}",
            f"{routes['batch_line']['attempts']:,} + {routes['immediate_call']['attempts']:,}",
            f"${run['totals']['cost_usd']}",
            f"${run['cost_per_1000_invoices_usd']}",
            f"${run['totals']['discount_usd']}",
            f"{run['totals']['input_tokens']:,} / {run['totals']['output_tokens']:,}",
            f"{limiter['requests']:,} / {limiter['reserved_tokens']:,}",
            "-" if pool is None else ", ".join(f"{n:,}" for n in pool["peak_held_tokens"].values()) or "0",
            f"{run['wall_s']:.1f} s",
        )
    console.print(table)
    ratio = document["summary"]["batch_over_immediate_cost"]
    batches = document["paths"]["batch"]["provider_batches"]
    console.print(
        f"batch cost / immediate cost: {'-' if ratio is None else f'{ratio:.3f}'}; "
        f"{batches['batches']} provider batches, {batches['lines']:,} lines"
    )


def parse_args(argv: Sequence[str] | None) -> Config:
    parser = argparse.ArgumentParser(prog="python -m bench.batch_path", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke run: 100 invoices")
    parser.add_argument("--invoices", type=int, help="sample invoices per path (default 1000; quick 100)")
    parser.add_argument("--seed", type=int, default=7, help="sample seed (default 7)")
    parser.add_argument(
        "--slots", type=int, default=8, help="execution slots of each path's worker (default 8)"
    )
    parser.add_argument(
        "--completion-seconds",
        type=float,
        help="the simulated batch's time from create to completed (default 10; quick 3)",
    )
    parser.add_argument("--timeout", type=float, default=600.0, help="longest wait for one path, seconds")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    args = parser.parse_args(argv)
    invoices = args.invoices or (100 if args.quick else 1000)
    if invoices < 1:
        parser.error("--invoices must be at least 1")
    return Config(
        invoices=invoices,
        seed=args.seed,
        slots=max(1, args.slots),
        completion_seconds=args.completion_seconds or (3.0 if args.quick else 10.0),
        poll_seconds=0.5,
        timeout_s=args.timeout,
        quick=args.quick,
        output=args.output,
    )


def main(argv: Sequence[str] | None = None) -> int:
    config = parse_args(argv)
    signal.signal(signal.SIGTERM, stop_on_sigterm)
    console = Console(width=None if sys.stdout.isatty() else 160)
    started = datetime.now(UTC)
    clock_start = time.perf_counter()
    phases: dict[str, float] = {}
    paths: dict[str, dict[str, Any]] = {}
    with logs_into(LOG_PATH), environment(config) as env:
        machine = describe_machine(
            db_url=env.db_url,
            database=env.db_source,
            aws="not used: documents go to an in-memory store",
            provider="simulated provider on 127.0.0.1 (chat, Files and Batches API)",
        )
        console.print(f"Database: fresh scratch database on the {env.db_source} server; logs in {LOG_PATH}")
        for path in PATHS:
            mark = time.perf_counter()
            invoices = accept_invoices(env, config, path)
            phases[f"accept_{path.key}"] = time.perf_counter() - mark
            console.print(f"[bold]{path.title}[/bold]: {invoices:,} invoices accepted")
            mark = time.perf_counter()
            paths[path.key] = run_path(env, config, path, invoices, console)
            phases[f"run_{path.key}"] = time.perf_counter() - mark
        settings = env.settings
        machine["load_average_after"] = load_average()
    document: dict[str, Any] = {
        "schema": SCHEMA,
        "command": command_line("bench.batch_path", argv),
        "started_at": started.isoformat(),
        "duration_s": time.perf_counter() - clock_start,
        "machine": machine,
        "config": {
            "invoices": config.invoices,
            "seed": config.seed,
            "kinds": dict(Counter(s.kind for s in generate_invoices(config.invoices, config.seed, KINDS))),
            "slots": config.slots,
            "quick": config.quick,
            "deadline_seconds": DEADLINE_SECONDS,
            "simulated_completion_seconds": config.completion_seconds,
            "poll_seconds": config.poll_seconds,
            "model_prices": {model: list(prices) for model, prices in settings.model_prices.items()},
            "batch_price_factor": settings.batch_price_factor,
            "model_small": settings.model_small,
            "model_large": settings.model_large,
            "escalate_to_large_model": settings.escalate_to_large_model,
            "batch_max_requests": settings.batch_max_requests,
            "batch_enqueued_tokens_per_model": settings.provider_batch_enqueued_tokens,
        },
        "phases_s": phases,
        "paths": paths,
        "summary": summarize(paths),
    }
    write_json(config.output, document)
    print_report(console, document)
    console.print(f"Report written to {config.output} in {document['duration_s']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
