"""Real-model accuracy benchmark: sample invoices through the worker's own attempt code, against a small model
served on 127.0.0.1 in the OpenAI wire format, and the outcome the worker chose set against the truth.

``python -m bench.model_accuracy [--limit N] [--samples-seed S]`` installs the model and engine when needed
(bench/model/install.py), starts bench/model/server/server.mjs on a free port, and runs each sample the way
production does: accepted with ``accept_job`` into a scratch PostgreSQL database, claimed with the worker's
fair claim under a budget permit, and executed by ``run_attempt`` (provider call through the worker's
OpenAI client with OPENAI_BASE_URL at the local server, strict parsing, the validation policy, the fenced
commit). Each job's stored result is compared with the sample's truth on every field that reaches an ERP
(tollgate_dev/accuracy.py), which gives the confusion table of outcome against truth: correct + SUCCEEDED,
wrong + REVIEW_REQUIRED (caught), wrong + SUCCEEDED (silently wrong, the target is 0) and correct +
REVIEW_REQUIRED, split into needless (the printed document passes the policy) and expected (it does not,
such as an invoice whose printed total does not add up). Results go to bench/results/model_accuracy.json.
Not part of `make bench` or `make test`: `make bench-model` runs it. A report, not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import queue
import secrets
import signal
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO
from uuid import UUID

import psycopg
from psycopg.rows import dict_row
from pydantic import SecretStr, ValidationError
from rich.console import Console
from rich.table import Table

from bench.machine import command_line, describe_machine, load_average, write_json
from bench.model import install
from tollgate.accept.models import CreateJobRequest
from tollgate.accept.service import AcceptanceDeps, accept_job
from tollgate.core.clock import SystemClock, new_id
from tollgate.db import Database, build_database, load_queries
from tollgate.db.migrations import apply_migrations
from tollgate.execution.attempt import ExecutionDeps, claim_within_budget, run_attempt
from tollgate.execution.limiter.local import InProcessLimiter
from tollgate.jobtypes.invoice_extraction.prompt import PROMPT_VERSION
from tollgate.jobtypes.invoice_extraction.schema import SCHEMA_NAME, Invoice
from tollgate.jobtypes.invoice_extraction.validation import KnownSupplier, TenantPolicy, validate_invoice
from tollgate.jobtypes.registry import JOB_TYPES
from tollgate.settings import REPO_ROOT, ApiSettings, DatabaseSettings, WorkerSettings
from tollgate.tenants.keys import create_tenant
from tollgate.tenants.suppliers import add_supplier
from tollgate.wiring import build_api, build_execution
from tollgate_dev.accuracy import AccuracyReport, compare_invoice
from tollgate_dev.local.aws import LocalAws, create_documents_bucket
from tollgate_dev.local.postgres import scratch_database
from tollgate_dev.samples import (
    KINDS,
    SUPPLIERS,
    SampleInvoice,
    expected_invoice,
    generate_invoices,
    request_body,
)

BENCH_DIR = Path(__file__).resolve().parent
DEFAULT_OUTPUT = BENCH_DIR / "results" / "model_accuracy.json"
SCHEMA = "tollgate.bench.model_accuracy/v1"
SERVER_SCRIPT = BENCH_DIR / "model" / "server" / "server.mjs"
BUCKET = "tollgate-documents-bench-model"
POOL = "bench-model"
DEFAULT_COUNT = 40  # eight of each sample kind, interleaved: --limit 5 already has every kind
DEFAULT_SEED = 15
# Loading 1.1 GB and mapping it takes seconds on a quiet machine; a busy one can take minutes.
READY_TIMEOUT_S = 600.0
TERMINAL = ("SUCCEEDED", "REVIEW_REQUIRED", "FAILED_TERMINAL", "CANCELLED")

# The confusion table's cells, in the order they are shown.
CORRECT_SUCCEEDED = "correct_succeeded"
WRONG_CAUGHT = "wrong_review_required"
WRONG_SILENT = "wrong_succeeded"
CORRECT_NEEDLESS_REVIEW = "correct_review_needless"
CORRECT_EXPECTED_REVIEW = "correct_review_expected"
INVALID_OUTPUT = "failed_invalid_output"
FAILED_OTHER = "failed_other"
CELLS = (
    CORRECT_SUCCEEDED,
    WRONG_CAUGHT,
    WRONG_SILENT,
    CORRECT_NEEDLESS_REVIEW,
    CORRECT_EXPECTED_REVIEW,
    INVALID_OUTPUT,
    FAILED_OTHER,
)


@dataclass(frozen=True)
class Config:
    count: int
    limit: int | None
    samples_seed: int
    structured_output: str
    max_attempts: int
    max_output_tokens: int
    timeout_s: float
    cache: Path
    output: Path


# ------------------------------------------------------------------------------------------- pure logic


def classify(state: str, correct: bool, truth_passes_policy: bool, last_outcome: str | None) -> str:
    """The confusion-table cell of one job: where the worker put it, against whether its result is right."""
    if state == "SUCCEEDED":
        return CORRECT_SUCCEEDED if correct else WRONG_SILENT
    if state == "REVIEW_REQUIRED":
        if not correct:
            return WRONG_CAUGHT
        return CORRECT_NEEDLESS_REVIEW if truth_passes_policy else CORRECT_EXPECTED_REVIEW
    return INVALID_OUTPUT if last_outcome == "invalid_output" else FAILED_OTHER


def _rate(part: int, whole: int) -> float | None:
    return part / whole if whole else None


def confusion(cells: Iterable[str]) -> dict[str, Any]:
    """Counts per cell and the rates the issue asks for, each with the denominator it is a share of."""
    counts = Counter(cells)
    table = {cell: counts.get(cell, 0) for cell in CELLS}
    unknown = set(counts) - set(CELLS)
    if unknown:
        raise ValueError(f"unknown cells: {sorted(unknown)}")
    wrong = table[WRONG_CAUGHT] + table[WRONG_SILENT]
    # Correct extractions of documents that pass the policy: the ones that should have gone straight through.
    should_pass = table[CORRECT_SUCCEEDED] + table[CORRECT_NEEDLESS_REVIEW]
    total = sum(table.values())
    return {
        "documents": total,
        "cells": table,
        "wrong": wrong,
        "silently_wrong": table[WRONG_SILENT],
        "caught_rate": _rate(table[WRONG_CAUGHT], wrong),
        "silently_wrong_rate": _rate(table[WRONG_SILENT], total),
        "needless_review_rate": _rate(table[CORRECT_NEEDLESS_REVIEW], should_pass),
        "straight_through_rate": _rate(table[CORRECT_SUCCEEDED], total),
        "failed": table[INVALID_OUTPUT] + table[FAILED_OTHER],
    }


def spread(values: Sequence[float]) -> dict[str, float | int | None]:
    """Mean, p50, p95 and max of ``values`` (nearest rank, as the other benchmarks report them)."""
    ordered = sorted(values)
    if not ordered:
        return {"n": 0, "mean": None, "p50": None, "p95": None, "max": None}
    return {
        "n": len(ordered),
        "mean": statistics.fmean(ordered),
        "p50": statistics.median(ordered),
        "p95": ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))],
        "max": ordered[-1],
    }


def listening_url(line: str) -> str | None:
    """The server's readiness line, "listening on http://127.0.0.1:PORT", as its base URL."""
    prefix = "listening on http://127.0.0.1:"
    text = line.strip()
    if text.startswith(prefix) and text[len(prefix) :].isdigit():
        return text[len("listening on ") :]
    return None


def pick_samples(count: int, seed: int, limit: int | None) -> list[SampleInvoice]:
    """The fixed set: ``count`` samples cycling through every kind, from ``seed``; ``--limit`` takes a prefix
    of it, so a smoke run measures the same documents the full run starts with."""
    samples = generate_invoices(count, seed=seed, kinds=KINDS)
    return samples if limit is None else samples[:limit]


def sample_policy() -> TenantPolicy:
    """What the benchmark's tenant knows: every sample supplier and currency, so only the document and the
    extraction decide the outcome."""
    return TenantPolicy(
        frozenset(supplier.currency for supplier in SUPPLIERS),
        tuple(KnownSupplier(supplier.name, supplier.iban) for supplier in SUPPLIERS),
    )


def truth_passes_policy(sample: SampleInvoice, policy: TenantPolicy) -> bool:
    """Would a perfect extraction of this document go straight through? Not when the printed document itself
    breaks a rule (a total that does not add up): then review is the right outcome even for a correct one."""
    return validate_invoice(expected_invoice(sample), sample.pages, policy).passed


# --------------------------------------------------------------------------------------------- the server


@dataclass
class ModelServer:
    """The Node server as a child process; its stderr goes to a log file in the cache."""

    process: subprocess.Popen[str]
    url: str
    log_path: Path

    def stats(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"{self.url}/stats", timeout=10) as answer:  # 127.0.0.1 only
            document: dict[str, Any] = json.loads(answer.read())
            return document


def _read_lines(stream: TextIO, lines: queue.Queue[str | None]) -> None:
    for line in stream:
        lines.put(line)
    lines.put(None)


def _log_tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


@contextmanager
def model_server(
    installed: install.Installation, *, accept_json_schema: bool, console: Console
) -> Iterator[ModelServer]:
    log_path = installed.engine_dir.parent / "server.log"
    command = [
        installed.node,
        str(SERVER_SCRIPT),
        "--model",
        str(installed.model_path),
        "--engine-dir",
        str(installed.engine_dir),
        "--port",
        "0",
        "--json-schema",
        "accept" if accept_json_schema else "reject",
    ]
    with log_path.open("w") as log:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log, text=True, cwd=REPO_ROOT)
    try:
        assert process.stdout is not None
        lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=_read_lines, args=(process.stdout, lines), daemon=True).start()
        console.print(f"Starting the model server (pid {process.pid}); log in {log_path}")
        url = _wait_until_listening(lines, process, log_path)
        console.print(f"Model server ready at {url}")
        yield ModelServer(process, url, log_path)
    finally:
        _stop(process)


def _wait_until_listening(
    lines: queue.Queue[str | None], process: subprocess.Popen[str], log_path: Path
) -> str:
    """Blocks until the server prints its readiness line; fails with the log's tail if it exits or never
    does."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while (left := deadline - time.monotonic()) > 0:
        try:
            line = lines.get(timeout=left)
        except queue.Empty:
            break
        if line is None:
            process.wait(10)
            raise RuntimeError(f"the model server exited ({process.returncode}):\n{_log_tail(log_path)}")
        if url := listening_url(line):
            return url
    raise RuntimeError(f"the model server was not ready in {READY_TIMEOUT_S:.0f} s:\n{_log_tail(log_path)}")


def _stop(process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


# ------------------------------------------------------------------------------------- the worker's path


@dataclass
class Environment:
    db_url: str
    db_source: str
    acceptance: AcceptanceDeps
    execution: ExecutionDeps
    tenant_id: UUID
    structured_output: dict[str, str]
    closers: list[Database] = field(default_factory=list)


def structured_output_setting(requested: str) -> tuple[dict[str, Any], dict[str, str]]:
    """The worker settings for ``requested``, and what the results file says about it.

    PROVIDER_STRUCTURED_OUTPUT arrives with the provider-modes work; until the worker has it, it sends
    OpenAI's json_schema, and the server is told to take that schema as json_object's (the results say so).
    """
    if "provider_structured_output" in WorkerSettings.model_fields:
        return {"provider_structured_output": requested}, {"requested": requested, "worker_sends": requested}
    return {}, {
        "requested": requested,
        "worker_sends": "json_schema",
        "note": "this worker has no PROVIDER_STRUCTURED_OUTPUT setting: it sends json_schema, and the server "
        "was started with --json-schema accept to constrain the output by that schema",
    }


@contextmanager
def environment(config: Config, server_url: str, model_name: str) -> Iterator[Environment]:
    """A scratch database with every migration, moto for the documents bucket, one tenant, and the worker's
    execution dependencies built by the production wiring, pointed at the local server."""
    data_dir = REPO_ROOT / ".tollgate" / "bench-model"
    with scratch_database(data_dir, "tollgate_bench_model") as scratch:
        apply_migrations(scratch.url, REPO_ROOT / "migrations")
        aws = LocalAws()
        aws.start()
        closers: list[Database] = []
        try:
            create_documents_bucket(BUCKET)
            api = build_api(
                ApiSettings(
                    database_url=SecretStr(scratch.url),
                    documents_bucket=BUCKET,
                    default_max_attempts=config.max_attempts,
                    max_output_tokens=config.max_output_tokens,
                )
            )
            closers.append(api.acceptance.db)
            system_db = build_database(
                DatabaseSettings(database_url=SecretStr(scratch.url), database_role="tollgate_system"),
                pool_name="bench-model",
            )
            closers.append(system_db)
            tenant = create_tenant(
                system_db,
                f"bench-model-{secrets.token_hex(3)}",
                new_id,
                allowed_currencies=sorted({supplier.currency for supplier in SUPPLIERS}),
            )
            for supplier in SUPPLIERS:
                add_supplier(system_db, tenant.tenant_id, supplier.name, supplier.iban, new_id)
            extra, described = structured_output_setting(config.structured_output)
            settings = WorkerSettings(
                database_url=SecretStr(scratch.url),
                job_queue_urls=dict.fromkeys(
                    JOB_TYPES, "unused: the benchmark claims from the database, without ingress"
                ),
                documents_bucket=BUCKET,
                openai_base_url=f"{server_url}/v1",
                # A placeholder, so no key from this environment is ever sent anywhere, even to 127.0.0.1.
                openai_api_key=SecretStr("local-model"),
                model_small=model_name,
                model_large=model_name,
                provider_pool=POOL,
                max_output_tokens=config.max_output_tokens,
                attempt_timeout_seconds=config.timeout_s,
                retry_base_seconds=1.0,
                worker_id=f"bench-model-{secrets.token_hex(3)}",
                **extra,
            )
            clock = SystemClock()
            # One call at a time: the server queues anyway, and the seconds per extraction stay one call's.
            limiter = InProcessLimiter(
                clock, requests_per_minute=10_000, tokens_per_minute=10**9, max_in_flight=1
            )
            execution = build_execution(settings, system_db, limiter=limiter)
            yield Environment(
                scratch.url,
                "DATABASE_URL" if scratch.server.startswith("on DATABASE_URL") else "embedded",
                api.acceptance,
                execution,
                tenant.tenant_id,
                described,
                closers,
            )
        finally:
            for db in closers:
                db.close()
            aws.stop()


def _rows(db_url: str, name: str, **params: Any) -> list[dict[str, Any]]:
    with psycopg.connect(db_url, row_factory=dict_row, autocommit=True) as conn:
        return conn.execute(getattr(load_queries(BENCH_DIR / "queries"), name), params).fetchall()


async def run_to_the_end(env: Environment, job_id: UUID, timeout_s: float) -> dict[str, Any]:
    """Claims and runs the job's attempts, as a worker slot does, until it is in a terminal state."""
    stop = asyncio.Event()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        (job,) = _rows(env.db_url, "model_job_outcome", job_id=job_id)
        if job["state"] in TERMINAL:
            return job
        claimed = await claim_within_budget(env.execution, tenant_cap=1, stop=stop)
        if claimed is not None:
            await run_attempt(env.execution, claimed.job, claimed.permit, stop=stop)
            continue
        # Nothing runnable yet: a retry's due time is in the future. Wait for it (a benchmark, not a test).
        due = job["next_attempt_at"]
        wait = (due - datetime.now(UTC)).total_seconds() if due is not None else 0.5
        await asyncio.sleep(min(max(wait, 0.05), 5.0))
    raise RuntimeError(f"job {job_id} did not finish in {timeout_s:.0f} s")


@dataclass
class Measured:
    sample: SampleInvoice
    state: str
    invoice: Invoice | None
    review_reasons: list[dict[str, Any]]
    attempts: list[dict[str, Any]]
    last_error: dict[str, Any] | None
    wall_s: float
    stored_result_invalid: str | None = None


async def run_sample(env: Environment, config: Config, sample: SampleInvoice) -> Measured:
    started = time.perf_counter()
    request = CreateJobRequest.model_validate(request_body(sample))
    accepted = accept_job(env.acceptance, env.tenant_id, f"bench-model-{secrets.token_hex(8)}", request)
    job_id = accepted.job.job_id
    # Every attempt may take the whole timeout, and retries wait a little between them.
    job = await run_to_the_end(env, job_id, config.timeout_s * config.max_attempts + 120)
    wall = time.perf_counter() - started
    results = _rows(env.db_url, "model_job_result", job_id=job_id)
    invoice, invalid = None, None
    if results:
        try:
            invoice = Invoice.model_validate(results[0]["result"])
        except ValidationError as error:  # stored by an older schema; counted, never hidden
            invalid = f"{error.error_count()} schema errors"
    return Measured(
        sample,
        job["state"],
        invoice,
        list(results[0]["review_reasons"]) if results else [],
        _rows(env.db_url, "model_job_attempts", job_id=job_id),
        job["last_error"],
        wall,
        invalid,
    )


async def run_samples(
    env: Environment, config: Config, samples: Sequence[SampleInvoice], server: ModelServer, console: Console
) -> list[Measured]:
    """One after another, in one event loop: the worker's async OpenAI client is bound to its loop."""
    measured = []
    for index, sample in enumerate(samples, 1):
        # A dead server would turn every remaining sample into a failed job; stop and show why instead.
        if server.process.poll() is not None:
            raise RuntimeError(
                f"the model server exited ({server.process.returncode}):\n{_log_tail(server.log_path)}"
            )
        item = await run_sample(env, config, sample)
        measured.append(item)
        calls = ", ".join(f"{a['outcome']} {(a['latency_ms'] or 0) / 1000:.1f} s" for a in item.attempts)
        console.print(f"  {index}/{len(samples)} {sample.kind:<18} {item.state:<16} {calls}")
    return measured


# ------------------------------------------------------------------------------------------------ the run


def document_row(measured: Measured, comparison_mismatches: Sequence[str], cell: str) -> dict[str, Any]:
    return {
        "invoice_number": measured.sample.invoice_number,
        "kind": measured.sample.kind,
        "state": measured.state,
        "cell": cell,
        "mismatches": list(comparison_mismatches),
        "review_reasons": sorted({str(r.get("code")) for r in measured.review_reasons}),
        "attempts": [
            {
                "outcome": a["outcome"],
                "latency_s": (a["latency_ms"] or 0) / 1000,
                "prompt_tokens": a["input_tokens"],
                "completion_tokens": a["output_tokens"],
                "error": (a["error"] or {}).get("detail") if a["error"] else None,
            }
            for a in measured.attempts
        ],
        "wall_s": measured.wall_s,
        # What the model wrote on the documents it got wrong: the mismatches name the fields, this the values.
        "extraction": measured.invoice.model_dump(mode="json")
        if measured.invoice is not None and comparison_mismatches
        else None,
        "last_error": measured.last_error,
        "stored_result_invalid": measured.stored_result_invalid,
    }


def summarize(measured: Sequence[Measured], policy: TenantPolicy) -> dict[str, Any]:
    report = AccuracyReport()
    cells: list[str] = []
    documents = []
    for item in measured:
        comparison = compare_invoice(item.invoice, expected_invoice(item.sample), item.sample.pages)
        last_outcome = item.attempts[-1]["outcome"] if item.attempts else None
        cell = classify(item.state, comparison.exact, truth_passes_policy(item.sample, policy), last_outcome)
        cells.append(cell)
        report.add(comparison, kind=item.sample.kind, outcome=item.state)
        documents.append(document_row(item, comparison.mismatches, cell))
    calls = [a for item in measured for a in item.attempts if a["latency_ms"] is not None]
    completion_tokens = sum(a["output_tokens"] or 0 for a in calls)
    call_seconds = sum(a["latency_ms"] for a in calls) / 1000
    return {
        "confusion": confusion(cells),
        "accuracy": report.as_dict(),
        "seconds_per_extraction": spread([a["latency_ms"] / 1000 for a in calls]),
        "seconds_per_document": spread([item.wall_s for item in measured]),
        "attempt_outcomes": dict(
            sorted(Counter(str(a["outcome"]) for item in measured for a in item.attempts).items())
        ),
        "tokens": {
            "prompt": sum(a["input_tokens"] or 0 for a in calls),
            "completion": completion_tokens,
            "completion_per_second": completion_tokens / call_seconds if call_seconds else None,
        },
        "documents": documents,
    }


def run(config: Config, console: Console) -> dict[str, Any]:
    started = datetime.now(UTC)
    clock_start = time.perf_counter()
    installed = install.ensure_installed(config.cache)
    samples = pick_samples(config.count, config.samples_seed, config.limit)
    policy = sample_policy()
    model_name = install.MODEL_FILE.removesuffix(".gguf")
    extra, _ = structured_output_setting(config.structured_output)
    with model_server(installed, accept_json_schema=not extra, console=console) as server:
        with environment(config, server.url, model_name) as env:
            machine = describe_machine(
                db_url=env.db_url, database=env.db_source, aws="moto (in process)", provider=server.url
            )
            kinds = ", ".join(f"{kind} {n}" for kind, n in Counter(s.kind for s in samples).items())
            console.print(
                f"{len(samples)} samples ({kinds}); the worker sends {env.structured_output['worker_sends']}"
            )
            measured = asyncio.run(run_samples(env, config, samples, server, console))
            structured = env.structured_output
        served = server.stats()
    summary = summarize(measured, policy)
    machine["load_average_after"] = load_average()
    return {
        "schema": SCHEMA,
        "started_at": started.isoformat(),
        "duration_s": time.perf_counter() - clock_start,
        "machine": machine,
        "model": {
            "name": install.MODEL_NAME,
            "file": install.MODEL_FILE,
            "quantization": install.QUANTIZATION,
            "bytes": install.MODEL_BYTES,
            "sha256": install.MODEL_SHA256,
            "source": f"PyPI {install.PART_PACKAGE.format(index='1..' + str(install.PART_COUNT))} "
            f"{install.PART_VERSION}",
        },
        "engine": {**served["engine"], **{k: served[k] for k in ("context_size", "threads", "load_seconds")}},
        "structured_output": structured,
        "prompt_version": PROMPT_VERSION,
        "response_schema": SCHEMA_NAME,
        "config": {
            "count": config.count,
            "limit": config.limit,
            "samples_seed": config.samples_seed,
            "max_attempts": config.max_attempts,
            "max_output_tokens": config.max_output_tokens,
            "attempt_timeout_s": config.timeout_s,
            "decoding": "greedy (temperature 0)",
        },
        "samples": {"count": len(samples), "kinds": dict(Counter(s.kind for s in samples))},
        "server": {
            key: served[key]
            for key in ("requests", "completions", "errors", "response_formats", "finish_reasons")
        }
        | {"dropped_schema_keywords": sorted(served["dropped_schema_keywords"])},
        **summary,
    }


# ------------------------------------------------------------------------------------------------- output


def _percent(rate: float | None) -> str:
    return "-" if rate is None else f"{rate:.1%}"


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} s"


CELL_TITLES = {
    CORRECT_SUCCEEDED: "correct + SUCCEEDED",
    WRONG_CAUGHT: "wrong + REVIEW_REQUIRED (caught)",
    WRONG_SILENT: "wrong + SUCCEEDED (silently wrong, target 0)",
    CORRECT_NEEDLESS_REVIEW: "correct + REVIEW_REQUIRED, document passes the policy (needless)",
    CORRECT_EXPECTED_REVIEW: "correct + REVIEW_REQUIRED, document breaks the policy (expected)",
    INVALID_OUTPUT: "FAILED_TERMINAL: invalid output",
    FAILED_OTHER: "FAILED_TERMINAL: other",
}


def print_report(console: Console, document: Mapping[str, Any]) -> None:
    matrix = document["confusion"]
    table = Table(
        title=f"Outcome against truth, {document['model']['name']} {document['model']['quantization']}"
    )
    table.add_column("cell")
    table.add_column("documents", justify="right")
    for cell in CELLS:
        table.add_row(CELL_TITLES[cell], str(matrix["cells"][cell]))
    console.print(table)
    console.print(
        f"caught {_percent(matrix['caught_rate'])} of {matrix['wrong']} wrong; silently wrong "
        f"{matrix['silently_wrong']} of {matrix['documents']}; "
        f"needless review {_percent(matrix['needless_review_rate'])}"
    )
    fields = Table(title="Field accuracy")
    for column in ("field", "matched", "compared", "accuracy"):
        fields.add_column(column, justify="left" if column == "field" else "right")
    for name, score in document["accuracy"]["fields"].items():
        fields.add_row(name, str(score["matched"]), str(score["total"]), _percent(score["rate"]))
    console.print(fields)
    timing = document["seconds_per_extraction"]
    console.print(
        f"Seconds per extraction: mean {_seconds(timing['mean'])}, p50 {_seconds(timing['p50'])}, "
        f"p95 {_seconds(timing['p95'])} over {timing['n']} calls; "
        f"{(document['tokens']['completion_per_second'] or 0):.1f} completion tokens/s"
    )


def parse_args(argv: Sequence[str] | None) -> Config:
    parser = argparse.ArgumentParser(
        prog="python -m bench.model_accuracy", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--count", type=int, default=DEFAULT_COUNT, help=f"samples in the set (default {DEFAULT_COUNT})"
    )
    parser.add_argument("--limit", type=int, default=None, help="run only the first N samples (a smoke run)")
    parser.add_argument("--samples-seed", type=int, default=DEFAULT_SEED, help=f"default {DEFAULT_SEED}")
    parser.add_argument(
        "--structured-output",
        choices=("json_object", "json_schema", "prompt"),
        default="json_object",
        help="the worker's PROVIDER_STRUCTURED_OUTPUT (default json_object, as for a llama.cpp server)",
    )
    parser.add_argument(
        "--max-attempts",
        type=int,
        default=1,
        help="attempts per job (default 1: decoding is greedy, so a retry would get the same answer)",
    )
    parser.add_argument("--max-output-tokens", type=int, default=4096)
    parser.add_argument(
        "--timeout", type=float, default=900.0, help="seconds per provider call (default 900)"
    )
    parser.add_argument(
        "--cache", type=Path, default=install.DEFAULT_CACHE, help="where the model and engine live"
    )
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="where the JSON report goes")
    args = parser.parse_args(argv)
    if args.limit is not None and args.limit < 1:
        parser.error("--limit must be at least 1")
    return Config(
        count=args.count,
        limit=args.limit,
        samples_seed=args.samples_seed,
        structured_output=args.structured_output,
        max_attempts=max(1, args.max_attempts),
        max_output_tokens=args.max_output_tokens,
        timeout_s=args.timeout,
        cache=args.cache,
        output=args.output,
    )


def main(argv: Sequence[str] | None = None) -> int:
    config = parse_args(argv)
    console = Console(width=None if sys.stdout.isatty() else 120)
    try:
        document = run(config, console)
    except install.InstallError as error:
        console.print(f"[red]install failed:[/red] {error}")
        return 1
    document = {
        "schema": document.pop("schema"),
        "command": command_line("bench.model_accuracy", argv),
        **document,
    }
    write_json(config.output, document)
    print_report(console, document)
    console.print(f"Report written to {config.output} in {document['duration_s']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
