"""Policy cost benchmark: what the validation policies cost a worker per result, by document size, beside the
plain step every result already takes (parsing the model's JSON into the strict output schema).

``python -m bench.policy_cost [--rounds N]`` writes bench/results/policy_cost.json. Invoice extraction under
``validation.v3`` on a one-page sample, a multi-page sample and a 100-page document (a multi-page sample's
pages 25 times over, so every value and label is printed 25 times: the search's worst case), and the
summary and classification policies on a two-page contract. Each round measures the parse and the policy of
every shape in turn, so the ratios come from the same moments of a noisy machine. A report, not a test.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.machine import command_line, describe_machine, load_average, write_json
from tollgate.jobtypes.base import TenantPolicy
from tollgate.jobtypes.invoice_extraction.validation import KnownSupplier
from tollgate.jobtypes.registry import JOB_TYPES, JobType
from tollgate_dev.document_samples import (
    classification_request_body,
    faithful_classification,
    faithful_summary,
    generate_classifications,
    generate_summaries,
    summary_request_body,
)
from tollgate_dev.samples import CLEAN, EXTRAS, MULTI_PAGE, SUPPLIERS, generate_invoice
from tollgate_dev.simulator.extraction import extract

BENCH_DIR = Path(__file__).resolve().parent
DEFAULT_OUTPUT = BENCH_DIR / "results" / "policy_cost.json"
SCHEMA = "tollgate.bench.policy_cost/v1"
POLICY = TenantPolicy(
    frozenset(s.currency for s in SUPPLIERS) | {"USD", "EUR", "GBP", "CHF"},
    tuple(KnownSupplier(s.name, s.iban or None) for s in SUPPLIERS),
)
REPEAT_PAGES = 25


class Shape:
    """One document and answer of one job type: parse it, and judge it by the type's policy."""

    def __init__(self, name: str, kind: JobType, pages: Sequence[str], answer: Any, options: Any) -> None:
        self.name, self.kind, self.pages = name, kind, tuple(pages)
        self.raw = json.dumps(answer)
        self.options = kind.parse_options(options)
        self.output = kind.output.model_validate_json(self.raw)
        report = kind.validate(self.output, self.pages, self.options, POLICY)
        if not report.passed:
            raise RuntimeError(f"{name}: the faithful answer fails its policy: {report.reasons}")
        self.located = len(report.located)

    def parse(self) -> None:
        self.kind.output.model_validate_json(self.raw)

    def judge(self) -> None:
        self.kind.validate(self.output, self.pages, self.options, POLICY)


def shapes() -> list[Shape]:
    invoices = JOB_TYPES["invoice_extraction"]
    one = generate_invoice(_rng(1), 1, CLEAN, extras=frozenset(EXTRAS))
    several = generate_invoice(_rng(2), 2, MULTI_PAGE, extras=frozenset(EXTRAS))
    # The multi-page sample's pages many times over: every value and label is printed on each copy.
    long = list(several.pages) * REPEAT_PAGES
    summary = generate_summaries(1)[0]
    classification = generate_classifications(1)[0]
    return [
        Shape("invoice, 1 page", invoices, one.pages, extract(list(one.pages)), {}),
        Shape(
            f"invoice, {len(several.pages)} pages", invoices, several.pages, extract(list(several.pages)), {}
        ),
        Shape(f"invoice, {len(long)} pages", invoices, long, extract(list(several.pages)), {}),
        Shape(
            f"summary, {len(summary.pages)} pages",
            JOB_TYPES["document_summary"],
            summary.pages,
            faithful_summary(summary),
            summary_request_body(summary)["options"],
        ),
        Shape(
            f"classification, {len(classification.pages)} pages",
            JOB_TYPES["document_classification"],
            classification.pages,
            faithful_classification(classification),
            classification_request_body(classification, send_guides=True)["options"],
        ),
    ]


def _rng(seed: int) -> random.Random:
    return random.Random(seed)


def _time(action: Callable[[], None], calls: int) -> float:
    started = time.perf_counter()
    for _ in range(calls):
        action()
    return (time.perf_counter() - started) / calls * 1000


def measure(shape_list: Sequence[Shape], rounds: int) -> list[dict[str, Any]]:
    """Per shape, the milliseconds of a parse and of the policy in each round (several calls a round, so a
    round of a fast shape is not one timer tick)."""
    samples: dict[str, dict[str, list[float]]] = {s.name: {"parse": [], "policy": []} for s in shape_list}
    for _ in range(rounds):
        for shape in shape_list:
            calls = max(1, 20 // max(1, len(shape.pages) // 5))
            samples[shape.name]["parse"].append(_time(shape.parse, calls))
            samples[shape.name]["policy"].append(_time(shape.judge, calls))
    rows = []
    for shape in shape_list:
        parse = statistics.median(samples[shape.name]["parse"])
        policy = statistics.median(samples[shape.name]["policy"])
        rows.append(
            {
                "shape": shape.name,
                "job_type": shape.kind.name,
                "policy_version": shape.kind.policy_version,
                "pages": len(shape.pages),
                "characters": sum(len(p) for p in shape.pages),
                "values_located": shape.located,
                "parse_ms_p50": parse,
                "policy_ms_p50": policy,
                "policy_per_page_ms": policy / len(shape.pages),
                "policy_over_parse": policy / parse if parse else None,
                "rounds": rounds,
            }
        )
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.policy_cost", description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    args = parser.parse_args(argv)
    started = datetime.now(UTC)
    clock = time.perf_counter()
    machine = describe_machine(db_url=None, database="none", aws="none", provider="none")
    rows = measure(shapes(), max(3, args.rounds))
    machine["load_average_after"] = load_average()
    document = {
        "schema": SCHEMA,
        "command": command_line("bench.policy_cost", argv),
        "started_at": started.isoformat(),
        "duration_s": time.perf_counter() - clock,
        "machine": machine,
        "shapes": rows,
    }
    write_json(args.output, document)
    for row in rows:
        print(
            f"{row['shape']:<28} parse {row['parse_ms_p50']:7.3f} ms  policy {row['policy_ms_p50']:8.3f} ms  "
            f"({row['policy_over_parse']:.1f}x, {row['policy_per_page_ms']:.3f} ms a page, "
            f"{row['values_located']} values located)"
        )
    print(f"written to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
