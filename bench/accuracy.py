"""Extraction accuracy benchmark: the sample invoices through a provider over HTTP with the openai SDK, each
answer parsed into the strict Invoice schema and compared field by field with the ground truth.

``python -m bench.accuracy [--count N]`` writes bench/results/accuracy.json and prints tables. Without
OPENAI_BASE_URL or OPENAI_API_KEY it starts the built-in simulated provider; with them it measures that
endpoint with the same samples, prompt, schema and comparison, so the figures compare across models
(ACCURACY_MODEL or MODEL_SMALL names the model). This is a report, not a test: nothing in it fails on a
figure.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import openai
from openai import OpenAI
from pydantic import ValidationError
from rich.console import Console
from rich.table import Table

from bench.machine import command_line, describe_machine, load_average, write_json
from tollgate.jobtypes.invoice_extraction.prompt import PROMPT_VERSION, build_messages
from tollgate.jobtypes.invoice_extraction.schema import SCHEMA_NAME, Invoice, response_format
from tollgate_dev.accuracy import AccuracyReport, compare_invoice
from tollgate_dev.samples import KINDS, SampleInvoice, expected_invoice, generate_invoices
from tollgate_dev.simulator.server import Fault, Latency, SimulatedProvider, SimulatorConfig

BENCH_DIR = Path(__file__).resolve().parent
DEFAULT_OUTPUT = BENCH_DIR / "results" / "accuracy.json"
SCHEMA = "tollgate.bench.accuracy/v1"
DEFAULT_MODEL = "gpt-4.1-mini"
# Transient answers a caller would retry; the bench retries them a few times so that a provider's quota
# does not count as a wrong extraction.
RETRYABLE = (openai.RateLimitError, openai.InternalServerError, openai.APIConnectionError)


@dataclass(frozen=True)
class Config:
    count: int
    seed: int
    concurrency: int
    model: str | None
    max_completion_tokens: int
    timeout: float
    attempts: int
    fault_rates: dict[str, float]
    latency_ms: float
    output: Path


@dataclass
class Outcome:
    sample: SampleInvoice
    outcome: str
    invoice: Invoice | None = None
    latency_s: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    attempts: int = 0
    detail: str = ""


@dataclass(frozen=True)
class Endpoint:
    kind: str  # "simulated" or "openai-compatible"
    base_url: str | None
    api_key: str
    model: str
    shown_as: str  # what the report says about where it ran: never the key, never a path with secrets
    extra: dict[str, Any] = field(default_factory=dict)


def parse_args(argv: Sequence[str] | None) -> Config:
    parser = argparse.ArgumentParser(prog="python -m bench.accuracy", description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=100, help="sample invoices (default 100)")
    parser.add_argument("--seed", type=int, default=7, help="sample seed (default 7)")
    parser.add_argument("--concurrency", type=int, default=4, help="calls in flight (default 4)")
    parser.add_argument("--model", default=None, help="model name (default ACCURACY_MODEL, MODEL_SMALL)")
    parser.add_argument("--max-completion-tokens", type=int, default=4096)
    parser.add_argument("--timeout", type=float, default=120.0, help="client timeout per call, seconds")
    parser.add_argument("--attempts", type=int, default=4, help="tries per sample on 429/5xx/connection")
    parser.add_argument(
        "--fault-rate",
        action="append",
        default=[],
        metavar="NAME=P",
        help=f"simulator only: probability of a fault per request ({', '.join(f.value for f in Fault)})",
    )
    parser.add_argument("--latency-ms", type=float, default=0.0, help="simulator only: mean latency")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="where the JSON report goes")
    args = parser.parse_args(argv)
    rates = {}
    for item in args.fault_rate:
        name, _, probability = item.partition("=")
        rates[Fault(name).value] = float(probability)
    return Config(
        count=args.count,
        seed=args.seed,
        concurrency=max(1, args.concurrency),
        model=args.model,
        max_completion_tokens=args.max_completion_tokens,
        timeout=args.timeout,
        attempts=max(1, args.attempts),
        fault_rates=rates,
        latency_ms=args.latency_ms,
        output=args.output,
    )


@contextmanager
def endpoint(config: Config) -> Iterator[Endpoint]:
    """The provider from the environment when one is configured, else a simulated provider for the run."""
    base_url = os.environ.get("OPENAI_BASE_URL") or None
    api_key = os.environ.get("OPENAI_API_KEY") or None
    model = config.model or os.environ.get("ACCURACY_MODEL") or os.environ.get("MODEL_SMALL") or DEFAULT_MODEL
    if base_url or api_key:
        host = urlsplit(base_url).netloc if base_url else "api.openai.com"
        yield Endpoint("openai-compatible", base_url, api_key or "unused", model, host)
        return
    simulator = SimulatedProvider(
        SimulatorConfig(
            # Quotas matter against a real provider; here they would only add waiting to a run that
            # measures correctness.
            requests_per_minute=None,
            tokens_per_minute=None,
            max_concurrency=None,
            fault_rates=config.fault_rates,
            latency=Latency(mean_seconds=config.latency_ms / 1000),
            seed=config.seed,
        )
    )
    url = simulator.start()
    try:
        yield Endpoint(
            "simulated", url, "sim", model, "simulated provider", {"fault_rates": config.fault_rates}
        )
    finally:
        simulator.stop()


def _retry_delay(error: Exception) -> float:
    response = getattr(error, "response", None)
    headers = response.headers if response is not None else {}
    for name, scale in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = headers.get(name)
        if value:
            try:
                return min(60.0, float(value) / scale)
            except ValueError:
                continue
    return 1.0


def run_one(client: OpenAI, config: Config, model: str, sample: SampleInvoice) -> Outcome:
    result = Outcome(sample, "error")
    started = time.perf_counter()
    # Plain dicts, which is what the SDK's TypedDict parameters are at run time.
    messages: Any = build_messages(sample.pages)
    schema: Any = response_format()
    for attempt in range(1, config.attempts + 1):
        result.attempts = attempt
        try:
            completion = client.chat.completions.create(
                model=model,
                messages=messages,
                response_format=schema,
                max_completion_tokens=config.max_completion_tokens,
                timeout=config.timeout,
            )
        except RETRYABLE as error:
            result.outcome, result.detail = f"error:{type(error).__name__}", str(error)[:200]
            if attempt < config.attempts:
                time.sleep(_retry_delay(error))
            continue
        except openai.APIStatusError as error:
            result.outcome, result.detail = f"error:{type(error).__name__}", str(error)[:200]
            break
        result.latency_s = time.perf_counter() - started
        if completion.usage:
            result.prompt_tokens = completion.usage.prompt_tokens
            result.completion_tokens = completion.usage.completion_tokens
        choice = completion.choices[0]
        content = choice.message.content
        if choice.finish_reason == "length":
            result.outcome = "truncated"
        elif choice.message.refusal or content is None:
            result.outcome, result.detail = "refused", choice.message.refusal or ""
        else:
            result.outcome, result.invoice, result.detail = _parse(content)
        break
    return result


def _parse(content: str) -> tuple[str, Invoice | None, str]:
    try:
        data = json.loads(content)
    except ValueError as error:
        return "invalid_json", None, str(error)[:200]
    try:
        return "ok", Invoice.model_validate(data), ""
    except ValidationError as error:
        return "wrong_schema", None, f"{error.error_count()} schema errors"


def run(config: Config, console: Console) -> dict[str, Any]:
    started = datetime.now(UTC)
    clock_start = time.perf_counter()
    samples = generate_invoices(config.count, seed=config.seed, kinds=KINDS)
    with endpoint(config) as target:
        console.print(f"Provider: {target.shown_as}, model {target.model}; {len(samples)} sample invoices")
        client = OpenAI(base_url=target.base_url, api_key=target.api_key, max_retries=0)
        with ThreadPoolExecutor(config.concurrency) as pool:
            outcomes = list(pool.map(lambda s: run_one(client, config, target.model, s), samples))
        client.close()

    report = AccuracyReport()
    documents = []
    for result in outcomes:
        comparison = compare_invoice(result.invoice, expected_invoice(result.sample), result.sample.pages)
        report.add(comparison, kind=result.sample.kind, outcome=result.outcome)
        documents.append(
            {
                "invoice_number": result.sample.invoice_number,
                "kind": result.sample.kind,
                "outcome": result.outcome,
                "mismatches": list(comparison.mismatches),
                "attempts": result.attempts,
                "detail": result.detail,
            }
        )
    latencies = sorted(r.latency_s * 1000 for r in outcomes if r.outcome != "error" and r.latency_s)
    return {
        "schema": SCHEMA,
        "started_at": started.isoformat(),
        "duration_s": time.perf_counter() - clock_start,
        "provider": {"kind": target.kind, "endpoint": target.shown_as, "model": target.model, **target.extra},
        "prompt_version": PROMPT_VERSION,
        "response_schema": SCHEMA_NAME,
        "samples": {
            "count": len(samples),
            "seed": config.seed,
            "kinds": dict(Counter(s.kind for s in samples)),
        },
        "accuracy": report.as_dict(),
        "usage": {
            "prompt_tokens": sum(r.prompt_tokens for r in outcomes),
            "completion_tokens": sum(r.completion_tokens for r in outcomes),
        },
        "latency_ms": {
            "p50": statistics.median(latencies) if latencies else None,
            "p95": latencies[int(0.95 * (len(latencies) - 1))] if latencies else None,
            "max": latencies[-1] if latencies else None,
        },
        "documents": documents,
    }


def _percent(rate: float | None) -> str:
    return "-" if rate is None else f"{rate:.1%}"


def print_report(console: Console, document: dict[str, Any]) -> None:
    accuracy = document["accuracy"]
    fields = Table(
        title=f"Field accuracy, {document['provider']['endpoint']} ({document['provider']['model']})"
    )
    for column in ("field", "matched", "compared", "accuracy"):
        fields.add_column(column, justify="left" if column == "field" else "right")
    for name, score in accuracy["fields"].items():
        fields.add_row(name, str(score["matched"]), str(score["total"]), _percent(score["rate"]))
    evidence = accuracy["evidence_resolves"]
    fields.add_row(
        "evidence resolves", str(evidence["matched"]), str(evidence["total"]), _percent(evidence["rate"])
    )
    console.print(fields)

    kinds = Table(title="Documents extracted exactly, by sample kind")
    for column in ("kind", "exact", "documents", "rate"):
        kinds.add_column(column, justify="left" if column == "kind" else "right")
    for kind, score in accuracy["exact_documents_by_kind"].items():
        kinds.add_row(kind, str(score["matched"]), str(score["total"]), _percent(score["rate"]))
    kinds.add_row(
        "all",
        str(accuracy["exact_documents"]),
        str(accuracy["documents"]),
        _percent(accuracy["document_accuracy"]),
        style="bold",
    )
    console.print(kinds)
    outcomes = ", ".join(f"{name} {count}" for name, count in accuracy["outcomes"].items())
    console.print(f"Field accuracy {_percent(accuracy['field_accuracy'])}; outcomes: {outcomes}")


def main(argv: Sequence[str] | None = None) -> int:
    config = parse_args(argv)
    # Piped output still gets whole tables rather than 80 squeezed columns.
    console = Console(width=None if sys.stdout.isatty() else 120)
    # No database here; the machine matters for the latency figures only, and only with the simulator.
    machine = describe_machine()
    document = run(config, console)
    machine["load_average_after"] = load_average()
    document = {
        "schema": document.pop("schema"),
        "command": command_line("bench.accuracy", argv),
        "machine": machine,
        **document,
    }
    write_json(config.output, document)
    print_report(console, document)
    console.print(f"Report written to {config.output} in {document['duration_s']:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
