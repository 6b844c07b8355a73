"""Live notifications delivery benchmark: one tenant's jobs finish while its WebSocket clients listen on the
local system, and every client must get every one of those state changes, once, in order.

The local system runs without workers, so each job ends by its tenant's cancel and the subject is delivery,
not execution (as in tests/integration/test_live_notifications_scale.py). Two shapes (jobs x clients) run
side by side in one run, so how delivery time grows with the number of messages is a ratio within one run.
``python -m bench.live_notifications`` writes bench/results/live_notifications.json; ``--quick`` is a smoke
run. A missing or out-of-order message is a failure, not a figure: the run exits 1 and writes no results.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any
from uuid import UUID

import psycopg
from psycopg.rows import dict_row
from pydantic import SecretStr
from rich.console import Console
from rich.table import Table

from bench.acceptance import Phases, bench_queries, scratch_database, stop_on_sigterm
from bench.drain import spread
from bench.machine import command_line, describe_machine, load_average, write_json
from tollgate.accept.service import AcceptanceDeps, cancel_job
from tollgate.core.clock import new_id
from tollgate.db import Database
from tollgate.settings import REPO_ROOT, ApiSettings
from tollgate.tenants.keys import create_tenant
from tollgate.tenants.suppliers import add_supplier
from tollgate.wiring import build_api
from tollgate_dev.local.aws import LocalAws, check_flat_sends, keep_moto_sqs_sends_flat
from tollgate_dev.local.client import ApiClient
from tollgate_dev.local.logs import logs_into
from tollgate_dev.local.loops import Loop
from tollgate_dev.local.runtime import LOCAL_BUCKET, LocalStack
from tollgate_dev.samples import CLEAN, SUPPLIERS, generate_invoices, request_body

BENCH_DIR = Path(__file__).resolve().parent
DEFAULT_OUTPUT = BENCH_DIR / "results" / "live_notifications.json"
SCHEMA = "tollgate.bench.live_notifications/v1"
# The local system logs a line per request and per delivery; they go here rather than between the tables.
LOG_FILE = REPO_ROOT / ".tollgate" / "live_notifications.log"

# (jobs, clients). The same jobs to five times the clients: the cancels are the same work in both shapes,
# so the difference between them is fan-out alone.
SHAPES = ((1_000, 50), (1_000, 10))
QUICK_SHAPES = ((100, 5), (100, 1))
# A small delivery before the measured shapes, so the first one does not pay for first connections and
# imports.
WARMUP = (20, 2)
SUBMIT_THREADS = 8
CANCEL_THREADS = 4
CLIENT_TIMEOUT_S = 300.0
OUTBOX_WAIT_S = 120.0
CANCELLED = "CANCELLED"


@dataclass(frozen=True)
class Shape:
    jobs: int
    clients: int

    @property
    def key(self) -> str:
        return f"{self.jobs}x{self.clients}"

    @property
    def messages(self) -> int:
        return self.jobs * self.clients


@dataclass(frozen=True)
class Config:
    shapes: tuple[Shape, ...]
    warmup: Shape | None
    cancel_threads: int
    timeout_s: float
    quick: bool
    output: Path


@dataclass(frozen=True)
class Tenant:
    tenant_id: UUID
    api_key: str


class DeliveryFailed(Exception):
    """Some client missed a message, got one out of order, or never finished: the run has no figures."""


# ------------------------------------------------------------------------------------------- the system


class RelayWake:
    """Nudges the local system's relay loop after each cancel commits, as the API's own nudger does (the
    loop's wake event is the one the local system gives the API)."""

    def __init__(self, relay: Loop) -> None:
        self._wake = relay.wake

    def nudge(self) -> None:
        self._wake.set()


@contextmanager
def thread_pool(threads: int) -> Iterator[ThreadPoolExecutor]:
    """A pool that drops its queued calls when the block fails (Ctrl-C, SIGTERM): leaving a ThreadPoolExecutor
    block waits for every queued call, so a stopped run would first submit or cancel all the rest."""
    pool = ThreadPoolExecutor(max_workers=threads)
    try:
        yield pool
    except BaseException:
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown(wait=True)


def new_tenant(stack: LocalStack, name: str) -> Tenant:
    assert stack.system_db is not None
    created = create_tenant(stack.system_db, f"{name}-{secrets.token_hex(3)}", new_id)
    for supplier in SUPPLIERS:
        add_supplier(stack.system_db, created.tenant_id, supplier.name, supplier.iban, new_id)
    return Tenant(created.tenant_id, created.api_key)


def submit(api_url: str, tenant: Tenant, count: int, seed: int) -> list[UUID]:
    """Clean sample invoices over the API; with no workers they wait READY. The job ids, in order."""
    client = ApiClient(api_url, tenant.api_key)
    invoices = generate_invoices(count, seed=seed, kinds=[CLEAN])
    run = secrets.token_hex(4)

    def one(number: int) -> UUID:
        answer = client.submit(request_body(invoices[number]), f"live-bench-{run}-{number}")
        if answer.status != 202:
            raise RuntimeError(f"submitting job {number} answered {answer.status}: {answer.body[:200]!r}")
        return UUID(answer.json["job_id"])

    with thread_pool(SUBMIT_THREADS) as pool:
        return list(pool.map(one, range(count)))


def wait_for_outbox(db_url: str, timeout_s: float) -> float:
    """Until the relay has published every outbox event (the submissions' and the jobs' queue messages), so
    the measured deliveries do not share the relay with the submissions' backlog. Seconds waited."""
    started = time.monotonic()
    query = bench_queries().count_accepted_work
    with psycopg.connect(db_url, autocommit=True, row_factory=dict_row) as conn:
        while True:
            row = conn.execute(query).fetchone()
            assert row is not None
            if row["unpublished"] == 0:
                return time.monotonic() - started
            if time.monotonic() - started > timeout_s:
                raise RuntimeError(f"{row['unpublished']} outbox events unpublished after {timeout_s:.0f} s")
            time.sleep(0.1)


def latest_sequence(db: Database, tenant_id: UUID) -> int:
    with db.transaction() as conn:
        row = conn.execute(db.q.tenant_event_window, {"tenant_id": tenant_id, "after_seq": 0}).fetchone()
    return 0 if row is None else int(row["latest"])


def events_after(db: Database, tenant_id: UUID, after: int, limit: int) -> list[dict[str, Any]]:
    """The tenant's events after ``after`` as PostgreSQL holds them, in order (the notifier's own read)."""
    with db.transaction() as conn:
        return conn.execute(
            db.q.job_state_events_after, {"tenant_id": tenant_id, "after_seq": after, "limit": limit}
        ).fetchall()


# ------------------------------------------------------------------------------------------ the clients


class Lines(threading.Thread):
    """Reads the clients' process's output as it comes, each line stamped with when it arrived: the result
    line arrives as soon as the last client has its last message, before the process has exited."""

    def __init__(self, stream: IO[str]) -> None:
        super().__init__(name="live-load-output", daemon=True)
        self._stream = stream
        self._lines: queue.SimpleQueue[tuple[float, str | None]] = queue.SimpleQueue()

    def run(self) -> None:
        for line in self._stream:
            self._lines.put((time.monotonic(), line))
        self._lines.put((time.monotonic(), None))

    def next(self, timeout_s: float) -> tuple[float, str | None]:
        """(arrival, line); line None when the process closed its output or nothing came in time."""
        try:
            return self._lines.get(timeout=max(0.0, timeout_s))
        except queue.Empty:
            return time.monotonic(), None


@contextmanager
def listening_clients(
    ws_url: str, tenant: Tenant, shape: Shape, timeout_s: float, stderr: IO[str]
) -> Iterator[Lines]:
    """``tollgate_dev.live_load`` in a process of its own (one asyncio loop for every client), so the clients
    do not compete with the server for this interpreter; its output, line by line. The key goes in its
    environment, never on its command line. On the way out the process is given a moment to exit after its
    result, and killed at once if the block failed (a failed delivery, Ctrl-C, SIGTERM)."""
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tollgate_dev.live_load",
            ws_url,
            "--clients",
            str(shape.clients),
            "--expect",
            str(shape.jobs),
            "--timeout",
            str(timeout_s),
        ],
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
        env={**os.environ, "TOLLGATE_API_KEY": tenant.api_key},
    )
    failed = True
    try:
        assert process.stdout is not None
        lines = Lines(process.stdout)
        lines.start()
        yield lines
        failed = False
    finally:
        if not failed:
            with suppress(subprocess.TimeoutExpired):
                process.wait(timeout=30)
        if process.poll() is None:
            process.kill()
        process.wait()


def cancel_all(
    acceptance: AcceptanceDeps, tenant_id: UUID, job_ids: Sequence[UUID], threads: int
) -> tuple[float, float, Counter[str]]:
    """Cancels every job through the use case the API's cancel route calls (the same database role, id
    source and relay nudge), without HTTP in front. (first cancel sent, last cancel committed, states)."""

    def one(job_id: UUID) -> str:
        view = cancel_job(
            acceptance.db, tenant_id, job_id, new_id=acceptance.new_id, nudger=acceptance.nudger
        )
        return str(view.state.value)

    with thread_pool(threads) as pool:
        started = time.monotonic()
        states = list(pool.map(one, job_ids))
        finished = time.monotonic()
    return started, finished, Counter(states)


def check_delivery(
    shape: Shape, clients: Sequence[Mapping[str, Any]], events: Sequence[Mapping[str, Any]], latest: int
) -> list[str]:
    """Why this delivery is not every event to every client, once, in order; empty when it is.

    live_load counts each client's job state changes from its subscribe cursor and notes whether each
    sequence number was the one after the last; a client that got ``jobs`` of them in order, ending at the
    tenant's latest number, got exactly the events written after its cursor."""
    problems = []
    if len(events) != shape.jobs or any(e["state"] != CANCELLED for e in events):
        states = dict(Counter(str(e["state"]) for e in events))
        problems.append(
            f"PostgreSQL holds {len(events)} events after the cursor ({states}), not {shape.jobs}"
        )
    if len(clients) != shape.clients:
        problems.append(f"{len(clients)} client results, not {shape.clients}")
    for number, client in enumerate(clients):
        if "error" in client:
            got = f" after {client['count']} messages" if "count" in client else ""
            problems.append(f"client {number}: {client['error']}{got}")
        elif client["count"] != shape.jobs:
            problems.append(f"client {number}: {client['count']} messages, not {shape.jobs}")
        elif not client["in_order"]:
            problems.append(f"client {number}: sequence numbers out of order or with a gap")
        elif client["last"] != latest:
            problems.append(f"client {number}: ended at {client['last']}, the tenant's latest is {latest}")
    return problems


def deliver(
    stack: LocalStack,
    acceptance: AcceptanceDeps,
    db_url: str,
    shape: Shape,
    config: Config,
    seed: int,
    errors_to: IO[str],
) -> dict[str, Any]:
    """One shape: a fresh tenant's jobs submitted and published, its clients subscribed, then every job
    cancelled while they listen. The figures, or DeliveryFailed."""
    assert stack.system_db is not None
    tenant = new_tenant(stack, f"live-bench-{shape.key}")
    phase_started = time.monotonic()
    job_ids = submit(stack.api_url, tenant, shape.jobs, seed)
    submit_s = time.monotonic() - phase_started
    outbox_s = wait_for_outbox(db_url, OUTBOX_WAIT_S)
    before = latest_sequence(stack.system_db, tenant.tenant_id)
    with listening_clients(stack.websocket_url, tenant, shape, config.timeout_s, errors_to) as lines:
        spawned = time.monotonic()
        ready_at, line = lines.next(config.timeout_s + 30)
        if line is None or line.strip() != "ready":
            raise DeliveryFailed(f"the clients were never all subscribed (their process said {line!r})")
        first_cancel, last_cancel, states = cancel_all(
            acceptance, tenant.tenant_id, job_ids, config.cancel_threads
        )
        delivered_at, line = lines.next(config.timeout_s + 30 - (time.monotonic() - ready_at))
        if line is None:
            raise DeliveryFailed(f"the clients reported nothing within {config.timeout_s + 30:.0f} s")
    clients = json.loads(line)["clients"]
    latest = latest_sequence(stack.system_db, tenant.tenant_id)
    events = events_after(stack.system_db, tenant.tenant_id, before, shape.jobs + 1)
    problems = check_delivery(shape, clients, events, latest)
    if states != Counter({CANCELLED: shape.jobs}):
        problems.append(f"the cancels answered {dict(states)}")
    if problems:
        raise DeliveryFailed(f"{shape.key}: " + "; ".join(problems[:10]))
    delivered = sum(int(c["count"]) for c in clients)
    total_s = delivered_at - first_cancel
    return {
        "key": shape.key,
        "jobs": shape.jobs,
        "clients": shape.clients,
        "expected_messages": shape.messages,
        "messages_delivered": delivered,
        "events": {"first": before + 1, "last": latest},
        "submit_s": submit_s,
        "outbox_drained_s": outbox_s,
        "clients_ready_s": ready_at - spawned,
        "ready_to_first_cancel_s": first_cancel - ready_at,
        "cancel_s": last_cancel - first_cancel,
        "cancels_per_s": shape.jobs / (last_cancel - first_cancel),
        "lag_s": delivered_at - last_cancel,
        "total_s": total_s,
        "messages_per_s": delivered / total_s,
        "client_seconds": spread([float(c["seconds"]) for c in clients]),
    }


def compare(first: Mapping[str, Any], second: Mapping[str, Any]) -> dict[str, Any]:
    """Two shapes of the same run, the one with more messages over the other: how much more time it took for
    how many more messages (1.00x per message: delivery time grows in proportion to clients x jobs)."""
    larger, smaller = sorted((first, second), key=lambda shape: shape["messages_delivered"], reverse=True)
    messages = larger["messages_delivered"] / smaller["messages_delivered"]
    total = larger["total_s"] / smaller["total_s"]
    return {
        "larger": larger["key"],
        "smaller": smaller["key"],
        "messages_ratio": messages,
        "total_ratio": total,
        "lag_ratio": larger["lag_s"] / smaller["lag_s"] if smaller["lag_s"] > 0 else None,
        "cancel_ratio": larger["cancel_s"] / smaller["cancel_s"],
        "total_per_message_ratio": total / messages,
    }


# ---------------------------------------------------------------------------------------------- the run


def run(config: Config, console: Console) -> dict[str, Any]:
    phases = Phases()
    started = datetime.now(UTC)
    clock_start = time.perf_counter()
    overrides = {"max_connections_per_tenant": max(s.clients for s in config.shapes) + 10}
    shapes: list[dict[str, Any]] = []
    with (
        phases("database"),
        scratch_database() as db,
        tempfile.TemporaryDirectory() as data_dir,
        (Path(data_dir) / "live_load.stderr").open("w+", encoding="utf-8") as errors_to,
    ):
        machine = describe_machine(
            db_url=db.url,
            database=db.source,
            aws="moto server on 127.0.0.1, in the benchmark process",
            clients="tollgate_dev.live_load: one asyncio process, WebSockets on 127.0.0.1",
        )
        # moto's SQS send scans every message already in the queue several times (tollgate_dev.local.aws), so
        # the relay's sends of a thousand submissions would slow down with each one and take the CPU the
        # system under test needs; real SQS has no such cost. Every local system applies the fix as it starts;
        # here it is applied first so that it is checked against moto's own answer before anything runs.
        keep_moto_sqs_sends_flat()
        check_flat_sends()
        aws = LocalAws()
        with phases("moto start"):
            aws.start()
        # Its own data folder: the discovery file of a `tollgate local up` someone runs is left alone.
        stack = LocalStack(
            port=0,
            workers=0,
            database_url=db.url,
            aws=aws,
            data_dir=Path(data_dir),
            notification_overrides=overrides,
        )
        acceptance: AcceptanceDeps | None = None
        try:
            with phases("stack start"):
                stack.start()
            settings = ApiSettings(
                database_url=SecretStr(db.url),
                documents_bucket=LOCAL_BUCKET,
                database_pool_size=config.cancel_threads,
            )
            acceptance = build_api(settings, nudger=RelayWake(stack.loops["relay"])).acceptance
            try:
                if config.warmup is not None:
                    with phases("warm-up"):
                        deliver(stack, acceptance, db.url, config.warmup, config, 1, errors_to)
                for number, shape in enumerate(config.shapes, start=2):
                    console.print(f"{shape.jobs:,} jobs x {shape.clients} clients ...")
                    with phases(f"shape {shape.key}"):
                        shapes.append(deliver(stack, acceptance, db.url, shape, config, number, errors_to))
            except DeliveryFailed:
                errors_to.seek(0)
                tail = errors_to.read()[-2000:]
                if tail:
                    console.print(f"The clients' process wrote:\n{tail}", markup=False, highlight=False)
                raise
            machine["load_average_after"] = load_average()
        finally:
            with phases("stop"):
                if acceptance is not None:
                    acceptance.db.close()
                stack.stop()
                aws.stop()
    return {
        "schema": SCHEMA,
        "command": command_line("bench.live_notifications", None),
        "started_at": started.isoformat(),
        "duration_s": time.perf_counter() - clock_start,
        "machine": machine,
        "config": {
            "quick": config.quick,
            "shapes": [{"jobs": s.jobs, "clients": s.clients} for s in config.shapes],
            "warmup": None
            if config.warmup is None
            else {"jobs": config.warmup.jobs, "clients": config.warmup.clients},
            "workers": 0,
            "aws": "moto in the benchmark process (LocalAws), with the local system's fix that keeps an SQS "
            "send's cost independent of the queue's depth (no worker reads the job queues, so they fill)",
            "notification_overrides": overrides,
            "submit_threads": SUBMIT_THREADS,
            "cancel_threads": config.cancel_threads,
            "submit": f"ApiClient over HTTP, {SUBMIT_THREADS} threads, clean sample invoices; the relay "
            "drains the outbox before the clients connect",
            "cancel": f"cancel_job (the API's cancel use case) on build_api's acceptance deps with the "
            f"relay's nudge, {config.cancel_threads} threads, no HTTP",
            "clients": "tollgate_dev.live_load in a spawned process: one asyncio loop, one connection per "
            "client, each subscribed from the tenant's latest event",
            "client_timeout_s": config.timeout_s,
            "delivered_at": "when the clients' process printed its result line, which it does once every "
            "client has its last message",
        },
        "phases_s": phases.seconds,
        "shapes": shapes,
        "comparison": compare(shapes[0], shapes[1]) if len(shapes) >= 2 else None,
    }


# ------------------------------------------------------------------------------------------------ report


def print_report(console: Console, doc: Mapping[str, Any]) -> None:
    table = Table(title="Live notifications: every job's cancel to every client")
    for column in (
        "jobs x clients",
        "messages",
        "cancels",
        "lag",
        "total",
        "messages/s",
        "client s p50 / p95 / max",
    ):
        table.add_column(column, justify="right")
    for shape in doc["shapes"]:
        seconds = shape["client_seconds"]
        table.add_row(
            f"{shape['jobs']:,} x {shape['clients']}",
            f"{shape['messages_delivered']:,}",
            f"{shape['cancel_s']:.1f} s",
            f"{shape['lag_s']:.2f} s",
            f"{shape['total_s']:.1f} s",
            f"{shape['messages_per_s']:,.0f}",
            f"{seconds['p50_s']:.1f} / {seconds['p95_s']:.1f} / {seconds['max_s']:.1f}",
        )
    console.print(table)
    comparison = doc["comparison"]
    if comparison:
        console.print(
            f"{comparison['larger']} over {comparison['smaller']}: {comparison['messages_ratio']:.2f}x the "
            f"messages in {comparison['total_ratio']:.2f}x the time "
            f"({comparison['total_per_message_ratio']:.2f}x per message)"
        )


# -------------------------------------------------------------------------------------------------- main


def parse_shape(text: str) -> Shape:
    jobs, _, clients = text.partition("x")
    shape = Shape(int(jobs), int(clients))
    if shape.jobs < 1 or shape.clients < 1:
        raise ValueError(text)
    return shape


def parse_args(argv: Sequence[str] | None) -> Config:
    parser = argparse.ArgumentParser(
        prog="python -m bench.live_notifications", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--quick", action="store_true", help="smoke run: 100 jobs x 5 clients, then 100 jobs x 1 client"
    )
    parser.add_argument(
        "--shapes",
        default=",".join(f"{j}x{c}" for j, c in SHAPES),
        help="JOBSxCLIENTS,... in the order they run; the first two are compared (default 1000x50,1000x10)",
    )
    parser.add_argument(
        "--cancel-threads", type=int, default=CANCEL_THREADS, help="threads cancelling (default 4)"
    )
    parser.add_argument(
        "--timeout", type=float, default=CLIENT_TIMEOUT_S, help="the clients' own time limit (default 300 s)"
    )
    parser.add_argument("--no-warmup", action="store_true", help="skip the small delivery before the shapes")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="where the JSON report goes")
    args = parser.parse_args(argv)
    try:
        shapes = (
            tuple(Shape(j, c) for j, c in QUICK_SHAPES)
            if args.quick
            else tuple(parse_shape(s) for s in args.shapes.split(","))
        )
    except ValueError:
        parser.error("--shapes takes JOBSxCLIENTS,... with at least 1 of each, e.g. 1000x50,1000x10")
    if args.cancel_threads < 1 or args.timeout <= 0:
        parser.error("need at least 1 cancel thread and a positive timeout")
    return Config(
        shapes=shapes,
        warmup=None if args.no_warmup else Shape(*WARMUP),
        cancel_threads=args.cancel_threads,
        timeout_s=args.timeout,
        quick=args.quick,
        output=args.output,
    )


def main(argv: Sequence[str] | None = None) -> int:
    config = parse_args(argv)
    signal.signal(signal.SIGTERM, stop_on_sigterm)
    # Piped output (make bench | tee) still gets the whole table rather than 80 squeezed columns.
    console = Console(width=None if sys.stdout.isatty() else 150)
    console.print(f"The local system's logs go to {LOG_FILE.relative_to(REPO_ROOT)}")
    try:
        with logs_into(LOG_FILE):
            doc = run(config, console)
    except DeliveryFailed as failed:
        console.print(f"[red]Delivery failed, so there are no figures:[/red] {failed}")
        return 1
    doc["command"] = command_line("bench.live_notifications", argv)
    write_json(config.output, doc)
    print_report(console, doc)
    console.print(f"Report written to {config.output} in {doc['duration_s']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
