"""Open-loop load benchmark: requests arrive at fixed instants at 1.5x the provider's capacity, through the
API and the workers of the local system, whether or not earlier requests have been answered.

What it shows (issue 14): the backlog grows at the rate the arrival and service rates predict, acceptance
latency stays flat as it grows, 429s and 503s appear only where admission says (a low-quota tenant's limit,
then the system backlog cap, each at a predicted time), and every accepted job is found at the end.
``python -m bench.openloop`` writes bench/results/openloop.json; ``--quick`` is a smoke run. This is a
report, not a test: targets are printed next to the figures, never asserted.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import queue
import secrets
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
from psycopg.rows import dict_row
from rich.console import Console
from rich.table import Table

from bench.acceptance import JOBS_PATH, Phases, bench_queries, job_body, scratch_database, stop_on_sigterm
from bench.drain import Provider, capacity, percentile
from bench.drain import queries as drain_queries
from bench.machine import command_line, describe_machine, load_average, write_json
from tollgate.core.clock import new_id
from tollgate.core.job_states import FINISHED_STATES, JobState
from tollgate.settings import REPO_ROOT, AdmissionSettings
from tollgate.tenants.keys import create_tenant
from tollgate_dev.local.client import ApiClient
from tollgate_dev.local.logs import logs_into
from tollgate_dev.local.runtime import LocalStack

BENCH_DIR = Path(__file__).resolve().parent
DEFAULT_OUTPUT = BENCH_DIR / "results" / "openloop.json"
SCHEMA = "tollgate.bench.openloop/v1"
# The local system logs a line per request and per job; they go here rather than between the tables.
LOG_FILE = REPO_ROOT / ".tollgate" / "openloop.log"

# Calls in flight bind, as they do for slow LLM calls: 8 in flight at 2 s each is 4 jobs/s. Requests and
# tokens per minute leave room (10 jobs/s, ~19 jobs/s at ~5,100 reserved tokens a job).
PROVIDER = Provider(
    requests_per_minute=600, tokens_per_minute=6_000_000, max_concurrency=8, latency_mean_s=2.0
)
WORKERS = 2
SLOTS = 6  # 12 slots for 8 calls in flight: slots never bind, the budget does
OVERLOAD = 1.5
TENANTS = 20
# Every LOW_EVERY-th arrival is the low-quota tenant's: 1 a second at 6 arrivals/s.
LOW_EVERY = 6
LOW_QUOTA = 8
LATENCY_WINDOW_S = 10.0
# Database timestamps and the client's clock come from one machine, but a commit lands a little after the
# timestamp it writes; admission is judged with this much slack either way.
TOLERANCE_S = 0.25

TARGETS = {
    "backlog_slope_within": 0.20,  # measured / predicted - 1, either way
    "latency_last_over_first_max": 1.5,
    "completions_min_share_of_capacity": 0.90,
    "send_lag_p99_max_s": 0.05,
}

PROBLEM_QUOTA = "tenant-over-quota"
PROBLEM_BACKLOG = "system-overloaded"
TERMINAL = {state.value for state in FINISHED_STATES}
OUTCOME_OF_STATE = {
    JobState.SUCCEEDED.value: "succeeded",
    JobState.REVIEW_REQUIRED.value: "review",
    JobState.FAILED_TERMINAL.value: "failed",
    JobState.CANCELLED.value: "cancelled",
}


# ------------------------------------------------------------------------------------------ arrivals


@dataclass(frozen=True)
class Arrival:
    index: int
    at_s: float  # intended send time, seconds after the run's start
    tenant: int  # 0 .. tenants-1 for the regular tenants; ``tenants`` is the low-quota one


def arrival_schedule(rate: float, duration_s: float, tenants: int, low_every: int) -> list[Arrival]:
    """Fixed instants i / rate for the whole duration. Every ``low_every``-th arrival goes to the low-quota
    tenant (none when 0); the others go round the regular tenants in turn."""
    arrivals = []
    regular = 0
    for index in range(math.floor(rate * duration_s + 1e-9)):
        if low_every and index % low_every == low_every - 1:
            tenant = tenants
        else:
            tenant, regular = regular % tenants, regular + 1
        arrivals.append(Arrival(index, index / rate, tenant))
    return arrivals


# --------------------------------------------------------------------------------------------- model


def max_min_share(capacity_per_s: float, demands: Sequence[float]) -> float:
    """The service rate each backlogged tenant gets when capacity is shared fairly (water-filling): a
    tenant asking for less than the share gets what it asks, the rest split what is left equally."""
    remaining, waiting = capacity_per_s, sorted(demands)
    while waiting:
        share = remaining / len(waiting)
        if waiting[0] >= share:
            return share
        remaining -= waiting.pop(0)
    return math.inf


@dataclass(frozen=True)
class Model:
    """What the rates predict: the low-quota tenant fills its quota, then the backlog grows more slowly until
    it reaches the system cap, after which it stays there and the excess is refused with 503."""

    arrival_rate: float
    low_rate: float
    tenants: int
    capacity: float
    latency_s: float
    low_quota: int
    system_max_backlog: int

    @property
    def regular_rate(self) -> float:
        return self.arrival_rate - self.low_rate

    @property
    def low_service_rate(self) -> float:
        # Once at its quota the low tenant always has work waiting, so it asks for as much as it can get.
        per_regular = self.regular_rate / self.tenants
        return min(self.low_rate, max_min_share(self.capacity, [per_regular] * self.tenants + [math.inf]))

    @property
    def quota_full_s(self) -> float:
        """When the low tenant's unfinished jobs reach its quota: its first 429 is due then."""
        filling = self.low_rate - self.low_service_rate
        return self.low_quota / filling if filling > 0 else math.inf

    @property
    def growth_before_quota(self) -> float:
        return self.arrival_rate - self.capacity

    @property
    def growth_after_quota(self) -> float:
        return self.regular_rate + self.low_service_rate - self.capacity

    def accepted_by(self, t: float) -> float:
        before = min(t, self.quota_full_s)
        return self.arrival_rate * before + max(0.0, t - before) * (self.regular_rate + self.low_service_rate)

    def uncapped_backlog(self, t: float) -> float:
        # The first jobs finish one provider latency after the run starts; from then on at capacity.
        accepted = self.accepted_by(t)
        return max(0.0, accepted - self.capacity * max(0.0, t - self.latency_s))

    @property
    def cap_reached_s(self) -> float:
        """When the backlog reaches the system cap, so its first 503 is due (found by stepping the model)."""
        t, step = 0.0, 0.01
        while t < 24 * 3600:
            if self.uncapped_backlog(t) >= self.system_max_backlog:
                return t
            t += step
        return math.inf

    def backlog(self, t: float) -> float:
        return min(float(self.system_max_backlog), self.uncapped_backlog(t))

    def refusals(self, duration_s: float) -> dict[str, float]:
        """How many 429s and 503s the rates predict over the run's arrivals."""
        quota_from, cap_from = min(self.quota_full_s, duration_s), min(self.cap_reached_s, duration_s)
        return {
            "429": (self.low_rate - self.low_service_rate) * (duration_s - quota_from),
            "503": max(0.0, self.growth_after_quota) * (duration_s - cap_from),
        }


def backlog_for_cap_at(model: Model, t: float) -> int:
    """The system cap that the model's backlog reaches at time ``t``."""
    return max(1, round(model.uncapped_backlog(t)))


# ------------------------------------------------------------------------------------------- figures


def slope(points: Sequence[tuple[float, float]]) -> float | None:
    """Least-squares slope of (t, value) points; None with fewer than three."""
    if len(points) < 3:
        return None
    xs, ys = zip(*points, strict=True)
    if len(set(xs)) < 2:
        return None
    return statistics.linear_regression(xs, ys).slope


def fit_window(model: Model, duration_s: float, first_503_s: float | None) -> tuple[float, float]:
    """Where the backlog should grow in a straight line: after the low tenant's quota is full and the first
    jobs have finished, before the cap (predicted or seen, whichever is first). When the run is too short for
    that stretch, from the first completions on, across the bend."""
    start = max(model.latency_s + 1.0, model.quota_full_s)
    end = min(duration_s, model.cap_reached_s, first_503_s if first_503_s is not None else math.inf)
    end -= 1.0
    if end - start < 5.0:
        start = model.latency_s + 1.0
    return start, max(start, end)


def percentiles_ms(values_s: Sequence[float]) -> dict[str, float | None]:
    def at(q: float) -> float | None:
        value = percentile(values_s, q)
        return None if value is None else value * 1000

    return {"count": len(values_s), "p50_ms": at(0.50), "p99_ms": at(0.99)}


def latency_windows(
    records: Sequence[Mapping[str, Any]], width_s: float, until_s: float
) -> list[dict[str, Any]]:
    """Acceptance latency (202s, send to answer) in windows of the send time."""
    windows = []
    start = 0.0
    while start < until_s - 1e-9:
        end = min(start + width_s, until_s)
        latencies = [
            r["done_s"] - r["sent_s"] for r in records if r["status"] == 202 and start <= r["sent_s"] < end
        ]
        windows.append({"from_s": start, "to_s": end, **percentiles_ms(latencies)})
        start = end
    return windows


def last_over_first(windows: Sequence[Mapping[str, Any]], key: str) -> float | None:
    measured = [w for w in windows if w[key] is not None]
    if len(measured) < 2 or not measured[0][key]:
        return None
    return float(measured[-1][key]) / float(measured[0][key])


def send_lag(records: Sequence[Mapping[str, Any]], lag_ok_s: float) -> dict[str, Any]:
    """How late the client sent each request against its instant; a late client is not an open loop."""
    lags = [r["sent_s"] - r["at_s"] for r in records]
    sent = sorted(r["sent_s"] for r in records)
    achieved = (len(sent) - 1) / (sent[-1] - sent[0]) if len(sent) > 1 and sent[-1] > sent[0] else None
    p99 = percentile(lags, 0.99)
    return {
        "requests": len(records),
        "p50_s": percentile(lags, 0.50),
        "p99_s": p99,
        "max_s": max(lags) if lags else None,
        "late_over_10ms": sum(1 for lag in lags if lag > 0.010),
        "achieved_rate_per_s": achieved,
        "kept_schedule": p99 is not None and p99 <= lag_ok_s,
    }


# --------------------------------------------------------------------------------------- explanation


@dataclass(frozen=True)
class JobRow:
    job_id: str
    tenant: int
    key: str
    state: str
    created_s: float
    finished_s: float | None


def explain_accepted(records: Sequence[Mapping[str, Any]], jobs: Iterable[JobRow]) -> dict[str, Any]:
    """Every 202's job found under its key, with the same id, in a state; no refused request made a job.

    ``accepted`` must equal the outcomes plus ``still_pending``; any missing, mismatched or extra job breaks
    ``adds_up``."""
    by_key = {job.key: job for job in jobs}
    outcomes: Counter[str] = Counter()
    missing, wrong_id = 0, 0
    accepted = [r for r in records if r["status"] == 202]
    for record in accepted:
        job = by_key.get(record["key"])
        if job is None:
            missing += 1
        elif job.job_id != record["job_id"]:
            wrong_id += 1
        else:
            outcomes[OUTCOME_OF_STATE.get(job.state, "still_pending")] += 1
    refused = [r for r in records if r["status"] in (429, 503)]
    unanswered = [r for r in records if r["status"] not in (202, 429, 503)]
    answered_keys = {r["key"] for r in accepted}
    counts = {
        name: outcomes[name] for name in ("succeeded", "review", "failed", "cancelled", "still_pending")
    }
    result = {
        "accepted": len(accepted),
        **counts,
        "missing": missing,
        "wrong_job_id": wrong_id,
        "refused": len(refused),
        "refused_with_a_job": sum(1 for r in refused if r["key"] in by_key),
        "unanswered": len(unanswered),
        "unanswered_with_a_job": sum(1 for r in unanswered if r["key"] in by_key),
        # A job whose request was not answered 202: made by a request the client saw fail, or by nobody.
        "jobs_without_a_202": sum(1 for key in by_key if key not in answered_keys),
        "still_pending_states": dict(
            Counter(by_key[r["key"]].state for r in accepted if _pending(by_key, r))
        ),
    }
    result["adds_up"] = (
        len(accepted) == sum(counts.values())
        and not missing
        and not wrong_id
        and not result["refused_with_a_job"]
        and result["jobs_without_a_202"] == result["unanswered_with_a_job"]
    )
    return result


def _pending(by_key: Mapping[str, JobRow], record: Mapping[str, Any]) -> bool:
    job = by_key.get(record["key"])
    return job is not None and job.job_id == record["job_id"] and job.state not in TERMINAL


def unfinished_bounds(
    jobs: Sequence[JobRow], start_s: float, end_s: float, slack_s: float
) -> tuple[int, int]:
    """Fewest and most of these jobs that can have been unfinished at some instant between a request's send
    and its answer: admission counted at one such instant, and the bounds bracket what it can have seen."""
    fewest = most = 0
    for job in jobs:
        finished = math.inf if job.finished_s is None else job.finished_s
        if job.created_s < end_s + slack_s and finished > start_s - slack_s:
            most += 1
            if job.created_s < start_s - slack_s and finished > end_s + slack_s:
                fewest += 1
    return fewest, most


def check_admission(
    records: Sequence[Mapping[str, Any]],
    jobs: Sequence[JobRow],
    *,
    low_tenant: int,
    low_quota: int,
    tenant_quota: int,
    system_max_backlog: int,
    slack_s: float = TOLERANCE_S,
) -> dict[str, Any]:
    """Whether each answer is the one admission owed at that moment, judged from the jobs' own timestamps.

    A 429 must be the low tenant's, for its job count, while its unfinished jobs can have been at its quota;
    a 503 must say the backlog is full while the system's unfinished jobs can have been at the cap; a 202
    must have come while both were surely below their limits."""
    by_tenant: dict[int, list[JobRow]] = {}
    for job in jobs:
        by_tenant.setdefault(job.tenant, []).append(job)
    verdicts: dict[str, Counter[str]] = {"429": Counter(), "503": Counter(), "202": Counter()}
    examples: list[dict[str, Any]] = []

    def judge(kind: str, record: Mapping[str, Any], ok: bool, why: str) -> None:
        verdicts[kind]["matched" if ok else "unmatched"] += 1
        if not ok and len(examples) < 10:
            examples.append({"status": record["status"], "sent_s": record["sent_s"], "why": why})

    for record in records:
        start, end = record["sent_s"], record["done_s"]
        tenant = record["tenant"]
        quota = low_quota if tenant == low_tenant else tenant_quota
        if record["status"] == 429:
            _, most = unfinished_bounds(by_tenant.get(tenant, []), start, end, slack_s)
            ok = (
                tenant == low_tenant
                and record["problem"] == PROBLEM_QUOTA
                and record["limit_dimension"] == "jobs"
                and most >= quota
            )
            judge(
                "429",
                record,
                ok,
                f"tenant {tenant}, {record['problem']}, at most {most} of {quota} unfinished",
            )
        elif record["status"] == 503:
            _, most = unfinished_bounds(jobs, start, end, slack_s)
            ok = record["problem"] == PROBLEM_BACKLOG and most >= system_max_backlog
            judge(
                "503", record, ok, f"{record['problem']}, at most {most} of {system_max_backlog} unfinished"
            )
        elif record["status"] == 202:
            own = [job for job in by_tenant.get(tenant, []) if job.key != record["key"]]
            fewest_own, _ = unfinished_bounds(own, start, end, slack_s)
            others = [job for job in jobs if job.key != record["key"]]
            fewest_all, _ = unfinished_bounds(others, start, end, slack_s)
            ok = fewest_own < quota and fewest_all < system_max_backlog
            judge("202", record, ok, f"at least {fewest_own} of {quota} (tenant), {fewest_all} (system)")
    return {
        kind: {"matched": counter["matched"], "unmatched": counter["unmatched"]}
        for kind, counter in verdicts.items()
    } | {"examples": examples}


# -------------------------------------------------------------------------------------------- client


def send_open_loop(
    base_url: str, plan: Sequence[tuple[float, str, str, int]], start_at: float, threads: int
) -> list[dict[str, Any]]:
    """Runs in the client process: sends plan[n] = (at_s, api key, Idempotency-Key, body index) at
    ``start_at + at_s`` (time.monotonic, which every process on the machine shares), from a pool of threads.

    The dispatcher hands each request to an idle thread at its instant and never waits for an answer; if
    every thread is busy the request waits in the queue, and its send time says so."""
    bodies = [job_body(body_index) for _, _, _, body_index in plan]
    clients: dict[str, ApiClient] = {}
    for _, api_key, _, _ in plan:
        clients.setdefault(api_key, ApiClient(base_url, api_key, timeout=60.0))
    due: queue.SimpleQueue[int | None] = queue.SimpleQueue()
    records: list[dict[str, Any]] = [{} for _ in plan]

    def work() -> None:
        while (n := due.get()) is not None:
            at_s, api_key, key, _ = plan[n]
            sent = time.monotonic()
            record: dict[str, Any] = {"at_s": at_s, "sent_s": sent - start_at, "key": key}
            try:
                response = clients[api_key].request(
                    "POST",
                    JOBS_PATH,
                    raw_body=bodies[n],
                    headers={"Content-Type": "application/json", "Idempotency-Key": key},
                )
            except OSError as error:
                record.update(done_s=time.monotonic() - start_at, status=f"error: {type(error).__name__}")
            else:
                record.update(done_s=time.monotonic() - start_at, **_answer(response.status, response))
            records[n] = record

    pool = [threading.Thread(target=work, daemon=True) for _ in range(threads)]
    for thread in pool:
        thread.start()
    for n, (at_s, _, _, _) in enumerate(plan):
        delay = start_at + at_s - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        due.put(n)
    for _ in pool:
        due.put(None)
    for thread in pool:
        thread.join()
    return records


def _answer(status: int, response: Any) -> dict[str, Any]:
    answer: dict[str, Any] = {
        "status": status,
        "retry_after": response.header("Retry-After"),
        "job_id": None,
        "problem": None,
        "limit_dimension": None,
    }
    try:
        body = json.loads(response.body)
    except ValueError:
        return answer
    if not isinstance(body, dict):
        return answer
    if status == 202:
        answer["job_id"] = body.get("job_id")
    else:
        answer["problem"] = str(body.get("type", "")).rsplit("/", 1)[-1] or None
        answer["limit_dimension"] = body.get("limit_dimension")
    return answer


def client_ready() -> float:
    """The spawned client imports what it needs once, before the schedule starts."""
    return time.monotonic()


# ---------------------------------------------------------------------------------------------- run


@dataclass(frozen=True)
class Config:
    duration_s: float
    drain_s: float
    overload: float
    tenants: int
    low_every: int
    low_quota: int
    cap_at: float
    system_max_backlog: int | None
    client_threads: int
    warmup_jobs: int
    quick: bool
    output: Path


@dataclass
class Tenant:
    number: int
    tenant_id: str
    api_key: str


class BacklogSampler(threading.Thread):
    """The backlog once a second on the run's clock, from the counters admission reads and a recount."""

    def __init__(self, db_url: str, start_at: float) -> None:
        super().__init__(name="backlog-sampler", daemon=True)
        self.db_url, self.start_at = db_url, start_at
        self.samples: list[list[float]] = []
        self.stop_event = threading.Event()

    def run(self) -> None:
        query = bench_queries().openloop_backlog_sample
        with psycopg.connect(self.db_url, autocommit=True, row_factory=dict_row) as conn:
            tick = 0
            while not self.stop_event.is_set():
                wait = self.start_at + tick - time.monotonic()
                if wait > 0 and self.stop_event.wait(wait):
                    break
                at = time.monotonic() - self.start_at
                row = conn.execute(query).fetchone()
                assert row is not None
                self.samples.append(
                    [round(at, 3), row["counted"], row["unfinished"], row["running"], row["finished"]]
                )
                tick += 1

    def latest(self) -> list[float] | None:
        return self.samples[-1] if self.samples else None


def new_tenant(stack: LocalStack, number: int, name: str) -> Tenant:
    assert stack.system_db is not None
    created = create_tenant(stack.system_db, name, new_id)
    return Tenant(number, str(created.tenant_id), created.api_key)


def make_tenants(stack: LocalStack, db_url: str, config: Config) -> list[Tenant]:
    """The regular tenants and, last, the low-quota one (its quota set as the owner: no API sets it)."""
    run = secrets.token_hex(3)
    tenants = [
        new_tenant(stack, number, f"openloop-{run}-{'low' if number == config.tenants else number}")
        for number in range(config.tenants + 1)
    ]
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(
            bench_queries().openloop_set_tenant_quota,
            {"tenant_id": tenants[-1].tenant_id, "max_pending_jobs": config.low_quota},
        )
    return tenants


def warm_up(stack: LocalStack, db_url: str, tenant: Tenant, count: int, console: Console) -> None:
    """A few jobs through the whole system before the clock starts, so the first window does not measure
    connection pools and first imports; waits until they are finished and the backlog is empty again."""
    client = ApiClient(stack.api_url, tenant.api_key)
    for n in range(count):
        client.request(
            "POST",
            JOBS_PATH,
            raw_body=job_body(10_000_000 + n),
            headers={"Content-Type": "application/json", "Idempotency-Key": f"warmup-{secrets.token_hex(6)}"},
        )
    query = bench_queries().openloop_backlog_sample
    deadline = time.monotonic() + 60
    with psycopg.connect(db_url, autocommit=True, row_factory=dict_row) as conn:
        while time.monotonic() < deadline:
            row = conn.execute(query).fetchone()
            assert row is not None
            if row["counted"] == 0 and row["unfinished"] == 0:
                return
            time.sleep(0.25)
    console.print("[yellow]warm-up jobs still unfinished after 60 s; the run starts anyway[/yellow]")


def load_jobs(db_url: str, tenants: Sequence[Tenant], wall_at_start: float) -> list[JobRow]:
    number = {t.tenant_id: t.number for t in tenants}
    with psycopg.connect(db_url, row_factory=dict_row) as conn:
        rows = conn.execute(bench_queries().openloop_jobs).fetchall()
    return [
        JobRow(
            job_id=str(row["job_id"]),
            tenant=number.get(str(row["tenant_id"]), -2),
            key=row["idempotency_key"],
            state=row["state"],
            created_s=row["created_at"].timestamp() - wall_at_start,
            finished_s=row["finished_at"].timestamp() - wall_at_start if row["finished_at"] else None,
        )
        for row in rows
    ]


def reserved_tokens(db_url: str) -> float | None:
    with psycopg.connect(db_url, row_factory=dict_row) as conn:
        row = conn.execute(bench_queries().openloop_reserved_tokens).fetchone()
    return None if row is None else row["mean"]


def attempt_figures(db_url: str) -> dict[str, Any]:
    """Attempts by outcome and the mean provider call as the workers saw it (the drain benchmark's queries):
    what a job costs beyond the simulated latency shows as completions below capacity."""
    q = drain_queries()
    with psycopg.connect(db_url, row_factory=dict_row) as conn:
        outcomes = {r["outcome"]: int(r["attempts"]) for r in conn.execute(q.attempt_outcomes)}
        call = conn.execute(q.call_latency).fetchone()
    return {"outcomes": outcomes, "call_latency_s": None if call is None else call["mean_s"]}


def run(config: Config, console: Console) -> dict[str, Any]:
    phases = Phases()
    limits = capacity(PROVIDER, reserved_tokens=5_100)
    rate = config.overload * limits["binding"]
    low_rate = rate / config.low_every if config.low_every else 0.0
    tenant_quota = AdmissionSettings.model_fields["tenant_max_pending_jobs"].default
    draft = Model(
        rate, low_rate, config.tenants, limits["binding"], PROVIDER.latency_mean_s, config.low_quota, 10**9
    )
    cap = config.system_max_backlog or backlog_for_cap_at(draft, config.cap_at * config.duration_s)
    model = Model(
        rate, low_rate, config.tenants, limits["binding"], PROVIDER.latency_mean_s, config.low_quota, cap
    )
    arrivals = arrival_schedule(rate, config.duration_s, config.tenants, config.low_every)
    admission = {"system_max_backlog": cap}
    budget = {
        "execution_slots": SLOTS,
        "provider_requests_per_minute": PROVIDER.requests_per_minute,
        "provider_tokens_per_minute": PROVIDER.tokens_per_minute,
        "provider_max_in_flight": PROVIDER.max_concurrency,
    }
    console.print(
        f"Open loop: {rate:.1f} arrivals/s ({config.overload}x a capacity of {limits['binding']:.1f} jobs/s) "
        f"for {config.duration_s:.0f} s over {config.tenants} tenants + 1 with a quota of "
        f"{config.low_quota}; system backlog cap {cap}"
    )
    started = datetime.now(UTC)
    clock_start = time.perf_counter()
    with phases("database"), scratch_database() as db, tempfile.TemporaryDirectory() as data_dir:
        machine = describe_machine(
            db_url=db.url,
            database=db.source,
            aws="moto server on 127.0.0.1, in the benchmark process",
            provider="simulated provider on 127.0.0.1, in the benchmark process",
        )
        # Its own data folder: the discovery file of a `tollgate local up` someone runs is left alone.
        stack = LocalStack(
            port=0,
            database_url=db.url,
            data_dir=Path(data_dir),
            api_overrides=admission,
            workers=WORKERS,
            worker_overrides=budget,
            simulator_config=PROVIDER.simulator(seed=7),
        )
        with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as client:
            try:
                with phases("stack start"):
                    stack.start()
                    ready = client.submit(client_ready)
                    tenants = make_tenants(stack, db.url, config)
                    warmup_tenant = new_tenant(stack, -1, f"openloop-warmup-{secrets.token_hex(3)}")
                    ready.result()
                with phases("warm-up"):
                    warm_up(stack, db.url, warmup_tenant, config.warmup_jobs, console)
                run_id = secrets.token_hex(4)
                plan = [
                    (a.at_s, tenants[a.tenant].api_key, f"openloop-{run_id}-{a.index}", a.index)
                    for a in arrivals
                ]
                start_at = time.monotonic() + 2.0
                wall_at_start = time.time() + (start_at - time.monotonic())
                sampler = BacklogSampler(db.url, start_at)
                sampler.start()
                with phases("arrivals"):
                    records = client.submit(
                        send_open_loop, stack.api_url, plan, start_at, config.client_threads
                    ).result()
                with phases("drain"):
                    until = time.monotonic() + config.drain_s
                    while time.monotonic() < until:
                        latest = sampler.latest()
                        if latest is not None and latest[1] == 0 and latest[0] > config.duration_s:
                            break
                        time.sleep(0.25)
                sampler.stop_event.set()
                sampler.join()
                machine["load_average_after"] = load_average()
                provider_stats = asdict(stack.simulator.stats) if stack.simulator else None
            finally:
                with phases("stack stop"):
                    stack.stop()
        with phases("explain"):
            jobs = load_jobs(db.url, [*tenants, warmup_tenant], wall_at_start)
            run_jobs = [j for j in jobs if j.key.startswith(f"openloop-{run_id}-")]
            mean_tokens = reserved_tokens(db.url)
            attempts = attempt_figures(db.url)
    for arrival, record in zip(arrivals, records, strict=True):
        record["tenant"] = arrival.tenant
    return analyse(
        config=config,
        model=model,
        limits=capacity(PROVIDER, mean_tokens) if mean_tokens else limits,
        records=records,
        jobs=jobs,
        run_jobs=run_jobs,
        samples=sampler.samples,
        tenant_quota=tenant_quota,
        admission=admission,
        budget=budget,
        mean_tokens=mean_tokens,
        provider_stats=provider_stats,
        attempts=attempts,
        machine=machine,
        phases=phases.seconds,
        started=started,
        duration_s=time.perf_counter() - clock_start,
    )


def _first(records: Sequence[Mapping[str, Any]], status: int) -> float | None:
    times = [r["sent_s"] for r in records if r["status"] == status]
    return min(times) if times else None


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def analyse(
    *,
    config: Config,
    model: Model,
    limits: Mapping[str, float],
    records: Sequence[dict[str, Any]],
    jobs: Sequence[JobRow],
    run_jobs: Sequence[JobRow],
    samples: Sequence[Sequence[float]],
    tenant_quota: int,
    admission: Mapping[str, Any],
    budget: Mapping[str, Any],
    mean_tokens: float | None,
    provider_stats: Mapping[str, Any] | None,
    attempts: Mapping[str, Any],
    machine: dict[str, Any],
    phases: Mapping[str, float],
    started: datetime,
    duration_s: float,
) -> dict[str, Any]:
    """The results document: the prediction, and beside each part of it what the run measured."""
    duration = config.duration_s
    statuses = Counter(str(r["status"]) for r in records)
    first_429, first_503 = _first(records, 429), _first(records, 503)
    fit_from, fit_to = fit_window(model, duration, first_503)
    in_fit = [s for s in samples if fit_from <= s[0] <= fit_to]
    predicted_slope = (
        (model.backlog(fit_to) - model.backlog(fit_from)) / (fit_to - fit_from) if fit_to > fit_from else None
    )
    measured_slope = slope([(s[0], s[1]) for s in in_fit])
    # The same model at the completion rate the run reached in that stretch: what is left of the gap once
    # the shortfall against nominal capacity is accounted for.
    served = slope([(s[0], s[4]) for s in in_fit])
    at_served = replace(model, capacity=served) if served else None
    served_slope = (
        (at_served.uncapped_backlog(fit_to) - at_served.uncapped_backlog(fit_from)) / (fit_to - fit_from)
        if at_served is not None and fit_to > fit_from
        else None
    )
    recount_slope = slope([(s[0], s[2]) for s in in_fit])
    done_from = model.latency_s + 1.0
    completions = slope([(s[0], s[4]) for s in samples if done_from <= s[0] <= duration])
    during = [s for s in samples if s[0] <= duration]
    at_end = min(during, key=lambda s: abs(s[0] - duration)) if during else None
    windows = latency_windows(records, LATENCY_WINDOW_S, duration)
    refused = [r["done_s"] - r["sent_s"] for r in records if r["status"] in (429, 503)]
    predicted_refusals = model.refusals(duration)
    predicted_accepted = len(records) - sum(predicted_refusals.values())
    explanation = explain_accepted(records, run_jobs)
    judged = check_admission(
        records,
        jobs,
        low_tenant=config.tenants,
        low_quota=config.low_quota,
        tenant_quota=tenant_quota,
        system_max_backlog=model.system_max_backlog,
    )
    retry_after = Counter(str(r["retry_after"]) for r in records if r["status"] in (429, 503))
    return {
        "schema": SCHEMA,
        "command": command_line("bench.openloop", None),
        "started_at": started.isoformat(),
        "duration_s": duration_s,
        "machine": machine,
        "config": {
            "quick": config.quick,
            "arrivals_s": duration,
            "drain_s": config.drain_s,
            "overload": config.overload,
            "arrival_rate_per_s": model.arrival_rate,
            "tenants": config.tenants,
            "low_tenant": {
                "every": config.low_every,
                "rate_per_s": model.low_rate,
                "max_pending_jobs": config.low_quota,
            },
            "tenant_max_pending_jobs": tenant_quota,
            "system_max_backlog": model.system_max_backlog,
            "cap_at": None if config.system_max_backlog else config.cap_at,
            "client": "ApiClient (one connection per request) on threads of a spawned process",
            "client_threads": config.client_threads,
            "warmup_jobs": config.warmup_jobs,
            "provider": asdict(PROVIDER),
            "workers": WORKERS,
            "worker_overrides": dict(budget),
            "api_overrides": dict(admission),
            "latency_window_s": LATENCY_WINDOW_S,
            "admission_slack_s": TOLERANCE_S,
        },
        "targets": TARGETS,
        "capacity": {**limits, "reserved_tokens_per_job": mean_tokens},
        "prediction": {
            "low_service_rate_per_s": model.low_service_rate,
            "quota_full_s": _finite(model.quota_full_s),
            "cap_reached_s": _finite(model.cap_reached_s),
            "growth_before_quota_per_s": model.growth_before_quota,
            "growth_after_quota_per_s": model.growth_after_quota,
            "backlog_at_end": model.backlog(duration),
            "statuses": {"202": predicted_accepted, **predicted_refusals},
        },
        "phases_s": dict(phases),
        "client": send_lag(records, TARGETS["send_lag_p99_max_s"]),
        "statuses": dict(sorted(statuses.items())),
        "refusals": {
            "first_429_s": first_429,
            "first_503_s": first_503,
            "retry_after": dict(retry_after),
            "problems": dict(
                Counter(f"{r['status']} {r['problem']}" for r in records if r["status"] in (429, 503))
            ),
            "by_tenant_429": dict(Counter(str(r["tenant"]) for r in records if r["status"] == 429)),
            **judged,
        },
        "backlog": {
            "fit": {
                "from_s": fit_from,
                "to_s": fit_to,
                "samples": len(in_fit),
                "predicted_per_s": predicted_slope,
                "completions_per_s": served,
                "predicted_at_completions_per_s": served_slope,
                "measured_per_s": measured_slope,
                "recount_per_s": recount_slope,
                "measured_over_predicted": measured_slope / predicted_slope
                if measured_slope is not None and predicted_slope
                else None,
            },
            "at_end_of_arrivals": {
                "predicted": model.backlog(duration),
                "measured": at_end[1] if at_end else None,
            },
            "max": max((s[1] for s in samples), default=None),
            "counter_drift_max": max((abs(s[1] - s[2]) for s in samples), default=None),
            "columns": ["t_s", "counted", "unfinished", "running", "finished"],
            "samples": [list(s) for s in samples],
        },
        "completions": {
            "from_s": done_from,
            "to_s": duration,
            "per_s": completions,
            "share_of_capacity": completions / limits["binding"] if completions is not None else None,
            # At the cap the backlog stops growing; the workers should go on at the same rate.
            "at_cap_per_s": slope(
                [(s[0], s[4]) for s in samples if first_503 is not None and first_503 <= s[0] <= duration]
            ),
        },
        "latency": {
            "windows": windows,
            "last_over_first": {
                "p50": last_over_first(windows, "p50_ms"),
                "p99": last_over_first(windows, "p99_ms"),
            },
            "accepted": percentiles_ms([r["done_s"] - r["sent_s"] for r in records if r["status"] == 202]),
            "refused": percentiles_ms(refused),
        },
        "explanation": explanation,
        "provider": provider_stats,
        "attempts": dict(attempts),
    }


# -------------------------------------------------------------------------------------------- report


def _f(value: float | None, digits: int = 2, unit: str = "") -> str:
    return "-" if value is None else f"{value:.{digits}f}{unit}"


def print_report(console: Console, doc: Mapping[str, Any]) -> None:
    config, prediction, backlog = doc["config"], doc["prediction"], doc["backlog"]
    fit, refusals, latency, client = backlog["fit"], doc["refusals"], doc["latency"], doc["client"]
    table = Table(
        title=f"Open loop at {config['overload']}x capacity ({config['arrival_rate_per_s']:.1f} arrivals/s)"
    )
    for column in ("figure", "predicted / target", "measured"):
        table.add_column(column, justify="left" if column == "figure" else "right")
    table.add_row(
        f"backlog growth, {fit['from_s']:.0f}-{fit['to_s']:.0f} s",
        f"{_f(fit['predicted_per_s'])} jobs/s",
        f"{_f(fit['measured_per_s'])} jobs/s ({_f(fit['measured_over_predicted'])}x)",
    )
    table.add_row(
        "backlog at end of arrivals",
        _f(doc["backlog"]["at_end_of_arrivals"]["predicted"], 0),
        _f(doc["backlog"]["at_end_of_arrivals"]["measured"], 0),
    )
    table.add_row(
        "completions",
        f"{doc['capacity']['binding']:.2f} jobs/s",
        f"{_f(doc['completions']['per_s'])} jobs/s ({_f(doc['completions']['share_of_capacity'], 3)})",
    )
    table.add_row(
        "202 latency p50 / p99, last ÷ first window",
        f"≤ {TARGETS['latency_last_over_first_max']}x",
        f"{_f(latency['last_over_first']['p50'])}x / {_f(latency['last_over_first']['p99'])}x",
    )
    for status in ("202", "429", "503"):
        table.add_row(
            f"{status} answers", f"{prediction['statuses'][status]:.0f}", str(doc["statuses"].get(status, 0))
        )
    table.add_row(
        "first 429", f"{_f(prediction['quota_full_s'], 1)} s", f"{_f(refusals['first_429_s'], 1)} s"
    )
    table.add_row(
        "first 503", f"{_f(prediction['cap_reached_s'], 1)} s", f"{_f(refusals['first_503_s'], 1)} s"
    )
    for status in ("429", "503", "202"):
        judged = refusals[status]
        table.add_row(
            f"{status}s as admission says",
            "all",
            f"{judged['matched']} of {judged['matched'] + judged['unmatched']}",
        )
    table.add_row(
        "client send lag p50 / p99 / max",
        f"p99 ≤ {TARGETS['send_lag_p99_max_s'] * 1000:.0f} ms",
        " / ".join(_f(client[key] * 1000, 1) for key in ("p50_s", "p99_s", "max_s")) + " ms",
    )
    console.print(table)
    windows = Table(title="Acceptance latency (202s) by 10 s window of send time")
    for column in ("window", "202s", "p50 ms", "p99 ms"):
        windows.add_column(column, justify="right")
    for window in latency["windows"]:
        windows.add_row(
            f"{window['from_s']:.0f}-{window['to_s']:.0f} s",
            str(window["count"]),
            _f(window["p50_ms"], 1),
            _f(window["p99_ms"], 1),
        )
    console.print(windows)
    explanation = doc["explanation"]
    console.print(
        "Every accepted job explained: "
        + ("yes" if explanation["adds_up"] else "[red]NO[/red]")
        + f" ({explanation['accepted']} accepted = {explanation['succeeded']} succeeded + "
        f"{explanation['review']} review + {explanation['failed']} failed + "
        f"{explanation['cancelled']} cancelled + "
        f"{explanation['still_pending']} still pending; {explanation['missing']} missing, "
        f"{explanation['refused_with_a_job']} refused requests with a job)"
    )
    if not client["kept_schedule"]:
        console.print(
            f"[yellow]The client fell behind its schedule (p99 send lag {client['p99_s'] * 1000:.0f} ms): "
            "the arrivals were not fully open-loop.[/yellow]"
        )
    if refusals["examples"]:
        console.print(f"[red]Answers admission does not explain[/red]: {refusals['examples']}")


# ---------------------------------------------------------------------------------------------- main


def parse_args(argv: Sequence[str] | None) -> Config:
    parser = argparse.ArgumentParser(prog="python -m bench.openloop", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke run: 15 s of arrivals, 10 s of drain")
    parser.add_argument("--duration", type=float, default=90.0, help="seconds of arrivals (default 90)")
    parser.add_argument(
        "--drain", type=float, default=30.0, help="most seconds of drain after them (default 30)"
    )
    parser.add_argument(
        "--overload", type=float, default=OVERLOAD, help="arrival rate ÷ capacity (default 1.5)"
    )
    parser.add_argument("--tenants", type=int, default=TENANTS, help="regular tenants (default 20)")
    parser.add_argument(
        "--low-quota", type=int, default=LOW_QUOTA, help="the low tenant's unfinished-job quota"
    )
    parser.add_argument(
        "--cap-at",
        type=float,
        default=2 / 3,
        help="set the system backlog cap to the model's backlog at this share of the arrivals (default 2/3)",
    )
    parser.add_argument(
        "--system-max-backlog", type=int, default=None, help="the cap itself, instead of --cap-at"
    )
    parser.add_argument("--client-threads", type=int, default=16, help="client threads (default 16)")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="where the JSON report goes")
    args = parser.parse_args(argv)
    duration, drain = (15.0, 10.0) if args.quick else (args.duration, args.drain)
    if (
        duration < 5
        or args.tenants < 1
        or args.low_quota < 1
        or not 0 < args.cap_at <= 2
        or args.overload <= 0
    ):
        parser.error(
            "need at least 5 s of arrivals, 1 tenant, a quota of 1, 0 < --cap-at <= 2 and --overload > 0"
        )
    return Config(
        duration_s=duration,
        drain_s=drain,
        overload=args.overload,
        tenants=args.tenants,
        low_every=LOW_EVERY,
        low_quota=args.low_quota,
        cap_at=args.cap_at,
        system_max_backlog=args.system_max_backlog,
        client_threads=args.client_threads,
        warmup_jobs=8,
        quick=args.quick,
        output=args.output,
    )


def main(argv: Sequence[str] | None = None) -> int:
    config = parse_args(argv)
    signal.signal(signal.SIGTERM, stop_on_sigterm)
    console = Console(width=None if sys.stdout.isatty() else 150)
    console.print(f"The local system's logs go to {LOG_FILE.relative_to(REPO_ROOT)}")
    with logs_into(LOG_FILE):
        doc = run(config, console)
    doc["command"] = command_line("bench.openloop", argv)
    write_json(config.output, doc)
    print_report(console, doc)
    console.print(f"Report written to {config.output} in {doc['duration_s']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
