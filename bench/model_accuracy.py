"""Real-model accuracy benchmark: sample documents of every job type through the worker's own attempt code,
against a small model served on 127.0.0.1 in the OpenAI wire format, and the outcome the worker chose set
against the truth.

``python -m bench.model_accuracy [--types T,...] [--limit N] [--samples-seed S]`` installs the model and
engine when needed (bench/model/install.py), starts bench/model/server/server.mjs on a free port, and runs
each document the way production does: accepted with ``accept_job`` into a scratch PostgreSQL database,
claimed with the worker's fair claim under a budget permit, and executed by ``run_attempt`` (provider call
through the worker's OpenAI client with OPENAI_BASE_URL at the local server, strict parsing, the job type's
validation policy, the fenced commit). The sets: 40 sample invoices (tollgate_dev/samples.py), then 12
summaries and 14 classifications (tollgate_dev/document_samples.py). Each stored result is judged against
its document's truth: an invoice on every field that reaches an ERP (tollgate_dev/accuracy.py), a summary
and a label by tollgate_dev/document_judge.py, which reads the document and never the model's quotes.

Per job type that gives the confusion table of outcome against truth: correct + SUCCEEDED, wrong +
REVIEW_REQUIRED (caught), wrong + SUCCEEDED (silently wrong, the target is 0) and correct + REVIEW_REQUIRED,
split into needless (a faithful answer to the printed document passes the type's policy) and expected (it
does not, such as an invoice whose printed total does not add up); the straight-through rate (correct and
SUCCEEDED over all); and the reasons behind every review. Results go to bench/results/model_accuracy.json.
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
from tollgate.jobtypes.document_classification.schema import ClassificationOptions
from tollgate.jobtypes.invoice_extraction.schema import Invoice
from tollgate.jobtypes.invoice_extraction.validation import KnownSupplier, TenantPolicy, validate_invoice
from tollgate.jobtypes.registry import JOB_TYPES
from tollgate.settings import REPO_ROOT, ApiSettings, DatabaseSettings, WorkerSettings
from tollgate.tenants.keys import create_tenant
from tollgate.tenants.suppliers import add_supplier
from tollgate.wiring import build_api, build_execution
from tollgate_dev.accuracy import AccuracyReport, compare_invoice
from tollgate_dev.document_judge import judge_classification, judge_summary
from tollgate_dev.document_samples import (
    CLASSIFICATION,
    SUMMARY,
    ClassificationSample,
    SummarySample,
    classification_request_body,
    faithful_classification,
    faithful_summary,
    generate_classifications,
    generate_summaries,
    summary_request_body,
)
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
SCHEMA = "tollgate.bench.model_accuracy/v2"
SERVER_SCRIPT = BENCH_DIR / "model" / "server" / "server.mjs"
BUCKET = "tollgate-documents-bench-model"
POOL = "bench-model"
INVOICE = "invoice_extraction"
TYPES = (INVOICE, SUMMARY, CLASSIFICATION)  # the order they run in
DEFAULT_COUNT = 40  # eight of each sample kind, interleaved: --limit 5 already has every kind
DEFAULT_SUMMARY_COUNT = 12  # two of each kind: --limit 6 already has every kind
DEFAULT_CLASSIFICATION_COUNT = 14  # two of each label: --limit 7 already has every label
DEFAULT_SEED = 15
# Loading 1.1 GB and mapping it takes seconds on a quiet machine; a busy one can take minutes.
READY_TIMEOUT_S = 600.0
TERMINAL = ("SUCCEEDED", "REVIEW_REQUIRED", "FAILED_TERMINAL", "CANCELLED")
# Whether this service's classification options take a tenant's label guides (policy classification.v2).
SENDS_LABEL_GUIDES = "label_guides" in ClassificationOptions.model_fields

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

# How "does a faithful answer pass the policy?" was decided for a document.
BY_VALIDATE = "validate"  # the faithful answer was run through the type's own validate
ASSUMED = "assumed"  # no faithful answer could be built (the output schema refused it): assumed to pass


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
    types: tuple[str, ...] = TYPES
    summary_count: int = DEFAULT_SUMMARY_COUNT
    classification_count: int = DEFAULT_CLASSIFICATION_COUNT


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
    # Correct answers to documents that pass the policy: the ones that should have gone straight through.
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


Sample = SampleInvoice | SummarySample | ClassificationSample


@dataclass(frozen=True)
class Case:
    """One document to run: its job type, its name in the report, what it is, the request, its truth."""

    job_type: str
    name: str
    kind: str  # an invoice's sample kind, a summary's document kind, a classification's true label
    language: str | None
    body: dict[str, Any]
    sample: Sample

    @property
    def pages(self) -> tuple[str, ...]:
        return tuple(self.sample.pages)


def pick_cases(config: Config) -> list[Case]:
    """The documents of every chosen type, in the order they run; ``--limit`` takes a prefix of each set."""
    cases: list[Case] = []
    if INVOICE in config.types:
        cases += [
            Case(INVOICE, s.invoice_number, s.kind, None, request_body(s), s)
            for s in pick_samples(config.count, config.samples_seed, config.limit)
        ]
    if SUMMARY in config.types:
        summaries = generate_summaries(config.summary_count, seed=config.samples_seed)[: config.limit]
        cases += [
            Case(SUMMARY, f"summary-{n:02d}", s.truth.kind, s.truth.language, summary_request_body(s), s)
            for n, s in enumerate(summaries, 1)
        ]
    if CLASSIFICATION in config.types:
        documents = generate_classifications(config.classification_count, seed=config.samples_seed)
        cases += [
            Case(
                CLASSIFICATION,
                f"classification-{n:02d}",
                s.truth_label,
                s.language,
                classification_request_body(s, send_guides=SENDS_LABEL_GUIDES),
                s,
            )
            for n, s in enumerate(documents[: config.limit], 1)
        ]
    return cases


@dataclass(frozen=True)
class TruthVerdict:
    """Whether a faithful answer to the printed document passes the type's policy, how that was decided,
    and the reasons when it does not (why a review of a correct answer is expected)."""

    passes: bool
    method: str
    reasons: tuple[dict[str, str], ...] = ()
    note: str | None = None


def truth_verdict(case: Case, policy: TenantPolicy) -> TruthVerdict:
    sample = case.sample
    if isinstance(sample, SampleInvoice):
        report = validate_invoice(expected_invoice(sample), sample.pages, policy)
        return TruthVerdict(report.passed, BY_VALIDATE, tuple(r.as_dict() for r in report.reasons))
    job_type = JOB_TYPES[case.job_type]
    faithful = (
        faithful_summary(sample) if isinstance(sample, SummarySample) else faithful_classification(sample)
    )
    try:
        answer = job_type.output.model_validate(faithful)
    except ValidationError as error:  # a newer output schema: say so rather than guess a verdict
        return TruthVerdict(
            True,
            ASSUMED,
            note=f"{job_type.schema_name} refuses the faithful answer ({error.error_count()} errors)",
        )
    options = job_type.parse_options(case.body.get("options"))
    report = job_type.validate(answer, case.pages, options, policy)
    return TruthVerdict(report.passed, BY_VALIDATE, tuple(r.as_dict() for r in report.reasons))


@dataclass(frozen=True)
class Judged:
    """A stored result against the truth: right or not, and what is wrong with it."""

    correct: bool
    problems: tuple[str, ...]
    invoice_comparison: Any = None  # an invoice's per-field Comparison, for the field accuracy table


def judge(case: Case, result: Mapping[str, Any] | None) -> Judged:
    """Judges the stored result (as JSON, so a newer output model cannot change the verdict) by the
    document: an invoice field by field, a summary by what it states, a label by equality."""
    sample = case.sample
    if isinstance(sample, SampleInvoice):
        invoice = None
        if result is not None:
            try:
                invoice = Invoice.model_validate(result)
            except ValidationError as error:  # stored by an older schema; counted, never hidden
                return Judged(False, (f"the stored result does not parse: {error.error_count()} errors",))
        comparison = compare_invoice(invoice, expected_invoice(sample), sample.pages)
        return Judged(comparison.exact, tuple(comparison.mismatches), comparison)
    if result is None:
        return Judged(False, ("no result",))
    if isinstance(sample, SummarySample):
        facts = [str(f.get("fact", "")) for f in result.get("key_facts") or [] if isinstance(f, Mapping)]
        verdict = judge_summary(
            str(result.get("summary", "")),
            facts,
            sample.pages,
            max_words=sample.max_words,
            max_facts=sample.max_facts,
        )
        return Judged(verdict.correct, verdict.problems)
    label = result.get("label")
    right = judge_classification(label if isinstance(label, str) else None, sample.truth_label)
    return Judged(right, () if right else (f"label {label!r}, the true label is {sample.truth_label!r}",))


def review_reasons_by_code(reviewed: Iterable[Sequence[Mapping[str, Any]]]) -> dict[str, dict[str, int]]:
    """Per reason code, how many reasons and how many reviewed documents gave it, the commonest first."""
    reasons: Counter[str] = Counter()
    documents: Counter[str] = Counter()
    for document in reviewed:
        codes = [str(reason.get("code")) for reason in document]
        reasons.update(codes)
        documents.update(set(codes))
    order = sorted(reasons, key=lambda code: (-documents[code], -reasons[code], code))
    return {code: {"documents": documents[code], "reasons": reasons[code]} for code in order}


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
    case: Case
    state: str
    result: dict[str, Any] | None
    policy_version: str | None
    review_reasons: list[dict[str, Any]]
    attempts: list[dict[str, Any]]
    last_error: dict[str, Any] | None
    wall_s: float


async def run_case(env: Environment, config: Config, case: Case) -> Measured:
    started = time.perf_counter()
    request = CreateJobRequest.model_validate(case.body)
    accepted = accept_job(env.acceptance, env.tenant_id, f"bench-model-{secrets.token_hex(8)}", request)
    job_id = accepted.job.job_id
    # Every attempt may take the whole timeout, and retries wait a little between them.
    job = await run_to_the_end(env, job_id, config.timeout_s * config.max_attempts + 120)
    wall = time.perf_counter() - started
    results = _rows(env.db_url, "model_job_result", job_id=job_id)
    stored = results[0] if results else None
    return Measured(
        case,
        job["state"],
        stored["result"] if stored else None,
        stored["policy_version"] if stored else None,
        list(stored["review_reasons"] or []) if stored else [],
        _rows(env.db_url, "model_job_attempts", job_id=job_id),
        job["last_error"],
        wall,
    )


async def run_cases(
    env: Environment, config: Config, cases: Sequence[Case], server: ModelServer, console: Console
) -> list[Measured]:
    """One after another, in one event loop: the worker's async OpenAI client is bound to its loop."""
    measured = []
    for index, case in enumerate(cases, 1):
        # A dead server would turn every remaining document into a failed job; stop and show why instead.
        if server.process.poll() is not None:
            raise RuntimeError(
                f"the model server exited ({server.process.returncode}):\n{_log_tail(server.log_path)}"
            )
        item = await run_case(env, config, case)
        measured.append(item)
        calls = ", ".join(f"{a['outcome']} {(a['latency_ms'] or 0) / 1000:.1f} s" for a in item.attempts)
        what = f"{case.job_type} {case.kind}" + (f"/{case.language}" if case.language else "")
        console.print(f"  {index}/{len(cases)} {what:<42} {item.state:<16} {calls}")
    return measured


# ------------------------------------------------------------------------------------------------ the run


def document_row(item: Measured, judged: Judged, truth: TruthVerdict, cell: str) -> dict[str, Any]:
    case = item.case
    return {
        "name": case.name,
        "kind": case.kind,
        "language": case.language,
        "state": item.state,
        "cell": cell,
        # What is wrong with the answer: an invoice's mismatched fields, or the judge's findings.
        "problems": list(judged.problems),
        "review_reasons": [
            {key: str(reason.get(key)) for key in ("code", "field", "detail")}
            for reason in item.review_reasons
        ],
        "truth_passes_policy": truth.passes,
        "truth_reasons": list(truth.reasons),
        "policy_version": item.policy_version,
        "attempts": [
            {
                "outcome": a["outcome"],
                "latency_s": (a["latency_ms"] or 0) / 1000,
                "prompt_tokens": a["input_tokens"],
                "completion_tokens": a["output_tokens"],
                "error": (a["error"] or {}).get("detail") if a["error"] else None,
            }
            for a in item.attempts
        ],
        "wall_s": item.wall_s,
        # What the model answered, wherever it did not go straight through correct.
        "answer": item.result if cell != CORRECT_SUCCEEDED else None,
        "last_error": item.last_error,
    }


def _samples_described(cases: Sequence[Case]) -> dict[str, Any]:
    languages = Counter(c.language for c in cases if c.language)
    return {
        "count": len(cases),
        "kinds": dict(Counter(c.kind for c in cases)),
        **({"languages": dict(languages)} if languages else {}),
    }


def summarize_type(job_type: str, measured: Sequence[Measured], policy: TenantPolicy) -> dict[str, Any]:
    """One job type's figures: the confusion table and its rates, how the truth's verdicts were reached,
    the reasons behind every review, timing and tokens, and one row per document."""
    registered = JOB_TYPES[job_type]
    cells: list[str] = []
    documents = []
    accuracy = AccuracyReport()
    verdicts = []
    for item in measured:
        judged = judge(item.case, item.result)
        truth = truth_verdict(item.case, policy)
        verdicts.append(truth)
        last_outcome = item.attempts[-1]["outcome"] if item.attempts else None
        cell = classify(item.state, judged.correct, truth.passes, last_outcome)
        cells.append(cell)
        if judged.invoice_comparison is not None:
            accuracy.add(judged.invoice_comparison, kind=item.case.kind, outcome=item.state)
        documents.append(document_row(item, judged, truth, cell))
    calls = [a for item in measured for a in item.attempts if a["latency_ms"] is not None]
    completion_tokens = sum(a["output_tokens"] or 0 for a in calls)
    call_seconds = sum(a["latency_ms"] for a in calls) / 1000
    methods = sorted({v.method for v in verdicts})
    summary: dict[str, Any] = {
        "prompt_version": registered.prompt_version,
        "response_schema": registered.schema_name,
        "policy_version": registered.policy_version,
        "policy_versions_stored": sorted({str(i.policy_version) for i in measured if i.policy_version}),
        "samples": _samples_described([item.case for item in measured]),
        "truth_policy": {
            "method": methods[0] if len(methods) == 1 else "mixed",
            "passing": sum(v.passes for v in verdicts),
            "documents": len(verdicts),
            "notes": sorted({v.note for v in verdicts if v.note}),
        },
        "confusion": confusion(cells),
        "reviews": {
            "documents": sum(item.state == "REVIEW_REQUIRED" for item in measured),
            "by_code": review_reasons_by_code(
                item.review_reasons for item in measured if item.state == "REVIEW_REQUIRED"
            ),
        },
        "seconds_per_call": spread([a["latency_ms"] / 1000 for a in calls]),
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
    if job_type == INVOICE:
        summary["accuracy"] = accuracy.as_dict()
    return summary


def summarize(measured: Sequence[Measured], policy: TenantPolicy, types: Sequence[str]) -> dict[str, Any]:
    by_type = {
        job_type: summarize_type(job_type, [m for m in measured if m.case.job_type == job_type], policy)
        for job_type in types
    }
    every_cell = [
        cell
        for figures in by_type.values()
        for cell, count in figures["confusion"]["cells"].items()
        for _ in range(count)
    ]
    return {"overall": confusion(every_cell), "job_types": by_type}


def run(config: Config, console: Console) -> dict[str, Any]:
    started = datetime.now(UTC)
    clock_start = time.perf_counter()
    installed = install.ensure_installed(config.cache)
    cases = pick_cases(config)
    policy = sample_policy()
    model_name = install.MODEL_FILE.removesuffix(".gguf")
    extra, _ = structured_output_setting(config.structured_output)
    with model_server(installed, accept_json_schema=not extra, console=console) as server:
        with environment(config, server.url, model_name) as env:
            machine = describe_machine(
                db_url=env.db_url, database=env.db_source, aws="moto (in process)", provider=server.url
            )
            sets = ", ".join(f"{n} {job_type}" for job_type, n in Counter(c.job_type for c in cases).items())
            console.print(
                f"{len(cases)} documents ({sets}); the worker sends {env.structured_output['worker_sends']}"
            )
            measured = asyncio.run(run_cases(env, config, cases, server, console))
            structured = env.structured_output
        served = server.stats()
    summary = summarize(measured, policy, config.types)
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
        "config": {
            "types": list(config.types),
            "count": config.count,
            "summary_count": config.summary_count,
            "classification_count": config.classification_count,
            "limit": config.limit,
            "samples_seed": config.samples_seed,
            "label_guides_sent": SENDS_LABEL_GUIDES,
            "max_attempts": config.max_attempts,
            "max_output_tokens": config.max_output_tokens,
            "attempt_timeout_s": config.timeout_s,
            "decoding": "greedy (temperature 0)",
        },
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
    model = f"{document['model']['name']} {document['model']['quantization']}"
    for job_type, figures in document["job_types"].items():
        matrix = figures["confusion"]
        table = Table(title=f"{job_type}: outcome against truth, {model}")
        table.add_column("cell")
        table.add_column("documents", justify="right")
        for cell in CELLS:
            table.add_row(CELL_TITLES[cell], str(matrix["cells"][cell]))
        console.print(table)
        truth = figures["truth_policy"]
        console.print(
            f"silently wrong {matrix['silently_wrong']} of {matrix['documents']}; caught "
            f"{_percent(matrix['caught_rate'])} of {matrix['wrong']} wrong; needless review "
            f"{_percent(matrix['needless_review_rate'])}; straight through "
            f"{_percent(matrix['straight_through_rate'])}; a faithful answer passes the policy on "
            f"{truth['passing']} of {truth['documents']} ({truth['method']})"
        )
        reasons = figures["reviews"]["by_code"]
        if reasons:
            console.print(
                f"review reasons ({figures['reviews']['documents']} reviewed): "
                + ", ".join(f"{code} {n['documents']}" for code, n in reasons.items())
            )
        for row in figures["documents"]:
            if row["state"] == "REVIEW_REQUIRED" or row["cell"] == WRONG_SILENT:
                codes = "; ".join(f"{r['code']} {r['field']}: {r['detail']}" for r in row["review_reasons"])
                console.print(f"  {row['name']} {row['kind']} [{row['cell']}] {codes or '-'}")
                for problem in row["problems"]:
                    console.print(f"    wrong: {problem}")
        timing = figures["seconds_per_call"]
        console.print(
            f"seconds per call: mean {_seconds(timing['mean'])}, p50 {_seconds(timing['p50'])}, "
            f"p95 {_seconds(timing['p95'])} over {timing['n']} calls; "
            f"{(figures['tokens']['completion_per_second'] or 0):.1f} completion tokens/s"
        )
    if INVOICE in document["job_types"]:
        fields = Table(title="Invoice field accuracy")
        for column in ("field", "matched", "compared", "accuracy"):
            fields.add_column(column, justify="left" if column == "field" else "right")
        for name, score in document["job_types"][INVOICE]["accuracy"]["fields"].items():
            fields.add_row(name, str(score["matched"]), str(score["total"]), _percent(score["rate"]))
        console.print(fields)


def _types(text: str) -> tuple[str, ...]:
    named = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in named if name not in TYPES]
    if unknown or not named:
        raise argparse.ArgumentTypeError(f"job types are {', '.join(TYPES)}; got {text!r}")
    return tuple(t for t in TYPES if t in named)


def parse_args(argv: Sequence[str] | None) -> Config:
    parser = argparse.ArgumentParser(
        prog="python -m bench.model_accuracy", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--types",
        type=_types,
        default=TYPES,
        help=f"comma-separated job types to run, in this order whatever the order given (default all: "
        f"{','.join(TYPES)})",
    )
    parser.add_argument(
        "--count", type=int, default=DEFAULT_COUNT, help=f"invoices in the set (default {DEFAULT_COUNT})"
    )
    parser.add_argument(
        "--summary-count",
        type=int,
        default=DEFAULT_SUMMARY_COUNT,
        help=f"summary documents in the set (default {DEFAULT_SUMMARY_COUNT})",
    )
    parser.add_argument(
        "--classification-count",
        type=int,
        default=DEFAULT_CLASSIFICATION_COUNT,
        help=f"classification documents in the set (default {DEFAULT_CLASSIFICATION_COUNT})",
    )
    parser.add_argument(
        "--limit", type=int, default=None, help="run only the first N documents of each set (a smoke run)"
    )
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
    if min(args.count, args.summary_count, args.classification_count) < 1:
        parser.error("every set needs at least one document")
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
        types=args.types,
        summary_count=args.summary_count,
        classification_count=args.classification_count,
    )


def recorded_arguments(argv: Sequence[str]) -> list[str]:
    """The options to record for reproducing the run, without ``--cache``: like ``--output`` (which
    bench.machine leaves out), it changes no figure, and its value is a path on the machine that ran it."""
    kept: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--cache":
            skip = True
        elif not arg.startswith("--cache="):
            kept.append(arg)
    return kept


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
        "command": command_line(
            "bench.model_accuracy", recorded_arguments(sys.argv[1:] if argv is None else argv)
        ),
        **document,
    }
    write_json(config.output, document)
    print_report(console, document)
    console.print(f"Report written to {config.output} in {document['duration_s']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
