"""Tier drain benchmark: a batch backlog of 2,000 jobs and a steady high-priority stream from the same
tenant, on the simulated provider under the shared DynamoDB budget, run twice in one process:

- tiered: the backlog in the batch tier and the stream in the high tier, worked by a high-tier worker and
  batch-tier workers, as the tier services run in AWS; the budget keeps batch to its share while a
  high-tier call waits (LIMITER_SHARE_BATCH) and lets it use the whole pool otherwise;
- single tier: the same jobs all in the normal tier, the same number of workers serving every tier.

Reported for each: the stream's p95 time to completion against one job's service time on an idle system
(target: within 2x in the tiered run), the backlog's throughput and its share of the capacity the stream
leaves, and all jobs/s against the provider's capacity. This is a report, not a test: targets are printed
next to the figures, never asserted. ``python -m bench.drain_tiers [--quick]``; results in
bench/results/drain_tiers.json.
"""

from __future__ import annotations

import argparse
import secrets
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import UUID

import psycopg
from rich.console import Console
from rich.table import Table

from bench.drain import (
    BENCH_DIR,
    COMPLETED,
    TERMINAL,
    Config,
    Environment,
    Provider,
    Scenario,
    WorkerFleet,
    capacity,
    environment,
    machine_info,
    queries,
    spread,
    worker_environment,
)
from bench.machine import command_line, load_average, write_json
from tollgate.core.tiers import ServiceTier

SCHEMA = "tollgate.bench.drain_tiers/v1"
DEFAULT_OUTPUT = BENCH_DIR / "results" / "drain_tiers.json"
TARGETS = {"high_p95_max_multiple_of_service_time": 2.0}
BUDGET = Scenario("global", "Tollgate: global DynamoDB budget", "budget", shared_table=True)


@dataclass(frozen=True)
class Layout:
    """One run: the tier each kind of job is sent in, and the worker groups (tiers served, processes, slots
    each)."""

    key: str
    title: str
    backlog_tier: ServiceTier
    stream_tier: ServiceTier
    groups: tuple[tuple[str, int, int], ...]


# 30 slots either way, more than the provider's 20 calls in flight: batch alone could fill the whole pool.
LAYOUTS = (
    Layout("tiered", "tiers: batch backlog, high stream", "batch", "high", (("high", 1, 6), ("batch", 3, 8))),
    Layout("single_tier", "one tier: every job normal", "normal", "normal", (("high,normal,batch", 5, 6),)),
)


@dataclass(frozen=True)
class TierConfig:
    backlog_jobs: int
    stream_share: float  # the stream's rate as a share of the provider's capacity
    window_s: float
    solo_jobs: int
    slots: int
    provider: Provider
    quick: bool
    output: Path


@dataclass
class LayoutResult:
    key: str
    title: str
    window_s: float
    capacity_jobs_per_s: dict[str, float]
    solo_service_s: float | None
    solo_measured_s: float | None
    stream: dict[str, float | int | None]
    stream_waiting_for_a_slot: dict[str, float | int | None]
    stream_submitted: int
    stream_unfinished: int
    high_p95_over_service: float | None
    backlog_completed_in_window: int
    backlog_jobs_per_s: float
    stream_jobs_per_s: float
    total_share_of_capacity: float
    # The backlog's throughput over what the stream leaves of the capacity.
    backlog_share_of_what_is_left: float
    job_states: dict[str, int]
    workers_exit_codes: list[int | None]


class LayoutRun:
    def __init__(self, env: Environment, config: TierConfig, layout: Layout, console: Console) -> None:
        self.env, self.config, self.layout, self.console = env, config, layout, console
        self.errors: list[str] = []
        self.stream_jobs: list[UUID] = []
        # Accepted -> finished minus the provider call, of each solo job: one job's own overhead.
        self.solo_overheads: list[float] = []

    def drain_config(self) -> Config:
        """What bench.drain's worker environment reads, for these workers."""
        return Config(
            profile="tiers",
            warmup_s=0.0,
            heavy_jobs=self.config.backlog_jobs,
            light_tenants=0,
            light_jobs_each=0,
            light_span=0.0,
            light_p95_target=TARGETS["high_p95_max_multiple_of_service_time"],
            workers=sum(count for _, count, _ in self.layout.groups),
            slots=self.config.slots,
            # One tenant sends everything here: the fairness cap is not what this run measures.
            tenant_cap=10_000,
            window_s=self.config.window_s,
            solo_jobs=self.config.solo_jobs,
            provider=self.config.provider,
            scenarios=(BUDGET,),
            quick=self.config.quick,
            output=self.config.output,
        )

    def run(self, log_dir: Path) -> LayoutResult:
        from tollgate_dev.simulator.server import SimulatedProvider

        env, config, layout = self.env, self.config, self.layout
        with psycopg.connect(env.db_url, autocommit=True) as conn:
            conn.execute(queries().reset_work)
        simulator = SimulatedProvider(config.provider.simulator(seed=7))
        provider_url = simulator.start()
        pool = f"tiers:{layout.key}:{secrets.token_hex(3)}"
        base = worker_environment(env, self.drain_config(), BUDGET, provider_url, pool)
        fleets = []
        for index, (tiers, count, slots) in enumerate(layout.groups):
            group_dir = log_dir / f"group-{index}"
            group_dir.mkdir()
            group = {
                **base,
                "WORKER_SERVICE_TIERS": tiers,
                "EXECUTION_SLOTS": str(slots),
                "DATABASE_POOL_SIZE": str(slots + 2),
            }
            fleets.append(WorkerFleet(count, group, group_dir))
        for fleet in fleets:
            fleet.start()
        try:
            solo = self.measure_solo()
            self.console.print(f"    one job alone: {solo and f'{solo:.2f} s'}; loading the backlog")
            self.load_backlog()
            started = time.monotonic()
            started_at = datetime.now(UTC)
            stream = threading.Thread(target=self.submit_stream, args=(started,), daemon=True)
            stream.start()
            self.wait(started, stream, fleets)
            ended_at = datetime.now(UTC)
            stream.join()
        finally:
            exit_codes = [code for fleet in fleets for code in fleet.stop()]
            simulator.stop()
        return self.result(solo, started_at, ended_at, exit_codes)

    def submit(self, tier: ServiceTier) -> UUID:
        request = self.env.request().model_copy(update={"service_tier": tier})
        return self.env.submit(self.env.tenants.heavy, request)

    def measure_solo(self) -> float | None:
        """Stream-tier jobs one at a time on an idle system; the first (workers starting) is left out."""
        times = []
        for attempt in range(self.config.solo_jobs + 1):
            job_id = self.submit(self.layout.stream_tier)
            deadline = time.monotonic() + 60
            row = None
            while time.monotonic() < deadline:
                rows = self.env.query("job_state", job_id=job_id)
                if rows and rows[0]["state"] in TERMINAL:
                    row = rows[0]
                    break
                time.sleep(0.02)
            if row is None or row["finished_at"] is None:
                self.errors.append(f"solo job {job_id} did not finish")
            elif attempt:
                times.append((row["finished_at"] - row["created_at"]).total_seconds())
        for row in self.env.query("tier_job_times", tenant_ids=[self.env.tenants.heavy]):
            if row["finished_at"] is not None and row["state"] in COMPLETED:
                total = (row["finished_at"] - row["created_at"]).total_seconds()
                self.solo_overheads.append(total - float(row["call_s"]))
        with psycopg.connect(self.env.db_url, autocommit=True) as conn:
            conn.execute(queries().reset_work)  # the window's figures count the window's jobs alone
        return statistics.fmean(times) if times else None

    def load_backlog(self) -> None:
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(lambda _: self.submit(self.layout.backlog_tier), range(self.config.backlog_jobs)))

    def stream_rate(self) -> float:
        return self.config.stream_share * capacity(self.config.provider, 1.0)["concurrency"]

    def submit_stream(self, started: float) -> None:
        """One stream job every 1/rate seconds over the first 80% of the window."""
        interval = 1 / self.stream_rate()
        count = int(self.config.window_s * 0.8 / interval)
        for index in range(count):
            time.sleep(max(0.0, started + 1.0 + index * interval - time.monotonic()))
            self.stream_jobs.append(self.submit(self.layout.stream_tier))

    def wait(self, started: float, stream: threading.Thread, fleets: Sequence[WorkerFleet]) -> None:
        last_report = started
        while (now := time.monotonic()) < started + self.config.window_s:
            if any(fleet.exited() for fleet in fleets):
                self.errors.append("worker processes exited early")
                return
            if now - last_report >= 15:
                last_report = now
                rows = self.env.query("tier_job_times", tenant_ids=[self.env.tenants.heavy])
                done = Counter(r["service_tier"] for r in rows if r["state"] in COMPLETED)
                self.console.print(f"    {now - started:5.0f} s: completed {dict(done)}")
            time.sleep(0.25)

    def result(
        self, solo: float | None, started_at: datetime, ended_at: datetime, exit_codes: list[int | None]
    ) -> LayoutResult:
        config = self.config
        rows = {r["job_id"]: r for r in self.env.query("tier_job_times", tenant_ids=[self.env.tenants.heavy])}
        window = (ended_at - started_at).total_seconds()
        stream_ids = set(self.stream_jobs)
        stream = [rows[j] for j in self.stream_jobs if j in rows]
        done = [r for r in stream if r["state"] in COMPLETED and r["finished_at"]]
        backlog = [
            r
            for job_id, r in rows.items()
            if job_id not in stream_ids
            and r["state"] in COMPLETED
            and r["finished_at"]
            and started_at <= r["finished_at"] <= ended_at
        ]
        in_window_stream = [r for r in done if started_at <= r["finished_at"] <= ended_at]
        limits = capacity(config.provider, 1.0)
        binding = limits["concurrency"]
        # One job's service time as bench.drain defines it: its measured overhead on an idle system plus the
        # provider's mean latency (a handful of lognormal draws would move a measured mean by a quarter).
        overhead = statistics.fmean(self.solo_overheads) if self.solo_overheads else None
        service = overhead + config.provider.latency_mean_s if overhead is not None else None
        stream_latencies = [(r["finished_at"] - r["created_at"]).total_seconds() for r in done]
        p95 = spread(stream_latencies)["p95_s"]
        backlog_rate = len(backlog) / window if window else 0.0
        stream_rate = len(in_window_stream) / window if window else 0.0
        return LayoutResult(
            key=self.layout.key,
            title=self.layout.title,
            window_s=window,
            capacity_jobs_per_s=limits,
            solo_service_s=service,
            solo_measured_s=solo,
            stream=spread(stream_latencies),
            stream_waiting_for_a_slot=spread(
                [(r["first_claimed_at"] - r["created_at"]).total_seconds() for r in done]
            ),
            stream_submitted=len(stream),
            stream_unfinished=sum(1 for r in stream if r["state"] not in TERMINAL),
            high_p95_over_service=float(p95) / service if p95 is not None and service else None,
            backlog_completed_in_window=len(backlog),
            backlog_jobs_per_s=backlog_rate,
            stream_jobs_per_s=stream_rate,
            total_share_of_capacity=(backlog_rate + stream_rate) / binding,
            backlog_share_of_what_is_left=backlog_rate / max(binding - stream_rate, 1e-9),
            job_states=dict(Counter(r["state"] for r in rows.values())),
            workers_exit_codes=exit_codes,
        )


def print_report(console: Console, results: list[LayoutResult]) -> None:
    table = Table(title="Tier drain: batch backlog + high-priority stream, one tenant")
    for column in (
        "run",
        "stream p95 (done)",
        "stream wait p95",
        "1 job service",
        "stream p95 / 1 job",
        "backlog jobs/s",
        "backlog of what is left",
        "all of capacity",
    ):
        table.add_column(column, justify="left" if column == "run" else "right")
    for r in results:
        table.add_row(
            r.title,
            ("-" if r.stream["p95_s"] is None else f"{r.stream['p95_s']:.2f} s")
            + f" ({r.stream['count']}/{r.stream_submitted})",
            "-"
            if r.stream_waiting_for_a_slot["p95_s"] is None
            else f"{r.stream_waiting_for_a_slot['p95_s']:.2f} s",
            "-" if r.solo_service_s is None else f"{r.solo_service_s:.2f} s",
            "-" if r.high_p95_over_service is None else f"{r.high_p95_over_service:.1f}x",
            f"{r.backlog_jobs_per_s:.2f}",
            f"{r.backlog_share_of_what_is_left:.0%}",
            f"{r.total_share_of_capacity:.0%}",
        )
    console.print(table)
    console.print(
        "Target (reported, not asserted): the tiered run's stream p95 within 2x one job's service time."
    )


def parse_args(argv: Sequence[str] | None) -> TierConfig:
    parser = argparse.ArgumentParser(prog="python -m bench.drain_tiers", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke run: 200 backlog jobs, 20 s windows")
    parser.add_argument("--backlog", type=int, help="batch backlog jobs (default 2000; quick 200)")
    parser.add_argument("--stream-share", type=float, default=0.15, help="stream rate, share of capacity")
    parser.add_argument("--window", type=float, help="seconds each run drains (default 90; quick 20)")
    parser.add_argument("--concurrency", type=int, default=20, help="provider calls in flight (default 20)")
    parser.add_argument("--latency", type=float, default=2.0, help="provider mean latency, s (default 2.0)")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    args = parser.parse_args(argv)
    return TierConfig(
        backlog_jobs=args.backlog or (200 if args.quick else 2000),
        stream_share=args.stream_share,
        window_s=args.window or (20.0 if args.quick else 90.0),
        solo_jobs=2 if args.quick else 5,
        slots=6,
        # Requests and tokens per minute leave room: calls in flight bind, as for slow LLM calls.
        provider=Provider(
            requests_per_minute=1200,
            tokens_per_minute=3_600_000,
            max_concurrency=args.concurrency,
            latency_mean_s=args.latency,
        ),
        quick=args.quick,
        output=args.output,
    )


def main(argv: Sequence[str] | None = None) -> int:
    config = parse_args(argv)
    console = Console(width=None if sys.stdout.isatty() else 160)
    started = datetime.now(UTC)
    clock_start = time.monotonic()
    results: list[LayoutResult] = []
    errors: dict[str, list[str]] = {}
    with tempfile.TemporaryDirectory(prefix="tollgate-tiers-") as logs, environment(0) as env:
        machine = machine_info(env)
        for layout in LAYOUTS:
            console.print(f"[bold]{layout.title}[/bold]")
            log_dir = Path(logs) / layout.key
            log_dir.mkdir()
            run = LayoutRun(env, config, layout, console)
            result = run.run(log_dir)
            results.append(result)
            errors[layout.key] = run.errors
            for problem in run.errors:
                console.print(f"    [red]{problem}[/red]")
        machine["load_average_after"] = load_average()
    document: dict[str, Any] = {
        "schema": SCHEMA,
        "command": command_line("bench.drain_tiers", argv),
        "started_at": started.isoformat(),
        "duration_s": time.monotonic() - clock_start,
        "machine": machine,
        "config": {
            **{k: v for k, v in asdict(config).items() if k != "output"},
            "layouts": [asdict(x) for x in LAYOUTS],
        },
        "targets": TARGETS,
        "runs": [asdict(result) for result in results],
        "errors": errors,
    }
    write_json(config.output, document)
    print_report(console, results)
    console.print(f"Report written to {config.output} in {document['duration_s']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
