"""Acceptance benchmark: what one accepted job costs through the API, next to the floor cost of writing one
job row and one outbox row, and what the API Lambda's cold start costs next to a bare interpreter.

``python -m bench.acceptance`` (``make bench``) writes bench/results/acceptance.json and prints tables;
``--quick`` is a smoke run. This is a report, not a test: nothing in it passes or fails on a time.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import itertools
import json
import multiprocessing
import os
import pstats
import random
import re
import secrets
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from unittest.mock import patch
from uuid import UUID

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from pydantic import SecretStr
from rich.console import Console
from rich.table import Table

from bench.machine import command_line, describe_machine, load_average, write_json
from tollgate.api.app import create_app, handle
from tollgate.core.clock import SystemClock, new_id
from tollgate.db import Queries, load_queries
from tollgate.events import ExtractionRequested, outbox_row
from tollgate.settings import REPO_ROOT, ApiSettings
from tollgate.tenants.authorizer import authorize_request
from tollgate.tenants.keys import ApiKeyResolver, create_tenant
from tollgate.wiring import build_api
from tollgate_dev.local.aws import FAKE_AWS_ENV
from tollgate_dev.local.client import ApiClient
from tollgate_dev.local.gateway import API_ID, STAGE, build_event
from tollgate_dev.local.postgres import embedded_server
from tollgate_dev.local.runtime import LOCAL_BUCKET, LocalStack
from tollgate_dev.samples import generate_invoice, request_body

BENCH_DIR = Path(__file__).resolve().parent
DEFAULT_OUTPUT = BENCH_DIR / "results" / "acceptance.json"
EMBEDDED_DATA_DIR = REPO_ROOT / ".tollgate" / "bench-pgdata"
SCHEMA = "tollgate.bench.acceptance/v1"
JOBS_PATH = "/extraction-jobs"

# The benchmark measures what accepting costs, not when admission refuses: per-tenant limits are lifted
# so a single tenant can take every request of a run. The system-wide backlog cap keeps its default, as
# its check counts unfinished jobs up to that cap and so is part of the real cost.
ADMISSION_OVERRIDES: dict[str, Any] = {
    "tenant_max_pending_jobs": 10_000_000,
    "tenant_max_pending_bytes": 10**13,
    "tenant_max_pending_tokens": 10**13,
}

# What each row's "path" means; copied into the report so the JSON explains itself.
PATHS = {
    "psycopg": "the floor: insert_job + insert_outbox_event in one transaction, as the table owner",
    "in_process": "handle(app, deps, event) called with a gateway-shaped event: handler, DB, moto S3",
    "http": "ApiClient -> LocalStack gateway (pipeline off) -> authorizer -> handle; acceptance alone",
    "http_full_system": "the same, while relay, ingress, scheduler, workers and the simulated provider "
    "run in the benchmark process and work off the accepted jobs",
}

# Where an in-process request's time goes, measured at the seams named here (bench.acceptance.CostSplit);
# the parts add up to the whole request. Copied into the report so the JSON explains itself.
SPLIT_PARTS = {
    "request": "precheck, routing, the body parsed and validated into CreateJobRequest, the headers checked "
    "(the handler's time before accept_job)",
    "document": "the inline document canonicalized and hashed, and the request's identity hash",
    "s3_put": "the canonical document's S3 put (moto over HTTP on 127.0.0.1; skipped for a known document)",
    "sql": "the pipelined session, from taking a pooled connection to the commit, less the put inside it",
    "accept_other": "the rest of accept_job: parameters, the outbox event, the job view",
    "response": "the log line, the job serialized and the gateway response built (after accept_job)",
}

# One sample: when a request started and ended (perf_counter_ns), and its outcome ("202", "202 replayed",
# "committed", "connection error", …).
Sample = tuple[int, int, str]


# --------------------------------------------------------------------------------------------- requests


def job_body(index: int) -> bytes:
    """A realistic invoice whose text is unique to ``index``, so every request is a new document.

    Seeded by the index alone, so the HTTP client process rebuilds exactly the bodies the parent means.
    """
    body: dict[str, Any] = request_body(generate_invoice(random.Random(index), index))
    # The sample generator's texts are varied, not guaranteed distinct; a reference line makes them so.
    body["document"]["pages"][0]["text"] += f"\nBench reference {index}"
    return json.dumps(body).encode()


@dataclass(frozen=True)
class BenchTenant:
    tenant_id: UUID
    api_key: str
    # What the gateway puts in requestContext.authorizer after the authorizer allowed the key.
    authorizer_context: dict[str, str]


@dataclass(frozen=True)
class Job:
    tenant: BenchTenant
    idempotency_key: str
    index: int


class JobSource:
    """Hands out jobs that were never sent before in this run: a fresh index and Idempotency-Key each."""

    def __init__(self) -> None:
        self._run = secrets.token_hex(4)
        self._next = itertools.count(1)

    def take(self, count: int, tenants: Sequence[BenchTenant]) -> list[Job]:
        jobs = []
        for n in range(count):
            index = next(self._next)
            jobs.append(Job(tenants[n % len(tenants)], f"bench-{self._run}-{index}", index))
        return jobs


def gateway_event(job: Job, host: str, padding: int = 0) -> dict[str, Any]:
    """The event the local gateway would hand the API for this job, with the authorizer's context.

    ``padding``: that many more characters of invoice text (terms and conditions), to make a large document.
    """
    body = job_body(job.index)
    if padding:
        request = json.loads(body)
        request["document"]["pages"].append({"text": ("Terms and conditions apply. " * padding)[:padding]})
        body = json.dumps(request).encode()
    headers = {
        "Host": host,
        "Accept-Encoding": "identity",
        "Content-Length": str(len(body)),
        "Content-Type": "application/json",
        "Authorization": f"Bearer {job.tenant.api_key}",
        "Idempotency-Key": job.idempotency_key,
    }
    event = build_event("POST", JOBS_PATH, headers, body)
    event["requestContext"]["authorizer"] = dict(job.tenant.authorizer_context)
    return event


def outcome(status: int, replayed: bool) -> str:
    return f"{status} replayed" if replayed else str(status)


def _replayed(response: dict[str, Any]) -> bool:
    single = {k.lower(): v for k, v in (response.get("headers") or {}).items()}
    multi = {k.lower(): v for k, v in (response.get("multiValueHeaders") or {}).items()}
    return single.get("idempotent-replayed") == "true" or multi.get("idempotent-replayed") == ["true"]


# ------------------------------------------------------------------------------------------ statistics


@dataclass
class Row:
    name: str
    kind: str  # handler | replay | baseline
    path: str  # in_process | http | http_full_system | psycopg
    tenants: int
    concurrency: int
    requests: int
    statuses: dict[str, int]
    wall_s: float
    throughput_rps: float
    latency_ms: dict[str, float]
    drift: dict[str, float]
    rows_written: dict[str, Any] | None = None
    # Handler and replay rows: one job per key, under the tenant that sent it (see check_accepted_jobs).
    integrity: dict[str, int] | None = None
    baseline: str | None = None
    vs_baseline: dict[str, float] | None = None


def percentile_table(latencies_ms: Sequence[float]) -> dict[str, float]:
    ordered = sorted(latencies_ms)
    if len(ordered) < 2:
        only = ordered[0] if ordered else 0.0
        return {"mean": only, "p50": only, "p90": only, "p99": only, "max": only}
    cuts = statistics.quantiles(ordered, n=100, method="inclusive")
    return {
        "mean": statistics.fmean(ordered),
        "p50": cuts[49],
        "p90": cuts[89],
        "p99": cuts[98],
        "max": ordered[-1],
    }


def summarize(name: str, kind: str, path: str, tenants: int, concurrency: int, samples: list[Sample]) -> Row:
    samples = sorted(samples)
    latencies = [(end - start) / 1e6 for start, end, _ in samples]
    wall_ns = max(end for _, end, _ in samples) - min(start for start, _, _ in samples)
    statuses = Counter(result for _, _, result in samples)
    # Admission counts unfinished jobs on every request, so the cost can grow with the backlog the run
    # itself builds; the first and last tenth of the run, in submission order, show whether it does.
    tenth = max(1, len(latencies) // 10)
    drift = {
        "first_tenth_p50_ms": statistics.median(latencies[:tenth]),
        "last_tenth_p50_ms": statistics.median(latencies[-tenth:]),
    }
    drift["last_over_first"] = drift["last_tenth_p50_ms"] / drift["first_tenth_p50_ms"]
    return Row(
        name=name,
        kind=kind,
        path=path,
        tenants=tenants,
        concurrency=concurrency,
        requests=len(samples),
        statuses=dict(sorted(statuses.items())),
        wall_s=wall_ns / 1e9,
        throughput_rps=len(samples) / (wall_ns / 1e9),
        latency_ms=percentile_table(latencies),
        drift=drift,
    )


def compare_with_baselines(rows: list[Row]) -> None:
    """Handler / baseline at the same concurrency: below 1 for throughput, above 1 for latency, is slower."""
    baselines = {row.concurrency: row for row in rows if row.kind == "baseline"}
    for row in rows:
        floor = baselines.get(row.concurrency)
        if row.kind == "baseline" or floor is None:
            continue
        row.baseline = floor.name
        row.vs_baseline = {
            "throughput": row.throughput_rps / floor.throughput_rps,
            "p50": row.latency_ms["p50"] / floor.latency_ms["p50"],
            "p99": row.latency_ms["p99"] / floor.latency_ms["p99"],
        }


# ------------------------------------------------------------------------------------------- database


def bench_queries() -> Queries:
    return load_queries(BENCH_DIR / "queries")


@dataclass(frozen=True)
class ScratchDatabase:
    url: str
    source: str  # "DATABASE_URL" or "embedded"


@contextmanager
def scratch_database() -> Iterator[ScratchDatabase]:
    """A new, empty database on DATABASE_URL's server (or the embedded one), dropped at the end.

    A fresh database per run keeps earlier runs' rows, and anyone else's, out of the figures.
    """
    server_url = os.environ.get("DATABASE_URL")
    server = None
    if not server_url:
        server = embedded_server(EMBEDDED_DATA_DIR)
        server_url = server.get_uri()
    name = f"tollgate_bench_{os.getpid()}_{secrets.token_hex(3)}"
    q = bench_queries()
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(sql.SQL(q.create_database).format(name=sql.Identifier(name)))
    try:
        yield ScratchDatabase(
            make_conninfo(server_url, dbname=name), "embedded" if server else "DATABASE_URL"
        )
    finally:
        with psycopg.connect(server_url, autocommit=True) as conn:
            conn.execute(sql.SQL(q.drop_database).format(name=sql.Identifier(name)))
        if server is not None:
            server.cleanup()


def reset_accepted_work(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(bench_queries().reset_accepted_work)


def count_accepted_work(db_url: str) -> dict[str, Any]:
    q = bench_queries()
    with psycopg.connect(db_url, row_factory=dict_row) as conn:
        row = conn.execute(q.count_accepted_work).fetchone()
        states = {r["state"]: int(r["jobs"]) for r in conn.execute(q.job_states)}
    assert row is not None
    return {**{key: int(value) for key, value in row.items()}, "job_states": states}


def check_accepted_jobs(db_url: str, jobs: Sequence[Job]) -> dict[str, int]:
    params = {
        "keys": [job.idempotency_key for job in jobs],
        "tenants": [job.tenant.tenant_id for job in jobs],
    }
    with psycopg.connect(db_url, row_factory=dict_row) as conn:
        row = conn.execute(bench_queries().check_accepted_jobs, params).fetchone()
    assert row is not None
    return {"sent": len(jobs), **{key: int(value) for key, value in row.items()}}


def integrity_ok(integrity: dict[str, int]) -> bool:
    # More jobs than keys means a request was taken for another tenant's and created a job there.
    return (
        integrity["found"] == integrity["sent"] and not integrity["missing"] and not integrity["wrong_tenant"]
    )


# ------------------------------------------------------------------------------------------- baseline


class Baseline:
    """The floor: one extraction_jobs row and one outbox_events row in one transaction, as the table owner.

    It runs the very INSERT statements accept_job runs, with the same connection options as the API's pool,
    so the gap to the handler is everything else: the role and tenant scope, the advisory lock, the
    idempotency lookup, admission counts, the document row and S3 put, reading the job back, validation,
    serialization and routing.
    """

    def __init__(self, db_url: str, tenant_id: UUID) -> None:
        self.db_url = db_url
        self.q = load_queries()
        self.tenant_id = tenant_id

    def new_document(self) -> UUID:
        """A document row for the jobs to point at; resets remove it along with the jobs."""
        document_id = new_id()
        with psycopg.connect(self.db_url) as conn:
            conn.execute(
                self.q.insert_document,
                {
                    "document_id": document_id,
                    "tenant_id": self.tenant_id,
                    "sha256": secrets.token_hex(32),
                    "s3_key": f"bench/{document_id}.json",
                    "s3_version_id": "bench",
                    "body": None,
                    "size_bytes": 1000,
                    "page_count": 1,
                },
            )
        return document_id

    def prepare(self, document_id: UUID, jobs: Sequence[Job]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
        """Parameters built ahead, so the timed part is the database's work and the driver's, nothing else."""
        deadline = datetime.now(UTC) + timedelta(hours=1)
        prepared = []
        for job in jobs:
            job_id = new_id()
            prepared.append(
                (
                    {
                        "job_id": job_id,
                        "tenant_id": self.tenant_id,
                        "idempotency_key": job.idempotency_key,
                        "request_hash": secrets.token_hex(32),
                        "job_type": "invoice_extraction",
                        "document_id": document_id,
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
                    },
                    outbox_row(
                        ExtractionRequested(job_id=job_id, tenant_id=self.tenant_id, state_version=1),
                        event_id=new_id(),
                        trace_context=None,
                    ),
                )
            )
        return prepared

    def run(self, prepared: list[tuple[dict[str, Any], dict[str, Any]]], concurrency: int) -> list[Sample]:
        connections = [psycopg.connect(self.db_url, prepare_threshold=None) for _ in range(concurrency)]
        try:
            return run_concurrently(prepared, concurrency, self._insert_pair, connections)
        finally:
            for conn in connections:
                conn.close()

    def _insert_pair(
        self, item: tuple[dict[str, Any], dict[str, Any]], conn: psycopg.Connection[Any]
    ) -> Sample:
        job_params, outbox_params = item
        start = time.perf_counter_ns()
        with conn.transaction():
            conn.execute(self.q.insert_job, job_params)
            conn.execute(self.q.insert_outbox_event, outbox_params)
        return start, time.perf_counter_ns(), "committed"


def run_concurrently(
    items: Sequence[Any], concurrency: int, call: Callable[[Any, Any], Sample], resources: Sequence[Any]
) -> list[Sample]:
    """Runs ``call(item, resource)`` over the items from ``concurrency`` threads, one resource each."""
    results: list[Sample | None] = [None] * len(items)
    # itertools.count is advanced atomically under the GIL, so threads never take the same item.
    positions = itertools.count()
    start_together = threading.Barrier(concurrency)

    def worker(resource: Any) -> None:
        start_together.wait()
        while (position := next(positions)) < len(items):
            results[position] = call(items[position], resource)

    threads = [threading.Thread(target=worker, args=(resources[n],)) for n in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return [sample for sample in results if sample is not None]


# ---------------------------------------------------------------------------------------------- HTTP


def http_load(base_url: str, jobs: list[tuple[str, str, int]], concurrency: int) -> list[Sample]:
    """Runs in the client process: POSTs each (api key, Idempotency-Key, body index) through the gateway.

    Bodies are encoded before the clock starts, so the client's own work in a sample is the socket and
    http.client, as small as a Python client gets.
    """
    prepared = [(ApiClient(base_url, api_key), key, job_body(index)) for api_key, key, index in jobs]

    def submit(item: tuple[ApiClient, str, bytes], _: None) -> Sample:
        client, key, body = item
        start = time.perf_counter_ns()
        try:
            response = client.request(
                "POST",
                JOBS_PATH,
                raw_body=body,
                headers={"Content-Type": "application/json", "Idempotency-Key": key},
            )
        except OSError:
            # A refused or reset connection is counted in the report rather than ending the run.
            return start, time.perf_counter_ns(), "connection error"
        end = time.perf_counter_ns()
        return start, end, outcome(response.status, response.header("Idempotent-Replayed") == "true")

    return run_concurrently(prepared, concurrency, submit, [None] * concurrency)


# ----------------------------------------------------------------------------------------- cold start


def _wall_ms(
    command: list[str], env: dict[str, str] | None = None, stdin: str | None = None
) -> tuple[float, str]:
    start = time.perf_counter_ns()
    done = subprocess.run(
        command, cwd=REPO_ROOT, env=env, input=stdin, capture_output=True, text=True, check=False
    )
    elapsed = (time.perf_counter_ns() - start) / 1e6
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return elapsed, done.stdout


def _child_report(stdout: str) -> dict[str, Any]:
    # The last line is the child's JSON; anything a library printed before it is ignored.
    report: dict[str, Any] = json.loads(stdout.strip().splitlines()[-1])
    return report


def _spread(values: Sequence[float]) -> dict[str, Any]:
    return {
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
        "samples": list(values),
    }


def measure_cold_starts(
    repeats: int, handler_env: dict[str, str], events: Iterator[dict[str, Any]]
) -> dict[str, Any]:
    python = sys.executable
    commands: dict[str, tuple[list[str], dict[str, str] | None]] = {
        "bare_python": ([python, "-c", "pass"], None),
        "import_app": ([python, "-m", "bench.cold_start", "app"], None),
        "import_handler": ([python, "-m", "bench.cold_start", "handler"], handler_env),
    }
    walls: dict[str, list[float]] = defaultdict(list)
    inner: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    statuses: Counter[int] = Counter()
    # The first round writes bytecode caches and warms the page cache; it is not counted. Rounds
    # interleave the three commands so a change in machine load touches all of them alike.
    for round_number in range(repeats + 1):
        for name, (command, env) in commands.items():
            stdin = json.dumps(next(events)) if name == "import_handler" else None
            wall, stdout = _wall_ms(command, env, stdin)
            if round_number == 0:
                continue
            walls[name].append(wall)
            if name != "bare_python":
                report = _child_report(stdout)
                if "status" in report:
                    statuses[report.pop("status")] += 1
                for key, value in report.items():
                    inner[name][key].append(value)
    bare = statistics.median(walls["bare_python"])
    rows = []
    for name, (command, _) in commands.items():
        rows.append(
            {
                "name": name,
                "command": " ".join(["python", *command[1:]]),
                "process_wall_ms": _spread(walls[name]),
                "in_child_ms": {key: statistics.median(values) for key, values in inner[name].items()},
                "vs_bare_python": statistics.median(walls[name]) / bare,
            }
        )
    return {
        "repeats": repeats,
        "rows": rows,
        "first_request_statuses": {str(k): v for k, v in statuses.items()},
        "import_self_time_by_package": import_self_times(),
    }


_IMPORTTIME = re.compile(r"^import time:\s+(\d+) \|\s+(\d+) \| ( *)(\S+)$")


def import_self_times(top: int = 12) -> list[dict[str, Any]]:
    """Where the import of the API's modules spends its time, as self time summed by top-level package."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import tollgate.api.app, tollgate.wiring"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    by_package: Counter[str] = Counter()
    for line in done.stderr.splitlines():
        match = _IMPORTTIME.match(line)
        if match:
            by_package[match[4].split(".")[0]] += int(match[1])
    total = sum(by_package.values())
    return [
        {"package": name, "self_ms": micros / 1000, "share": micros / total}
        for name, micros in by_package.most_common(top)
    ]


# ------------------------------------------------------------------------------------------- profiling


def profile_handler(run: Callable[[], object], top: int = 25) -> str:
    """cProfile of ``run`` (this thread only: moto's server threads show up as time waiting on sockets)."""
    profiler = cProfile.Profile()
    profiler.enable()
    run()
    profiler.disable()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out).strip_dirs().sort_stats("cumulative")
    stats.print_stats(top)
    # One level below the use case is where the time splits: the S3 put, each query, the pool, the view.
    stats.print_callees(r"accept_job|_store_document|_admit")
    return out.getvalue()


# ------------------------------------------------------------------------------------------ cost split


class CostSplit:
    """Times an in-process request's parts by wrapping the seams between them, for one row only.

    The wrappers go on module globals the handler calls through (``accept_job`` as the route sees it, the
    document and hash functions as accept_job sees them) and on the deps' own document store and
    database, and come off when the row ends; nothing else in the process is touched.
    """

    def __init__(self, deps: Any) -> None:
        self.deps = deps
        self.parts: dict[str, list[float]] = defaultdict(list)
        self.totals: list[float] = []
        self._now: dict[str, float] = {}

    def _timed(self, part: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter_ns()
            try:
                return function(*args, **kwargs)
            finally:
                self._now[part] = self._now.get(part, 0.0) + (time.perf_counter_ns() - start) / 1e6

        return timed

    def _marked(self, function: Callable[..., Any]) -> Callable[..., Any]:
        def accept(*args: Any, **kwargs: Any) -> Any:
            self._now["accept_start"] = time.perf_counter_ns() / 1e6
            try:
                return function(*args, **kwargs)
            finally:
                self._now["accept_end"] = time.perf_counter_ns() / 1e6

        return accept

    def _timed_session(self, pipelined: Callable[[], Any]) -> Callable[[], Any]:
        @contextmanager
        def session() -> Iterator[Any]:
            start = time.perf_counter_ns()
            try:
                with pipelined() as lent:
                    yield lent
            finally:
                self._now["session"] = self._now.get("session", 0.0) + (time.perf_counter_ns() - start) / 1e6

        return session

    @contextmanager
    def installed(self) -> Iterator[None]:
        import tollgate.accept.service as service
        import tollgate.api.routes.jobs as routes

        acceptance = self.deps.acceptance
        with ExitStack() as stack:
            for target, name, wrapper in (
                (routes, "accept_job", self._marked(routes.accept_job)),
                (service, "document_from_inline", self._timed("document", service.document_from_inline)),
                (service, "request_hash", self._timed("document", service.request_hash)),
                (acceptance.documents, "put", self._timed("s3_put", acceptance.documents.put)),
                (acceptance.db, "pipelined", self._timed_session(acceptance.db.pipelined)),
            ):
                stack.enter_context(patch.object(target, name, wrapper))
            yield

    def request(self, run: Callable[[], Any]) -> Any:
        self._now = {}
        start = time.perf_counter_ns() / 1e6
        result = run()
        end = time.perf_counter_ns() / 1e6
        now = self._now
        accept = now["accept_end"] - now["accept_start"]
        put, document, session = now.get("s3_put", 0.0), now.get("document", 0.0), now.get("session", 0.0)
        self.totals.append(end - start)
        self.parts["request"].append(now["accept_start"] - start)
        self.parts["document"].append(document)
        self.parts["s3_put"].append(put)
        self.parts["sql"].append(session - put)
        self.parts["accept_other"].append(accept - document - session)
        self.parts["response"].append(end - now["accept_end"])
        return result

    def summary(self) -> dict[str, Any]:
        total_mean = statistics.fmean(self.totals)
        return {
            "requests": len(self.totals),
            "total_ms": percentile_table(self.totals),
            "parts": {
                name: {
                    "p50_ms": statistics.median(values),
                    "mean_ms": statistics.fmean(values),
                    "share_of_mean": statistics.fmean(values) / total_mean,
                    "what": SPLIT_PARTS[name],
                }
                for name, values in self.parts.items()
            },
        }


# ---------------------------------------------------------------------------------------------- runner


class Phases:
    """Wall time of the run's parts, so a slow run can say which part was slow."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = time.perf_counter() - start


@dataclass
class Config:
    requests: int
    warmup: int
    tenants: int
    http_concurrency: list[int]
    cold_repeats: int
    quick: bool
    profile: bool
    full_system: bool
    output: Path


@dataclass
class Bench:
    """One run: the rows share a scratch database, a moto server and a set of tenants.

    ``stack`` is a LocalStack with its background pipeline off: its gateway is the HTTP way in for the
    acceptance rows, so they measure acceptance alone. The full local system (relay, ingress, scheduler,
    workers and the simulated provider, all in this process) gets rows of its own at the end.
    """

    config: Config
    db: ScratchDatabase
    stack: LocalStack
    console: Console
    phases: Phases
    source: JobSource = field(default_factory=JobSource)
    rows: list[Row] = field(default_factory=list)

    def __post_init__(self) -> None:
        settings = ApiSettings(
            database_url=SecretStr(self.db.url), documents_bucket=LOCAL_BUCKET, **ADMISSION_OVERRIDES
        )
        # The in-process handler gets deps of its own, built by the wiring the Lambda uses; the stack
        # keeps its deps to itself. Both use the same database and the same moto server.
        self.deps = build_api(settings)
        self.app = create_app(self.deps)
        self.resolver = ApiKeyResolver(self.deps.acceptance.db, SystemClock(), ttl_seconds=3600)
        self.host = self.stack.api_url.removeprefix("http://")
        self.tenants = self._make_tenants(self.config.tenants)

    def close(self) -> None:
        self.deps.acceptance.db.close()

    def _make_tenants(self, count: int) -> list[BenchTenant]:
        assert self.stack.system_db is not None
        method_arn = f"arn:aws:execute-api:eu-west-1:000000000000:{API_ID}/{STAGE}/POST{JOBS_PATH}"
        tenants = []
        for n in range(count):
            created = create_tenant(self.stack.system_db, f"bench-{secrets.token_hex(4)}-{n}", new_id)
            policy = authorize_request(self.resolver, f"Bearer {created.api_key}", method_arn)
            context = {"principalId": policy["principalId"], **policy["context"]}
            tenants.append(BenchTenant(created.tenant_id, created.api_key, context))
        return tenants

    # -- the ways in

    def in_process(self, jobs: Sequence[Job]) -> list[Sample]:
        return self.handle_events([gateway_event(job, self.host) for job in jobs])

    def handle_events(self, events: Sequence[dict[str, Any]]) -> list[Sample]:
        samples = []
        for event in events:
            start = time.perf_counter_ns()
            response = handle(self.app, self.deps, event, None)
            end = time.perf_counter_ns()
            samples.append((start, end, outcome(int(response["statusCode"]), _replayed(response))))
        return samples

    def cost_split(self, padding: int = 0) -> dict[str, Any]:
        """New jobs in process, one at a time, with their time split into parts (SPLIT_PARTS); ``padding``
        makes each document that much larger (past the row limit, into S3)."""
        split = CostSplit(self.deps)
        jobs = self.source.take(self.config.requests, self.tenants)
        events = [gateway_event(job, self.host, padding) for job in jobs]
        statuses: Counter[str] = Counter()
        with split.installed():
            for event in events:
                response = split.request(lambda event=event: handle(self.app, self.deps, event, None))
                statuses[outcome(int(response["statusCode"]), _replayed(response))] += 1
        reset_accepted_work(self.db.url)
        summary = split.summary()
        summary["statuses"] = dict(statuses)
        summary["padding_chars"] = padding
        parts = ", ".join(f"{name} {part['p50_ms']:.2f}" for name, part in summary["parts"].items())
        self.console.print(
            f"  cost split (+{padding} chars), p50 ms: {parts}; whole {summary['total_ms']['p50']:.2f}"
        )
        return summary

    # -- scenarios

    def record(self, row: Row) -> Row:
        row.rows_written = count_accepted_work(self.db.url)
        self.rows.append(row)
        self.console.print(
            f"  {row.name:<44} {row.throughput_rps:8.1f} req/s  p50 {row.latency_ms['p50']:7.2f} ms  "
            f"p99 {row.latency_ms['p99']:7.2f} ms  {row.statuses}"
        )
        return row

    def checked(self, row: Row, jobs: Sequence[Job]) -> None:
        """Records the row with its integrity: one job per key, each under the tenant that sent it."""
        self.record(row)
        row.integrity = check_accepted_jobs(self.db.url, jobs)
        if not integrity_ok(row.integrity):
            self.console.print(f"  [red]requests answered as other requests[/red]: {row.integrity}")

    def handler_scenario(
        self,
        name: str,
        path: str,
        tenant_count: int,
        concurrency: int,
        send: Callable[[Sequence[Job]], list[Sample]],
        replay_name: str | None = None,
        reset: bool = True,
    ) -> None:
        tenants = self.tenants[:tenant_count]
        send(self.source.take(self.config.warmup, tenants))
        if reset:
            reset_accepted_work(self.db.url)
        jobs = self.source.take(self.config.requests, tenants)
        self.checked(summarize(name, "handler", path, tenant_count, concurrency, send(jobs)), jobs)
        if replay_name:
            # The same keys and bodies again, while their jobs are still in the database.
            send(jobs[: self.config.warmup])
            self.checked(summarize(replay_name, "replay", path, tenant_count, concurrency, send(jobs)), jobs)
        if reset:
            reset_accepted_work(self.db.url)

    def baseline_scenario(self, baseline: Baseline, concurrency: int) -> None:
        warm = baseline.prepare(baseline.new_document(), self.source.take(self.config.warmup, self.tenants))
        baseline.run(warm, concurrency)
        reset_accepted_work(self.db.url)
        jobs = self.source.take(self.config.requests, self.tenants)
        samples = baseline.run(baseline.prepare(baseline.new_document(), jobs), concurrency)
        name = f"baseline: 2 inserts, c={concurrency}"
        self.record(summarize(name, "baseline", "psycopg", 1, concurrency, samples))
        reset_accepted_work(self.db.url)

    def run_throughput(self) -> None:
        config = self.config
        many, top = config.tenants, max(config.http_concurrency)
        self.console.print(
            f"[bold]Throughput[/bold]: {config.requests} requests per row, "
            f"{config.warmup} warm-up requests before each"
        )
        assert self.stack.system_db is not None
        # A tenant of its own, made by the use case, so the floor's rows never count toward another's.
        floor_tenant = create_tenant(self.stack.system_db, f"bench-floor-{secrets.token_hex(4)}", new_id)
        baseline = Baseline(self.db.url, floor_tenant.tenant_id)
        for concurrency in sorted({1, *config.http_concurrency}):
            self.baseline_scenario(baseline, concurrency)

        self.handler_scenario(
            f"in-process, {many} tenants, c=1",
            "in_process",
            many,
            1,
            self.in_process,
            replay_name=f"replay in-process, {many} tenants, c=1",
        )

        # The HTTP clients live in their own process so they do not compete with the gateway, the handler
        # and moto for this process's GIL; spawned, because forking a process with threads is unsafe.
        with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as clients:

            def over_http(url: str, concurrency: int) -> Callable[[Sequence[Job]], list[Sample]]:
                def send(jobs: Sequence[Job]) -> list[Sample]:
                    spec = [(job.tenant.api_key, job.idempotency_key, job.index) for job in jobs]
                    return clients.submit(http_load, url, spec, concurrency).result()

                return send

            for concurrency in config.http_concurrency:
                self.handler_scenario(
                    f"http, {many} tenants, c={concurrency}",
                    "http",
                    many,
                    concurrency,
                    over_http(self.stack.api_url, concurrency),
                    replay_name=f"replay http, {many} tenants, c={top}" if concurrency == top else None,
                )
            self.handler_scenario(
                f"http, 1 tenant, c={top}", "http", 1, top, over_http(self.stack.api_url, top)
            )
            if config.full_system:
                self.run_full_system(over_http)
        compare_with_baselines(self.rows)

    def run_full_system(
        self, over_http: Callable[[str, int], Callable[[Sequence[Job]], list[Sample]]]
    ) -> None:
        """Acceptance while the whole local system runs in this process and works off what it accepts.

        Nothing is reset while it runs: the workers are busy with the jobs, and clearing tables under them
        would only measure their recovery.
        """
        full = LocalStack(
            port=0, database_url=self.db.url, aws=self.stack.aws, api_overrides=ADMISSION_OVERRIDES
        )
        with self.phases("full system start"):
            full.start()
        try:
            # One row, at the highest concurrency: it is the slowest row per request, and the gap to the
            # plain http row at the same concurrency is what it is there to show.
            many, top = self.config.tenants, max(self.config.http_concurrency)
            self.handler_scenario(
                f"full local system http, {many} tenants, c={top}",
                "http_full_system",
                many,
                top,
                over_http(full.api_url, top),
                reset=False,
            )
        finally:
            with self.phases("full system stop"):
                full.stop()
        reset_accepted_work(self.db.url)

    def run_cold_starts(self) -> dict[str, Any]:
        self.console.print(f"[bold]Cold start[/bold]: {self.config.cold_repeats} fresh interpreters per row")
        assert self.stack.aws is not None
        env = {key: value for key, value in os.environ.items() if not key.startswith("AWS_")}
        env.update(
            {
                **FAKE_AWS_ENV,
                "AWS_ENDPOINT_URL": self.stack.aws.endpoint_url,
                "DATABASE_URL": self.db.url,
                "DOCUMENTS_BUCKET": LOCAL_BUCKET,
            }
        )
        jobs = self.source.take(self.config.cold_repeats + 1, self.tenants[:1])
        cold = measure_cold_starts(
            self.config.cold_repeats, env, (gateway_event(job, self.host) for job in jobs)
        )
        reset_accepted_work(self.db.url)
        return cold

    def run_profile(self) -> str:
        jobs = self.source.take(self.config.requests, self.tenants)
        events = [gateway_event(job, self.host) for job in jobs]
        text = profile_handler(lambda: self.handle_events(events))
        reset_accepted_work(self.db.url)
        return text


def machine_info(db: ScratchDatabase) -> dict[str, Any]:
    return describe_machine(
        db_url=db.url, database=db.source, aws="moto server on 127.0.0.1, in the benchmark process"
    )


# ---------------------------------------------------------------------------------------------- output


def _ratio(value: float | None) -> str:
    return "" if value is None else f"{value:.2f}x"


def _outcomes(row: Row) -> str:
    text = ", ".join(f"{count} {outcome}" for outcome, count in row.statuses.items())
    issues = row.integrity
    if issues is not None and not integrity_ok(issues):
        found, sent = issues["found"], issues["sent"]
        lost, stray = issues["missing"], issues["wrong_tenant"]
        text += f" [red]({found} jobs for {sent} keys: {lost} never made, {stray} under another tenant)[/red]"
    return text


def print_report(console: Console, rows: list[Row], cold: dict[str, Any]) -> None:
    table = Table(
        title="Acceptance: throughput, latency (ms), and handler / baseline at equal concurrency (x)",
        caption="drift: p50 of the last tenth of a row over the first tenth (does cost grow with backlog?)",
    )
    for column in (
        "scenario",
        "outcomes",
        "req/s",
        "p50",
        "p90",
        "p99",
        "max",
        "x req/s",
        "x p50",
        "x p99",
        "drift",
    ):
        table.add_column(column, justify="left" if column in {"scenario", "outcomes"} else "right")
    for row in rows:
        ratio = row.vs_baseline or {}
        table.add_row(
            row.name,
            _outcomes(row),
            f"{row.throughput_rps:.1f}",
            f"{row.latency_ms['p50']:.2f}",
            f"{row.latency_ms['p90']:.2f}",
            f"{row.latency_ms['p99']:.2f}",
            f"{row.latency_ms['max']:.2f}",
            _ratio(ratio.get("throughput")),
            _ratio(ratio.get("p50")),
            _ratio(ratio.get("p99")),
            _ratio(row.drift["last_over_first"]),
        )
    console.print(table)

    cold_table = Table(title=f"Cold start, median of {cold['repeats']} fresh interpreters (ms)")
    for column in ("measure", "process wall", "min", "max", "vs bare python", "inside the child"):
        cold_table.add_column(
            column, justify="left" if column in {"measure", "inside the child"} else "right"
        )
    for row in cold["rows"]:
        wall = row["process_wall_ms"]
        inside = ", ".join(f"{k.removesuffix('_ms')} {v:.0f}" for k, v in row["in_child_ms"].items())
        cold_table.add_row(
            row["name"],
            f"{wall['median']:.0f}",
            f"{wall['min']:.0f}",
            f"{wall['max']:.0f}",
            f"{row['vs_bare_python']:.1f}x",
            inside,
        )
    console.print(cold_table)

    imports = Table(
        title="Import self time by top-level package (tollgate.api.app + tollgate.wiring, one run)"
    )
    for column in ("package", "self ms", "share"):
        imports.add_column(column, justify="left" if column == "package" else "right")
    for entry in cold["import_self_time_by_package"]:
        imports.add_row(entry["package"], f"{entry['self_ms']:.1f}", f"{entry['share']:.0%}")
    console.print(imports)


# ------------------------------------------------------------------------------------------------ main


def parse_args(argv: Sequence[str] | None) -> Config:
    parser = argparse.ArgumentParser(prog="python -m bench.acceptance", description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1000, help="requests per measured row (default 1000)")
    parser.add_argument(
        "--quick", action="store_true", help="smoke run: 100 requests a row, 1 cold start each"
    )
    parser.add_argument(
        "--tenants", type=int, default=8, help="tenants for the multi-tenant rows (default 8)"
    )
    parser.add_argument("--http-concurrency", default="1,8", help="client threads over HTTP (default 1,8)")
    parser.add_argument("--cold-repeats", type=int, default=5, help="fresh interpreters per cold-start row")
    parser.add_argument(
        "--profile", action="store_true", help="also print a cProfile of the in-process handler"
    )
    parser.add_argument(
        "--full-system",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also measure acceptance while the whole local system runs and works off the jobs",
    )
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="where the JSON report goes")
    args = parser.parse_args(argv)
    requests, cold_repeats = (100, 1) if args.quick else (args.requests, args.cold_repeats)
    concurrency = sorted({int(part) for part in args.http_concurrency.split(",") if part.strip()})
    if requests < 10 or args.tenants < 1 or cold_repeats < 1 or not concurrency or min(concurrency) < 1:
        parser.error("need at least 10 requests, 1 tenant, 1 cold repeat and concurrency of at least 1")
    return Config(
        requests=requests,
        warmup=max(10, min(200, requests // 10)),
        tenants=args.tenants,
        http_concurrency=concurrency,
        cold_repeats=cold_repeats,
        quick=args.quick,
        profile=args.profile,
        full_system=args.full_system,
        output=args.output,
    )


def stop_on_sigterm(signum: int, frame: object) -> None:
    # SystemExit unwinds through the finally blocks, so a stopped run still drops its scratch database.
    raise SystemExit(128 + signum)


def main(argv: Sequence[str] | None = None) -> int:
    config = parse_args(argv)
    signal.signal(signal.SIGTERM, stop_on_sigterm)
    # Piped output (make bench | tee) still gets the whole table rather than 80 squeezed columns.
    console = Console(width=None if sys.stdout.isatty() else 150)
    started = datetime.now(UTC)
    clock_start = time.perf_counter_ns()
    phases = Phases()
    with phases("database"), scratch_database() as db:
        console.print(f"Database: fresh scratch database on the {db.source} server")
        machine = machine_info(db)
        stack = LocalStack(port=0, database_url=db.url, api_overrides=ADMISSION_OVERRIDES, pipeline=False)
        with phases("stack start"):
            stack.start()
        try:
            bench = Bench(config, db, stack, console, phases)
            try:
                with phases("throughput"):
                    bench.run_throughput()
                with phases("cost split"):
                    # Documents as they come (kept in their rows), then each over the row limit (put in S3).
                    large = bench.deps.acceptance.limits.document_row_max_bytes + 1024
                    split = {"in_row": bench.cost_split(), "in_s3": bench.cost_split(padding=large)}
                with phases("cold start"):
                    cold = bench.run_cold_starts()
                profile = bench.run_profile() if config.profile else None
                machine["load_average_after"] = load_average()
            finally:
                bench.close()
        finally:
            stack.stop()

    document = {
        "schema": SCHEMA,
        "command": command_line("bench.acceptance", argv),
        "started_at": started.isoformat(),
        "duration_s": (time.perf_counter_ns() - clock_start) / 1e9,
        "machine": machine,
        "config": {
            "requests_per_row": config.requests,
            "warmup_per_row": config.warmup,
            "tenants": config.tenants,
            "http_concurrency": config.http_concurrency,
            "cold_repeats": config.cold_repeats,
            "quick": config.quick,
            "full_system": config.full_system,
            "admission_overrides": ADMISSION_OVERRIDES,
            "api_pool_size": ApiSettings.model_fields["database_pool_size"].default,
            "http_client": "ApiClient (one connection per request) in a separate spawned process",
            "paths": PATHS,
        },
        # Where the run's own wall time went (phases nest: "database" holds everything after it opened).
        "phases_s": phases.seconds,
        "throughput": [asdict(row) for row in bench.rows],
        "cold_start": cold,
        "cost_split": split,
    }
    write_json(config.output, document)
    print_report(console, bench.rows, cold)
    if profile:
        console.print(profile, markup=False, highlight=False)
    console.print(f"Report written to {config.output} in {document['duration_s']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
