"""Outbox relay benchmark: how fast ``relay_outbox`` drains a backlog into SQS FIFO (one relay, and two at
once to show that SKIP LOCKED claims let them share it without publishing anything twice), how long an event
waits between its commit and SQS's confirmation when the relay is nudged after each commit, and what the
SendMessageBatch calls alone cost, all in one run against one moto server over HTTP on 127.0.0.1.

``python -m bench.relay`` writes bench/results/relay.json and prints tables; ``--quick`` is a smoke run (its
500 events are five claims of 100, which two relays split 3 to 2: too coarse to read scaling from).
This is a report, not a test: nothing in it passes or fails on a time.

Rows, each measured ``--rounds`` times in turn so that a change in machine load touches all of them alike:

- ``floor c=N``: pre-built SendMessageBatch requests of 10 (built by the relay's own ``SqsFifoPublisher``
  before the clock starts, so they are byte for byte what the relay sends) from N threads, one client each;
- ``relay c=N``: N relays, each wired by ``build_relay`` with its own pool and SQS client, each calling
  ``relay_outbox`` in a thread until a run claims nothing, over a backlog pre-loaded across several tenants;
- ``floor: SendMessageBatch of 1``: one-entry calls, back to back and paced at the latency row's rate, the
  floor under one event's publication;
- ``latency``: a producer commits one event at a time at a steady rate and nudges the relay (an
  ``EventNudger``, as the local API does), while a relay loop (``tollgate_dev.local.loops.Loop``) runs on
  nudges, with the one-minute sweep as fallback.

The backlog is inserted as the table owner with ``insert_outbox_event``, the statement ``accept_job`` runs,
and the payload ``accept_job`` writes; no job rows. The relay reads nothing but ``outbox_events``, so its work
is the same, and loading thousands of events through ``accept_job`` (about 15 ms each here) would spend
most of the run's time budget before the relay is even timed.

Every SendMessageBatch, the relay's and the floor's, goes through the same timing wrapper, which also counts
confirmed entries per MessageDeduplicationId (the event id): an event confirmed twice is a double publish,
even where moto's FIFO deduplication keeps the second copy out of the queue. After each relay row the
database must hold no unpublished event and the queue exactly one message per event.

moto runs in a child process (``bench.relay_aws``), so its request handling does not share an interpreter
lock with the relays, and without moto's rescans of the whole queue on every send (see that module), which
would otherwise make a send into a queue of 1,000 messages take a second. The one cost that still grows with
the queue is moto's FIFO deduplication check, a comparison per queued message: the ``drift`` column shows it,
and floor and relay rows see the same growth, since each starts from an empty queue and sends as many.

JSON (``bench/results/relay.json``, schema ``tollgate.bench.relay/v1``):

    schema, command, started_at, duration_s
    machine:    cpu_count, cpu_model, memory_bytes, platform, python, postgres {...}, database, aws,
                code_commit, load_average_before, load_average_after
    config:     events, rounds, tenants, ..., relay_settings, rows {row: description}
    phases_s:   {phase: seconds}
    throughput: [ {name, kind (floor|relay), concurrency, per_s {median, min, max},
                   call_ms {mean, p50, p90, p99, max} (pooled over rounds), vs_floor, vs_c1,
                   rounds [ {events, wall_s, per_s, calls, call_ms, call_drift, cpu_ms_per_100 {bench, moto},
                             breakdown {runs, batches, busy_s, share {...}, per_batch_ms {...}} | null,
                             checks {...}} ]} ]
    single_message: paced_rate_per_s, back_to_back, paced (each shaped like one round above)
    latency:    events, rate_per_s, achieved_rate_per_s, commit_to_confirm_ms, created_at_to_confirm_ms,
                relay_runs, events_per_run, empty_runs, calls, call_ms, unpublished,
                vs_single_message_p50 {paced, back_to_back}, cpu_ms_per_100, breakdown, checks
    ratios:     relay_over_floor_c1, relay_over_floor_c2, relay_c2_over_c1, floor_c2_over_c1 (each
                {median, min, max} of per-round ratios), relay_call_p50_over_floor_call_p50_c1 and _c2
"""

from __future__ import annotations

import argparse
import os
import secrets
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast
from uuid import UUID

import boto3
import psutil
import psycopg
from pydantic import SecretStr
from rich.console import Console
from rich.table import Table

from bench.acceptance import (
    Phases,
    ScratchDatabase,
    count_accepted_work,
    machine_info,
    percentile_table,
    reset_accepted_work,
    run_concurrently,
    scratch_database,
)
from bench.machine import command_line, load_average, write_json
from tollgate.core.clock import new_id
from tollgate.db import Database, build_database, load_queries
from tollgate.db.database import Conn
from tollgate.db.migrations import apply_migrations
from tollgate.events import EXTRACTION_REQUESTED, ExtractionRequested, outbox_row
from tollgate.jobtypes.registry import JOB_TYPES
from tollgate.outbox.job_queues import JobTypeQueues
from tollgate.outbox.nudge import EventNudger
from tollgate.outbox.relay import OutboxEvent, RelayDeps, RelayReport, relay_outbox
from tollgate.outbox.sqs import SQS_BATCH_LIMIT, SqsFifoPublisher
from tollgate.settings import REPO_ROOT, DatabaseSettings, RelaySettings
from tollgate.tenants.keys import create_tenant
from tollgate.wiring import build_relay
from tollgate_dev.local.aws import FAKE_AWS_ENV, create_jobs_queues
from tollgate_dev.local.loops import Loop

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient

BENCH_DIR = Path(__file__).resolve().parent
DEFAULT_OUTPUT = BENCH_DIR / "results" / "relay.json"
SCHEMA = "tollgate.bench.relay/v1"
QUEUE_NAME = "tollgate-relay-bench"
# The relay Lambda's schedule: a nudge that went missing is published by the next sweep, at most this late.
SWEEP_SECONDS = 60.0
# Backlog rows go in a few dozen per transaction, so their created_at values spread as real commits do
# instead of all sharing one transaction's timestamp.
PRELOAD_ROWS_PER_TRANSACTION = 50

# Checks that count rather than flag: every other check of a row is a problem when it is not zero.
INFORMATIVE_CHECKS = frozenset({"sent", "expected", "confirmed_once", "queue_depth_after"})

ROW_DESCRIPTIONS = {
    "floor": "SendMessageBatch of 10 pre-built entries (the relay's own, built before timing), one boto3 "
    "client per thread, same moto queue",
    "relay": "relay_outbox in a loop until a run claims nothing (build_relay wiring: 100 claimed per batch, "
    "SendMessageBatch of 10, max_batches from RelaySettings), one pool and SQS client per relay",
    "single_message": "SendMessageBatch of 1 pre-built entry, back to back and paced at the latency row's "
    "rate: the floor under one event's publication",
    "latency": "one outbox row per transaction at a steady rate, EventNudger.nudge() after each commit, "
    "relay loop woken by the nudge with a 60 s sweep as fallback; latency = SQS confirmation - commit",
}


# ------------------------------------------------------------------------------------------------ config


@dataclass(frozen=True)
class Config:
    events: int
    rounds: int
    tenants: int
    warmup_events: int
    single_calls: int
    latency_rate: float
    latency_seconds: float
    quick: bool
    output: Path


# --------------------------------------------------------------------------------------- instrumentation


class Recorder:
    """What one row's threads did: SendMessageBatch calls, confirmations per event id, the relay's
    transactions and runs. Every write, and every read while the row runs, holds one lock."""

    def __init__(self, keep_bodies: bool = False) -> None:
        self._lock = threading.Lock()
        self._keep_bodies = keep_bodies
        self.calls: list[tuple[int, int, int]] = []  # start ns, end ns, entries
        self.call_errors: Counter[str] = Counter()
        self.failed_entries: Counter[str] = Counter()
        self.confirmations: Counter[str] = Counter()
        self.first_confirmed: dict[str, tuple[int, datetime]] = {}
        self.bodies: dict[str, str] = {}
        self.transactions: dict[str, list[int]] = defaultdict(list)
        self.runs: list[tuple[int, int, int]] = []  # start ns, end ns, events claimed
        self.relay_failed = 0

    def call(self, start: int, end: int, entries: Sequence[Mapping[str, Any]], response: Any) -> None:
        confirmed_at = datetime.now(UTC)
        by_id = {entry["Id"]: entry for entry in entries}
        with self._lock:
            self.calls.append((start, end, len(entries)))
            for ok in response.get("Successful", []):
                entry = by_id[ok["Id"]]
                event_id = entry["MessageDeduplicationId"]
                self.confirmations[event_id] += 1
                self.first_confirmed.setdefault(event_id, (end, confirmed_at))
                if self._keep_bodies:
                    self.bodies.setdefault(event_id, entry["MessageBody"])
            for failed in response.get("Failed", []):
                self.failed_entries[str(failed.get("Code"))] += 1

    def confirmed_all(self, event_ids: set[str]) -> bool:
        with self._lock:
            return all(event_id in self.first_confirmed for event_id in event_ids)

    def call_failed(self, start: int, end: int, error: BaseException) -> None:
        with self._lock:
            self.calls.append((start, end, 0))
            self.call_errors[type(error).__name__] += 1

    def transaction(self, label: str, elapsed_ns: int) -> None:
        with self._lock:
            self.transactions[label].append(elapsed_ns)

    def run(self, start: int, end: int, report: RelayReport) -> None:
        with self._lock:
            self.runs.append((start, end, report.claimed))
            self.relay_failed += report.failed + report.unroutable


class TimedSqs:
    """An SQS client whose SendMessageBatch is timed, end to end as its caller sees it, into a Recorder.

    The floor rows call it directly and the relays' publishers call it, so both are measured across the same
    boundary: boto3's serialization, signing, the HTTP round trip and parsing of the answer.
    """

    def __init__(self, client: Any, recorder: Recorder) -> None:
        self._client = client
        self.recorder = recorder

    def send_message_batch(self, **request: Any) -> Any:
        start = time.perf_counter_ns()
        try:
            response = self._client.send_message_batch(**request)
        except Exception as error:
            self.recorder.call_failed(start, time.perf_counter_ns(), error)
            raise
        self.recorder.call(start, time.perf_counter_ns(), request["Entries"], response)
        return response

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


class _LabelledConnection:
    """Passes every call through to the connection, noting which relay query the transaction ran."""

    def __init__(self, conn: Conn, labels: Mapping[str, str]) -> None:
        self._conn = conn
        self._labels = labels
        self.label = "other"

    def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
        self.label = self._labels.get(query, self.label)
        return self._conn.execute(query, params, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


class TimedDatabase(Database):
    """The relay's own pool and role, with each transaction timed from pool checkout to commit and filed
    under the query it ran: ``claim`` (claim_outbox_batch) or ``mark`` (mark published, release failures)."""

    def __init__(self, inner: Database, recorder: Recorder) -> None:
        super().__init__(inner.pool, inner.role, inner.q)
        self.recorder = recorder
        self._labels = {
            inner.q.claim_outbox_batch: "claim",
            inner.q.mark_outbox_published: "mark",
            inner.q.release_outbox_failure: "mark",
        }

    @contextmanager
    def transaction(self, tenant_id: UUID | None = None) -> Iterator[Conn]:
        start = time.perf_counter_ns()
        with super().transaction(tenant_id) as conn:
            watched = _LabelledConnection(conn, self._labels)
            yield cast(Conn, watched)
        self.recorder.transaction(watched.label, time.perf_counter_ns() - start)


class Relay:
    """One relay as the Lambda is wired (build_relay), with its SQS client and its database timed.

    Only the jobs queue's publisher is rebuilt, around the timed client; the webhook routes stay as wired
    and are never used, since every event here is extraction.requested.
    """

    def __init__(self, db_url: str, queue_url: str) -> None:
        # Every type's events go to the one benchmark queue: the events here are all invoice extractions.
        settings = RelaySettings(
            database_url=SecretStr(db_url), job_queue_urls=dict.fromkeys(JOB_TYPES, queue_url)
        )
        wired = build_relay(settings)
        self.max_batches = settings.relay_max_batches
        self.recorder = Recorder()
        self._sqs = TimedSqs(boto3.client("sqs"), self.recorder)
        self._db = TimedDatabase(wired.db, self.recorder)
        self._pool = wired.db
        publisher = SqsFifoPublisher(cast("SQSClient", self._sqs), queue_url, settings.message_group_shards)
        by_type = JobTypeQueues(dict.fromkeys(JOB_TYPES, publisher))
        self.deps: RelayDeps = replace(
            wired, db=self._db, routes={**wired.routes, EXTRACTION_REQUESTED: by_type}
        )

    def record_into(self, recorder: Recorder) -> None:
        self.recorder = self._sqs.recorder = self._db.recorder = recorder

    def run_once(self) -> RelayReport:
        """One invocation, as the Lambda makes it on a nudge or a sweep."""
        start = time.perf_counter_ns()
        report = relay_outbox(self.deps, max_batches=self.max_batches)
        self.recorder.run(start, time.perf_counter_ns(), report)
        return report

    def drain(self) -> None:
        while self.run_once().claimed:
            pass

    def close(self) -> None:
        self._pool.close()


class _CapturingSqs:
    """Takes the place of the SQS client so that the real publisher builds its requests without sending."""

    def __init__(self) -> None:
        self.requests: list[list[dict[str, Any]]] = []

    def send_message_batch(self, **request: Any) -> dict[str, Any]:
        self.requests.append(request["Entries"])
        return {"Successful": [{"Id": entry["Id"]} for entry in request["Entries"]], "Failed": []}


# ------------------------------------------------------------------------------------------- environment


@contextmanager
def moto_server() -> Iterator[int]:
    """``bench.relay_aws`` in a child process, as this process's AWS endpoint; yields the child's pid."""
    environment = {
        **os.environ,
        **FAKE_AWS_ENV,
        # Each row starts from an empty queue; real SQS (and moto by default) allow one purge a minute.
        "MOTO_SQS_ENFORCE_STRICT_QUEUE_PURGE_BEHAVIOUR": "false",
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "bench.relay_aws"], cwd=REPO_ROOT, stdout=subprocess.PIPE, env=environment
    )
    try:
        assert process.stdout is not None
        endpoint = process.stdout.readline().decode().strip()
        if not endpoint.startswith("http://127.0.0.1:"):
            raise RuntimeError(f"the moto server did not start (said {endpoint!r})")
        # Only placeholders, so real credentials in this environment can never reach moto or AWS.
        os.environ.update({**FAKE_AWS_ENV, "AWS_ENDPOINT_URL": endpoint})
        yield process.pid
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def make_tenants(db_url: str, count: int) -> list[UUID]:
    system = build_database(
        DatabaseSettings(database_url=SecretStr(db_url), database_role="tollgate_system"),
        pool_name="bench-relay-system",
    )
    try:
        return [
            create_tenant(system, f"bench-relay-{secrets.token_hex(4)}-{n}", new_id).tenant_id
            for n in range(count)
        ]
    finally:
        system.close()


def requested_row(tenant_id: UUID) -> dict[str, Any]:
    """insert_outbox_event's parameters for a new job's event, built as accept_job builds them."""
    requested = ExtractionRequested(job_id=new_id(), tenant_id=tenant_id, state_version=1)
    return outbox_row(requested, event_id=new_id(), trace_context=None)


@dataclass
class Environment:
    """What every row shares: the scratch database, the moto child, the queue, tenants and relays."""

    db: ScratchDatabase
    moto: psutil.Process
    queue_url: str
    tenants: list[UUID]
    owner: psycopg.Connection[Any]
    relays: list[Relay]
    floor_clients: list[TimedSqs]
    sqs: Any
    q: Any = field(default_factory=load_queries)

    def preload(self, count: int) -> set[str]:
        """``count`` unpublished events spread round-robin over the tenants; returns their ids."""
        rows = [requested_row(self.tenants[n % len(self.tenants)]) for n in range(count)]
        with self.owner.cursor() as cursor:
            for start in range(0, count, PRELOAD_ROWS_PER_TRANSACTION):
                with self.owner.transaction():
                    cursor.executemany(
                        self.q.insert_outbox_event, rows[start : start + PRELOAD_ROWS_PER_TRANSACTION]
                    )
        return {str(row["event_id"]) for row in rows}

    def commit_one(self) -> tuple[str, int]:
        """One event in a transaction of its own; returns its id and when the commit came back."""
        row = requested_row(self.tenants[secrets.randbelow(len(self.tenants))])
        with self.owner.transaction():
            self.owner.execute(self.q.insert_outbox_event, row)
        return str(row["event_id"]), time.perf_counter_ns()

    def queue_depth(self) -> int:
        attributes = self.sqs.get_queue_attributes(
            QueueUrl=self.queue_url, AttributeNames=["ApproximateNumberOfMessages"]
        )["Attributes"]
        return int(attributes["ApproximateNumberOfMessages"])

    def clear(self) -> None:
        """Empty outbox and queue, so the next row starts where this one did."""
        reset_accepted_work(self.db.url)
        self.sqs.purge_queue(QueueUrl=self.queue_url)

    def prebuilt_requests(self, count: int, per_request: int) -> list[list[dict[str, Any]]]:
        """``count`` events as the relay's publisher would send them, ``per_request`` entries a request."""
        capture = _CapturingSqs()
        shards = RelaySettings.model_fields["message_group_shards"].default
        publisher = SqsFifoPublisher(cast("SQSClient", capture), self.queue_url, shards)
        now = datetime.now(UTC)
        events = [
            OutboxEvent.model_validate({**row, "payload": row["payload"].obj, "created_at": now})
            for row in (requested_row(self.tenants[n % len(self.tenants)]) for n in range(count))
        ]
        for start in range(0, count, per_request):
            publisher.publish(events[start : start + per_request])
        return capture.requests


@contextmanager
def environment(config: Config, phases: Phases) -> Iterator[Environment]:
    with scratch_database() as db, moto_server() as moto_pid:
        with phases("migrations and tenants"):
            apply_migrations(db.url, REPO_ROOT / "migrations")
            queue_url = create_jobs_queues(QUEUE_NAME).url
            tenants = make_tenants(db.url, config.tenants)
        relays: list[Relay] = []
        try:
            with psycopg.connect(db.url, autocommit=True, prepare_threshold=None) as owner:
                relays = [Relay(db.url, queue_url) for _ in range(2)]
                floor = [TimedSqs(boto3.client("sqs"), Recorder()) for _ in range(2)]
                yield Environment(
                    db,
                    psutil.Process(moto_pid),
                    queue_url,
                    tenants,
                    owner,
                    relays,
                    floor,
                    boto3.client("sqs"),
                )
        finally:
            for relay in relays:
                relay.close()


# ------------------------------------------------------------------------------------------- statistics


def _ms(values_ns: Sequence[int]) -> list[float]:
    return [value / 1e6 for value in values_ns]


def call_drift(recorder: Recorder) -> float | None:
    """p50 of the last tenth of the calls over the first tenth: does a send cost more as the queue fills?"""
    durations = [end - start for start, end, _ in sorted(recorder.calls)]
    tenth = len(durations) // 10
    if tenth < 3:
        return None
    return statistics.median(durations[-tenth:]) / statistics.median(durations[:tenth])


class CpuMeter:
    """CPU seconds this process and the moto child spent during a row (both are single interpreters, so on
    a 2-core machine their sum against the wall time says how close the row came to saturating it)."""

    def __init__(self, moto: psutil.Process) -> None:
        self._moto = moto
        self._start = self._read()

    def _read(self) -> tuple[float, float]:
        own, moto = psutil.Process().cpu_times(), self._moto.cpu_times()
        return own.user + own.system, moto.user + moto.system

    def per_100(self, events: int) -> dict[str, float]:
        own, moto = self._read()
        return {
            "bench": (own - self._start[0]) * 1000 * 100 / events,
            "moto": (moto - self._start[1]) * 1000 * 100 / events,
        }


def breakdown(recorder: Recorder, concurrency: int) -> dict[str, Any]:
    """Where the relays' time went, summed over their threads: claim and mark transactions (pool checkout to
    commit), SendMessageBatch calls, and the rest (validating rows, building message bodies, routing)."""
    busy = sum(end - start for start, end, _ in recorder.runs)
    claim = sum(recorder.transactions["claim"])
    mark = sum(recorder.transactions["mark"])
    sqs = sum(end - start for start, end, _ in recorder.calls)
    other = busy - claim - mark - sqs
    batches = len(recorder.transactions["mark"])
    return {
        "relays": concurrency,
        "runs": len(recorder.runs),
        "batches": batches,
        "busy_s": busy / 1e9,
        "share": {
            name: value / busy if busy else 0.0
            for name, value in (("claim", claim), ("sqs", sqs), ("mark", mark), ("other", other))
        },
        # Per batch of up to 100 events: the whole batch's calls together, each transaction alone.
        "per_batch_ms": {
            "claim_p50": statistics.median(_ms(recorder.transactions["claim"])),
            "sqs_mean": sqs / 1e6 / batches if batches else 0.0,
            "mark_p50": statistics.median(_ms(recorder.transactions["mark"])) if batches else 0.0,
            "other_mean": other / 1e6 / batches if batches else 0.0,
        },
    }


@dataclass
class Measurement:
    """One row in one round."""

    events: int
    wall_s: float
    per_s: float
    calls: int
    call_ms: dict[str, float]
    call_drift: float | None
    cpu_ms_per_100: dict[str, float]
    checks: dict[str, Any]
    breakdown: dict[str, Any] | None = None


@dataclass
class Row:
    name: str
    kind: str  # floor | relay
    concurrency: int
    rounds: list[Measurement] = field(default_factory=list)
    per_s: dict[str, float] = field(default_factory=dict)
    call_ms: dict[str, float] = field(default_factory=dict)
    # Per round, this row over the floor at the same concurrency (relay rows) or over the same kind at c=1.
    vs_floor: dict[str, float] | None = None
    vs_c1: dict[str, float] | None = None
    _call_samples: list[float] = field(default_factory=list, repr=False)

    def add(self, measurement: Measurement, recorder: Recorder) -> None:
        self.rounds.append(measurement)
        self._call_samples.extend(_ms([end - start for start, end, _ in recorder.calls]))
        rates = [m.per_s for m in self.rounds]
        self.per_s = {"median": statistics.median(rates), "min": min(rates), "max": max(rates)}
        self.call_ms = percentile_table(self._call_samples)

    def as_json(self) -> dict[str, Any]:
        document = asdict(self)
        document.pop("_call_samples")
        return document


def _ratio_spread(values: Sequence[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def compare(rows: dict[str, Row]) -> dict[str, Any]:
    """Ratios taken round by round (rows of one round ran back to back), then summarized."""

    def per_round(top: Row, bottom: Row) -> dict[str, float]:
        return _ratio_spread([a.per_s / b.per_s for a, b in zip(top.rounds, bottom.rounds, strict=True)])

    for concurrency in (1, 2):
        relay, floor = rows[f"relay c={concurrency}"], rows[f"floor c={concurrency}"]
        relay.vs_floor = per_round(relay, floor)
    rows["relay c=2"].vs_c1 = per_round(rows["relay c=2"], rows["relay c=1"])
    rows["floor c=2"].vs_c1 = per_round(rows["floor c=2"], rows["floor c=1"])
    return {
        "relay_over_floor_c1": rows["relay c=1"].vs_floor,
        "relay_over_floor_c2": rows["relay c=2"].vs_floor,
        "relay_c2_over_c1": rows["relay c=2"].vs_c1,
        "floor_c2_over_c1": rows["floor c=2"].vs_c1,
        # The same call made from inside a relay or from a bare loop: does the relay make it slower?
        "relay_call_p50_over_floor_call_p50_c1": rows["relay c=1"].call_ms["p50"]
        / rows["floor c=1"].call_ms["p50"],
        "relay_call_p50_over_floor_call_p50_c2": rows["relay c=2"].call_ms["p50"]
        / rows["floor c=2"].call_ms["p50"],
    }


# ------------------------------------------------------------------------------------------------- rows


class Bench:
    def __init__(self, env: Environment, config: Config, console: Console) -> None:
        self.env = env
        self.config = config
        self.console = console
        self.rows: dict[str, Row] = {
            name: Row(name, kind, concurrency)
            for name, kind, concurrency in (
                ("floor c=1", "floor", 1),
                ("relay c=1", "relay", 1),
                ("floor c=2", "floor", 2),
                ("relay c=2", "relay", 2),
            )
        }

    def _print(self, name: str, measurement: Measurement) -> None:
        problems = {k: v for k, v in measurement.checks.items() if k not in INFORMATIVE_CHECKS and v}
        self.console.print(
            f"  {name:<12} {measurement.per_s:8.0f} events/s  {measurement.wall_s:6.2f} s  "
            f"call p50 {measurement.call_ms['p50']:6.2f} ms  p99 {measurement.call_ms['p99']:6.2f} ms"
            + (f"  [red]{problems}[/red]" if problems else "")
        )

    # -- the floor

    def floor(
        self, concurrency: int, requests: list[list[dict[str, Any]]], pace: float | None = None
    ) -> tuple[Measurement, Recorder]:
        """The requests as fast as ``concurrency`` threads send them, or one at a time ``pace`` a second."""
        recorder = Recorder()
        clients = self.env.floor_clients[:concurrency]
        for client in clients:
            client.recorder = recorder

        def send(entries: list[dict[str, Any]], client: TimedSqs) -> tuple[int, int, str]:
            client.send_message_batch(QueueUrl=self.env.queue_url, Entries=entries)
            return 0, 0, ""

        sent = sum(len(entries) for entries in requests)
        meter = CpuMeter(self.env.moto)
        if pace is None:
            run_concurrently(requests, concurrency, send, clients)
        else:
            began = time.perf_counter()
            for n, entries in enumerate(requests):
                time.sleep(max(0.0, began + n / pace - time.perf_counter()))
                send(entries, clients[0])
        cpu = meter.per_100(sent)
        wall = (max(end for _, end, _ in recorder.calls) - min(start for start, _, _ in recorder.calls)) / 1e9
        checks = {
            "sent": sent,
            "confirmed_once": sum(1 for n in recorder.confirmations.values() if n == 1),
            "confirmed_twice_or_more": sum(1 for n in recorder.confirmations.values() if n > 1),
            "failed_entries": sum(recorder.failed_entries.values()),
            "failed_calls": sum(recorder.call_errors.values()),
            "queue_depth_after": self.env.queue_depth(),
        }
        measurement = Measurement(
            events=sent,
            wall_s=wall,
            per_s=sent / wall,
            calls=len(recorder.calls),
            call_ms=percentile_table(_ms([end - start for start, end, _ in recorder.calls])),
            call_drift=call_drift(recorder),
            cpu_ms_per_100=cpu,
            checks=checks,
        )
        self.env.clear()
        return measurement, recorder

    # -- the relay

    def relay(self, concurrency: int, events: int) -> tuple[Measurement, Recorder]:
        expected = self.env.preload(events)
        recorder = Recorder()
        relays = self.env.relays[:concurrency]
        for relay in relays:
            relay.record_into(recorder)
        start_together = threading.Barrier(concurrency)

        def work(relay: Relay) -> None:
            start_together.wait()
            relay.drain()

        meter = CpuMeter(self.env.moto)
        threads = [threading.Thread(target=work, args=(relay,)) for relay in relays]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        cpu = meter.per_100(events)
        wall = (max(end for _, end, _ in recorder.runs) - min(start for start, _, _ in recorder.runs)) / 1e9
        confirmed = set(recorder.confirmations)
        work_left = count_accepted_work(self.env.db.url)
        checks = {
            "expected": len(expected),
            "confirmed_once": sum(1 for n in recorder.confirmations.values() if n == 1),
            # The double publish the claim must prevent: one event confirmed by SQS more than once.
            "confirmed_twice_or_more": sum(1 for n in recorder.confirmations.values() if n > 1),
            "never_confirmed": len(expected - confirmed),
            "not_from_backlog": len(confirmed - expected),
            "unpublished_in_db": work_left["unpublished"],
            "relay_failures": recorder.relay_failed,
            "queue_depth_after": self.env.queue_depth(),
        }
        # The queue holds one message per event when nothing was lost; a duplicate would be deduplicated.
        checks["queue_depth_mismatch"] = checks["queue_depth_after"] != len(expected)
        measurement = Measurement(
            events=events,
            wall_s=wall,
            per_s=events / wall,
            calls=len(recorder.calls),
            call_ms=percentile_table(_ms([end - start for start, end, _ in recorder.calls])),
            call_drift=call_drift(recorder),
            cpu_ms_per_100=cpu,
            checks=checks,
            breakdown=breakdown(recorder, concurrency),
        )
        self.env.clear()
        return measurement, recorder

    # -- the plan

    def warm_up(self) -> None:
        """Every pool, client, connection and code path once, before anything is timed."""
        events = self.config.warmup_events
        requests = self.env.prebuilt_requests(events, SQS_BATCH_LIMIT)
        for concurrency in (1, 2):
            self.floor(concurrency, requests)
            self.relay(concurrency, events)
        self.floor(1, self.env.prebuilt_requests(20, 1))

    def run_rounds(self) -> None:
        events = self.config.events
        for number in range(1, self.config.rounds + 1):
            self.console.print(f"[bold]Round {number}/{self.config.rounds}[/bold]: {events} events a row")
            for concurrency in (1, 2):
                # Built afresh for every row: new event ids each time, as every relay row has.
                requests = self.env.prebuilt_requests(events, SQS_BATCH_LIMIT)
                measured, recorder = self.floor(concurrency, requests)
                self.rows[f"floor c={concurrency}"].add(measured, recorder)
                self._print(f"floor c={concurrency}", measured)
                measured, recorder = self.relay(concurrency, events)
                self.rows[f"relay c={concurrency}"].add(measured, recorder)
                self._print(f"relay c={concurrency}", measured)

    def single_message(self) -> dict[str, Any]:
        """One-entry calls back to back, and paced like the latency row's events: a call that follows
        20 ms of quiet wakes both processes first, which a tight loop never does."""
        result: dict[str, Any] = {"paced_rate_per_s": self.config.latency_rate}
        for name, pace in (("back_to_back", None), ("paced", self.config.latency_rate)):
            requests = self.env.prebuilt_requests(self.config.single_calls, 1)
            measured, _ = self.floor(1, requests, pace)
            result[name] = asdict(measured)
            self.console.print(
                f"  single message, {name.replace('_', ' ')}: call p50 {measured.call_ms['p50']:.2f} ms, "
                f"p99 {measured.call_ms['p99']:.2f} ms"
            )
        return result

    def latency(self, single: dict[str, Any]) -> dict[str, Any]:
        """Commit-to-publish under a steady trickle, the relay woken by a nudge after each commit.

        The producer is this thread and writes the outbox row alone: accept_job's own work (~15 ms of this
        interpreter per job) would compete with the relay loop for the interpreter lock, which the API and
        the relay, two Lambdas, never do.
        """
        config, env = self.config, self.env
        relay = env.relays[0]
        recorder = Recorder(keep_bodies=True)
        relay.record_into(recorder)
        nudger = EventNudger()
        loop = Loop("bench-relay", relay.run_once, SWEEP_SECONDS, wake=nudger.event)
        total = max(1, round(config.latency_rate * config.latency_seconds))
        commits: dict[str, int] = {}
        loop.start()
        meter = CpuMeter(env.moto)
        try:
            began = time.perf_counter()
            for n in range(total):
                # Paced by a schedule, not a fixed sleep, so that a slow commit does not lower the rate.
                delay = began + n / config.latency_rate - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
                event_id, committed = env.commit_one()
                commits[event_id] = committed
                nudger.nudge()
            produced_s = time.perf_counter() - began
            # Anything a nudge missed is the sweep's, at most a minute later: waiting that long finds out.
            deadline = time.monotonic() + SWEEP_SECONDS + 5
            while time.monotonic() < deadline and not recorder.confirmed_all(set(commits)):
                time.sleep(0.01)
        finally:
            loop.stop()
        cpu = meter.per_100(total)
        published = {
            event_id: recorder.first_confirmed[event_id]
            for event_id in commits
            if event_id in recorder.first_confirmed
        }
        to_confirm = [(published[event_id][0] - commits[event_id]) / 1e6 for event_id in published]
        stored_age = [
            (
                confirmed_at - OutboxEvent.model_validate_json(recorder.bodies[event_id]).created_at
            ).total_seconds()
            * 1000
            for event_id, (_, confirmed_at) in published.items()
        ]
        runs = recorder.runs
        claimed = [count for _, _, count in runs]
        result: dict[str, Any] = {
            "events": total,
            "rate_per_s": config.latency_rate,
            "achieved_rate_per_s": total / produced_s,
            "commit_to_confirm_ms": percentile_table(to_confirm),
            "created_at_to_confirm_ms": percentile_table(stored_age),
            "relay_runs": len(runs),
            "events_per_run": statistics.fmean(claimed) if claimed else 0.0,
            # A nudge that lands while a run is already publishing its event wakes one more run for nothing.
            "empty_runs": sum(1 for count in claimed if count == 0),
            "calls": len(recorder.calls),
            "call_ms": percentile_table(_ms([end - start for start, end, _ in recorder.calls])),
            "unpublished": total - len(published),
            # Over the one-entry call's p50 made at the same pace, and back to back.
            "vs_single_message_p50": {
                name: percentile_table(to_confirm)["p50"] / single[name]["call_ms"]["p50"]
                for name in ("paced", "back_to_back")
            },
            "cpu_ms_per_100": cpu,
            "breakdown": breakdown(recorder, 1),
            "checks": {
                "confirmed_twice_or_more": sum(1 for n in recorder.confirmations.values() if n > 1),
                "relay_failures": recorder.relay_failed,
            },
        }
        latency = result["commit_to_confirm_ms"]
        self.console.print(
            f"  latency: {total} events at {result['achieved_rate_per_s']:.1f}/s, "
            f"p50 {latency['p50']:.2f} ms, p99 {latency['p99']:.2f} ms, max {latency['max']:.2f} ms"
        )
        env.clear()
        return result


# ------------------------------------------------------------------------------------------------ output


def _x(value: float | None) -> str:
    return "" if value is None else f"{value:.2f}x"


def _checks(row: Row) -> str:
    totals: Counter[str] = Counter()
    for measurement in row.rounds:
        for key, value in measurement.checks.items():
            if key not in INFORMATIVE_CHECKS or key == "confirmed_once":
                totals[key] += int(value)
    problems = {k: v for k, v in totals.items() if k not in INFORMATIVE_CHECKS and v}
    text = f"{totals['confirmed_once']} once"
    return text + (f" [red]{dict(problems)}[/red]" if problems else ", 0 twice, 0 lost")


def print_report(
    console: Console,
    config: Config,
    rows: dict[str, Row],
    single: dict[str, Any],
    latency: dict[str, Any],
) -> None:
    table = Table(
        title=f"Outbox relay vs the SendMessageBatch floor, moto SQS FIFO over HTTP "
        f"({config.events} events a row, median of {config.rounds} round(s))",
        caption="x floor: relay events/s over floor messages/s at the same concurrency, per round; "
        "x c=1: the same kind at c=2 over c=1; drift: call p50 of the last tenth over the first",
    )
    for column in (
        "row",
        "events/s",
        "range",
        "x floor",
        "x c=1",
        "call p50",
        "call p99",
        "drift",
        "published",
    ):
        table.add_column(column, justify="left" if column in ("row", "published") else "right")
    for row in rows.values():
        drifts = [m.call_drift for m in row.rounds if m.call_drift is not None]
        table.add_row(
            row.name,
            f"{row.per_s['median']:.0f}",
            f"{row.per_s['min']:.0f}-{row.per_s['max']:.0f}",
            _x(row.vs_floor["median"] if row.vs_floor else None),
            _x(row.vs_c1["median"] if row.vs_c1 else None),
            f"{row.call_ms['p50']:.2f}",
            f"{row.call_ms['p99']:.2f}",
            _x(statistics.median(drifts) if drifts else None),
            _checks(row),
        )
    console.print(table)

    where = Table(
        title="Where the relays' time goes: per batch (up to 100 events), and shares of relay thread time",
        caption="claim / mark: transaction from pool checkout to commit; sqs calls: a batch's "
        "SendMessageBatch calls together; other: row validation, message bodies, routing; cpu: ms of CPU "
        "per 100 events in this process (for the latency loop, the producer's too) and in moto",
    )
    for column in (
        "row",
        "claim p50",
        "sqs calls",
        "mark p50",
        "other",
        "claim",
        "sqs",
        "mark",
        "other ",
        "cpu bench",
        "cpu moto",
    ):
        where.add_column(column, justify="left" if column == "row" else "right")

    def add_breakdown(name: str, parts: list[dict[str, Any]], cpus: list[dict[str, float]]) -> None:
        per_batch = {
            k: statistics.median(p["per_batch_ms"][k] for p in parts) for k in parts[0]["per_batch_ms"]
        }
        share = {k: statistics.median(p["share"][k] for p in parts) for k in parts[0]["share"]}
        cpu = {k: statistics.median(c[k] for c in cpus) for k in ("bench", "moto")}
        where.add_row(
            name,
            f"{per_batch['claim_p50']:.2f} ms",
            f"{per_batch['sqs_mean']:.1f} ms",
            f"{per_batch['mark_p50']:.2f} ms",
            f"{per_batch['other_mean']:.1f} ms",
            f"{share['claim']:.0%}",
            f"{share['sqs']:.0%}",
            f"{share['mark']:.0%}",
            f"{share['other']:.0%}",
            f"{cpu['bench']:.0f}",
            f"{cpu['moto']:.0f}",
        )

    for row in (rows["relay c=1"], rows["relay c=2"]):
        parts = [m.breakdown for m in row.rounds if m.breakdown]
        add_breakdown(row.name, parts, [m.cpu_ms_per_100 for m in row.rounds])
    add_breakdown("latency loop", [latency["breakdown"]], [latency["cpu_ms_per_100"]])
    for row in (rows["floor c=1"], rows["floor c=2"]):
        cpu = {k: statistics.median(m.cpu_ms_per_100[k] for m in row.rounds) for k in ("bench", "moto")}
        where.add_row(row.name, "", "", "", "", "", "", "", "", f"{cpu['bench']:.0f}", f"{cpu['moto']:.0f}")
    console.print(where)

    rate = single["paced_rate_per_s"]
    lat = Table(
        title=f"Commit to SQS confirmation, nudged relay, {latency['events']} events at "
        f"{latency['achieved_rate_per_s']:.1f}/s (ms)",
        caption="stored: SQS confirmation - created_at as the database stored it (the producer's transaction "
        f"start); x floor: p50 over the p50 of a one-message SendMessageBatch paced at {rate:g}/s",
    )
    for column in (
        "measure",
        "p50",
        "p90",
        "p99",
        "max",
        "x floor",
        "runs",
        "events/run",
        "empty runs",
        "unpublished",
    ):
        lat.add_column(column, justify="left" if column == "measure" else "right")

    def add_latency(measure: str, ms: dict[str, float], *rest: str) -> None:
        lat.add_row(measure, *(f"{ms[k]:.2f}" for k in ("p50", "p90", "p99", "max")), *rest)

    add_latency(
        "commit -> confirmed",
        latency["commit_to_confirm_ms"],
        _x(latency["vs_single_message_p50"]["paced"]),
        str(latency["relay_runs"]),
        f"{latency['events_per_run']:.2f}",
        str(latency["empty_runs"]),
        str(latency["unpublished"]),
    )
    add_latency("stored created_at -> confirmed", latency["created_at_to_confirm_ms"])
    add_latency(f"floor: SendMessageBatch of 1, {rate:g}/s", single["paced"]["call_ms"], "1.00x")
    back_to_back = single["back_to_back"]["call_ms"]
    add_latency(
        "floor: SendMessageBatch of 1, back to back",
        back_to_back,
        _x(back_to_back["p50"] / single["paced"]["call_ms"]["p50"]),
    )
    console.print(lat)


# -------------------------------------------------------------------------------------------------- main


def parse_args(argv: Sequence[str] | None) -> Config:
    parser = argparse.ArgumentParser(prog="python -m bench.relay", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="smoke run: 500 events a row, 1 round, 6 s of latency"
    )
    parser.add_argument("--events", type=int, help="events per throughput row (default 5000; quick 500)")
    parser.add_argument("--rounds", type=int, help="rounds of the throughput rows (default 3; quick 1)")
    parser.add_argument("--tenants", type=int, default=8, help="tenants the events belong to (default 8)")
    parser.add_argument(
        "--rate", type=float, default=50.0, help="latency row: events per second (default 50)"
    )
    parser.add_argument(
        "--seconds", type=float, help="latency row: seconds of production (default 20; quick 6)"
    )
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="where the JSON report goes")
    args = parser.parse_args(argv)
    events = args.events or (500 if args.quick else 5000)
    rounds = args.rounds or (1 if args.quick else 3)
    seconds = args.seconds or (6.0 if args.quick else 20.0)
    if events < 100 or rounds < 1 or args.tenants < 1 or args.rate <= 0 or seconds <= 0:
        parser.error("need at least 100 events, 1 round, 1 tenant and a positive rate and duration")
    return Config(
        events=events,
        rounds=rounds,
        tenants=args.tenants,
        warmup_events=200,
        single_calls=100 if args.quick else 300,
        latency_rate=args.rate,
        latency_seconds=seconds,
        quick=args.quick,
        output=args.output,
    )


def main(argv: Sequence[str] | None = None) -> int:
    config = parse_args(argv)
    # SystemExit unwinds through the finally blocks: the scratch database is dropped, the moto child stopped.
    signal.signal(signal.SIGTERM, lambda signum, _: sys.exit(128 + signum))
    console = Console(width=None if sys.stdout.isatty() else 150)
    started = datetime.now(UTC)
    clock_start = time.perf_counter()
    phases = Phases()
    with phases("environment"), environment(config, phases) as env:
        console.print(
            f"Database: fresh scratch database on the {env.db.source} server; moto in a child process"
        )
        machine = machine_info(env.db)
        machine["aws"] = (
            "moto server on 127.0.0.1 in a child process (bench.relay_aws: SQS sends no longer rescan the "
            "queue; purge allowed at any time)"
        )
        bench = Bench(env, config, console)
        with phases("warm-up"):
            bench.warm_up()
        with phases("throughput"):
            bench.run_rounds()
        with phases("single message"):
            single = bench.single_message()
        with phases("latency"):
            latency = bench.latency(single)
        machine["load_average_after"] = load_average()
    ratios = compare(bench.rows)

    document = {
        "schema": SCHEMA,
        "command": command_line("bench.relay", argv),
        "started_at": started.isoformat(),
        "duration_s": time.perf_counter() - clock_start,
        "machine": machine,
        "config": {
            **{k: v for k, v in asdict(config).items() if k != "output"},
            "relay_settings": {
                name: RelaySettings.model_fields[name].default
                for name in (
                    "relay_batch_size",
                    "relay_max_batches",
                    "relay_claim_seconds",
                    "message_group_shards",
                )
            },
            "sqs_batch_limit": SQS_BATCH_LIMIT,
            "sweep_seconds": SWEEP_SECONDS,
            "preload_rows_per_transaction": PRELOAD_ROWS_PER_TRANSACTION,
            "rows": ROW_DESCRIPTIONS,
        },
        "phases_s": phases.seconds,
        "throughput": [row.as_json() for row in bench.rows.values()],
        "single_message": single,
        "latency": latency,
        "ratios": ratios,
    }
    write_json(config.output, document)
    print_report(console, config, bench.rows, single, latency)
    console.print(f"Report written to {config.output} in {document['duration_s']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
