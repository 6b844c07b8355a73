"""Writes BENCHMARKS.md from bench/results/*.json, so the document never says more, or other, than the runs.

``python -m bench.report`` regenerates it (``make bench`` ends with this); ``--check`` exits non-zero with
a diff when BENCHMARKS.md disagrees with the results files. Standard library only: it reads JSON and
writes text, deterministically, so the unit test can run it without a database or a network.
"""

from __future__ import annotations

import argparse
import difflib
import json
import statistics
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
RESULTS_DIR = BENCH_DIR / "results"
OUTPUT = REPO_ROOT / "BENCHMARKS.md"
# In the order the sections appear (and `make bench` runs them).
BENCHMARKS = (
    "acceptance",
    "cold_start",
    "relay",
    "drain",
    "drain_tokens",
    "drain_many",
    "drain_tiers",
    "batch_path",
    "scale",
    "openloop",
    "live_notifications",
    "accuracy",
    "policy_cost",
    "model_accuracy",
)
# How to make a results file whose benchmark module is not simply named after it.
RUN_COMMANDS = {
    "drain_tokens": "python -m bench.drain --profile tokens",
    "drain_many": "python -m bench.drain --profile many-tenants",
    "cold_start": "python -m bench.cold_start",
    "model_accuracy": "make bench-model",
}

Doc = Mapping[str, Any]
# Spelled by name: ruff rightly flags look-alike characters typed into the source.
TIMES = "\N{MULTIPLICATION SIGN}"
DASH = "\N{EN DASH}"


# ------------------------------------------------------------------------------------------- formatting


def num(value: float, digits: int = 1) -> str:
    return f"{value:,.{digits}f}"


def ms(value: float) -> str:
    """Milliseconds with the precision the size deserves: 0.74, 17.8, 199."""
    if value < 10:
        return f"{value:.2f}"
    if value < 100:
        return f"{value:.1f}"
    return f"{value:,.0f}"


def times(value: float) -> str:
    return f"{value:.2f}{TIMES}"


def pct(value: float, digits: int = 1) -> str:
    return f"{value:.{digits}%}"


def spread(low: float, high: float, fmt: Callable[[float], str]) -> str:
    return f"{fmt(low)}{DASH}{fmt(high)}"


def run_date(doc: Doc) -> str:
    return datetime.fromisoformat(doc["started_at"]).strftime("%Y-%m-%d %H:%M UTC")


def source(name: str, doc: Doc) -> str:
    """How a figure names where it comes from: the file and the run in it."""
    return f"`bench/results/{name}.json`, run of {run_date(doc)}"


def table(header: Sequence[str], rows: Iterable[Sequence[str]], right: Iterable[int] = ()) -> list[str]:
    aligned = set(right)
    lines = ["| " + " | ".join(header) + " |"]
    lines.append("| " + " | ".join("---:" if n in aligned else "---" for n in range(len(header))) + " |")
    lines.extend("| " + " | ".join(row) + " |" for row in rows)
    return lines


def not_recorded(value: Any, fmt: Callable[[Any], str] = str) -> str:
    return "not recorded" if value is None else fmt(value)


# --------------------------------------------------------------------------------------------- machine


def postgres_version(machine: Doc) -> str | None:
    postgres = machine.get("postgres")
    return str(postgres["server_version"]) if postgres else None


def postgres_text(machine: Doc) -> str:
    if machine and machine.get("postgres") is None and machine.get("database") is None:
        return "not used"
    return not_recorded(postgres_version(machine))


def duration(doc: Doc) -> str:
    seconds = doc["duration_s"]
    return f"{num(seconds, 1 if seconds < 10 else 0)} s"


def load_text(machine: Doc) -> str:
    before, after = machine.get("load_average_before"), machine.get("load_average_after")
    if before is None or after is None:
        return "not recorded"
    text = f"{before[0]:.2f} → {after[0]:.2f}"
    cores = machine.get("cpu_count") or 0
    # Only the load before the run is other people's work; the load after includes the run's own processes.
    return text + " (busy before)" if cores and before[0] >= cores else text


def code_text(machine: Doc) -> str:
    commit = machine.get("code_commit")
    if commit is None:
        return "not recorded"
    uncommitted = machine.get("code_uncommitted")
    if uncommitted is None:
        return f"`{commit[:7]}` (uncommitted files not recorded)"
    return f"`{commit[:7]}`" + (f" + {len(uncommitted)} uncommitted files" if uncommitted else "")


# What a commit costs depends on these more than on anything in Tollgate.
COMMIT_SETTINGS = ("fsync", "synchronous_commit", "wal_sync_method", "shared_buffers")


def database_text(machine: Doc) -> str:
    version = postgres_version(machine)
    described = f"PostgreSQL {version} server" if version else "PostgreSQL server (version not recorded)"
    postgres = machine.get("postgres") or {}
    settings = ", ".join(f"{key} {postgres[key]}" for key in COMMIT_SETTINGS if key in postgres)
    if settings:
        described += f" ({settings})"
    if machine.get("database") == "DATABASE_URL":
        return f"with `DATABASE_URL` pointing at a {described}; a scratch database is made and dropped"
    if machine.get("database") == "embedded":
        return f"with `DATABASE_URL` unset, so the benchmark starts the embedded {described}"
    return ""


def command_text(name: str, doc: Doc) -> tuple[str, bool]:
    """The command that made this run, and whether it had to be rebuilt from the recorded config."""
    if "command" in doc:
        return str(doc["command"]), False
    return DERIVED_COMMANDS[name](doc.get("config") or doc), True


def _flags(module: str, doc: Doc, options: Sequence[tuple[str, Any, Any]]) -> str:
    config = doc.get("config") or {}
    parts = ["python", "-m", module]
    if config.get("quick"):
        parts.append("--quick")
    for flag, value, default in options:
        if value is not None and value != default and not config.get("quick"):
            parts.extend([flag, ",".join(map(str, value)) if isinstance(value, list) else str(value)])
    return " ".join(parts)


def _acceptance_command(config: Doc) -> str:
    return _flags(
        "bench.acceptance",
        {"config": config},
        [
            ("--requests", config.get("requests_per_row"), 1000),
            ("--tenants", config.get("tenants"), 8),
            ("--http-concurrency", config.get("http_concurrency"), [1, 8]),
            ("--cold-repeats", config.get("cold_repeats"), 5),
        ],
    ) + ("" if config.get("full_system", True) else " --no-full-system")


def _relay_command(config: Doc) -> str:
    return _flags(
        "bench.relay",
        {"config": config},
        [
            ("--events", config.get("events"), 5000),
            ("--rounds", config.get("rounds"), 3),
            ("--tenants", config.get("tenants"), 8),
            ("--rate", config.get("latency_rate"), 50.0),
            ("--seconds", config.get("latency_seconds"), 20.0),
        ],
    )


def _drain_command(config: Doc) -> str:
    provider = config.get("provider") or {}
    return _flags(
        "bench.drain",
        {"config": config},
        [
            ("--heavy-jobs", config.get("heavy_jobs"), 2000),
            ("--window", config.get("window_s"), 100.0),
            ("--workers", config.get("workers"), 4),
            ("--slots", config.get("slots"), 6),
            ("--scenarios", config.get("scenarios"), ["global", "per_worker_aimd", "no_limit"]),
            ("--rpm", provider.get("requests_per_minute"), 720),
            ("--tpm", provider.get("tokens_per_minute"), 3_600_000),
            ("--concurrency", provider.get("max_concurrency"), 20),
            ("--latency", provider.get("latency_mean_s"), 2.0),
        ],
    )


def _accuracy_command(doc: Doc) -> str:
    samples = doc.get("samples") or {}
    return _flags(
        "bench.accuracy",
        {},
        [("--count", samples.get("count"), 100), ("--seed", samples.get("seed"), 7)],
    )


def _scale_command(config: Doc) -> str:
    return _flags(
        "bench.scale",
        {"config": config},
        [
            ("--samples", config.get("samples"), 200),
            ("--max-seconds", config.get("max_seconds_per_shape"), 60.0),
        ],
    )


DERIVED_COMMANDS: dict[str, Callable[[Doc], str]] = {
    "acceptance": _acceptance_command,
    "relay": _relay_command,
    "drain": _drain_command,
    "drain_tokens": lambda config: _drain_command(config) + " --profile tokens",
    "drain_many": lambda config: _drain_command(config) + " --profile many-tenants",
    "scale": _scale_command,
    "accuracy": _accuracy_command,
}


def provenance(name: str, doc: Doc) -> list[str]:
    """The lines under each section's title: which run, how to make it again, where."""
    machine = doc.get("machine") or {}
    command, derived = command_text(name, doc)
    lines = [
        f"Figures from {source(name, doc)} ({duration(doc)}). To reproduce"
        + (" (command rebuilt from the run's recorded configuration)" if derived else "")
        + ":",
        "",
        "```",
        command,
        "```",
        "",
    ]
    where = database_text(machine)
    if where:
        lines.extend([where[0].upper() + where[1:] + ".", ""])
    return lines


def machines_section(results: Mapping[str, Doc]) -> list[str]:
    rows = []
    for name, doc in results.items():
        machine = doc.get("machine") or {}
        memory = machine.get("memory_bytes")
        rows.append(
            [
                f"`{name}.json`",
                run_date(doc),
                duration(doc),
                not_recorded(machine.get("cpu_count")),
                not_recorded(machine.get("cpu_model") or None),
                not_recorded(memory, lambda b: f"{b / 2**30:.1f} GiB"),
                not_recorded(machine.get("python")),
                postgres_text(machine),
                load_text(machine),
                code_text(machine),
            ]
        )
    models = {doc["machine"].get("cpu_model") for doc in results.values() if doc.get("machine")} - {None}
    lines = [
        "## Where each run ran",
        "",
        *table(
            ["file", "run", "took", "cores", "CPU", "memory", "Python", "PostgreSQL", "load 1 min", "code"],
            rows,
            right=[2, 3],
        ),
        "",
        "Load is the 1-minute load average before and after the run (after includes the run's own "
        "processes); *busy before* means other work already kept every core occupied when it started.",
        "*code* is the commit checked out when the run started, and how many tracked files differed from it "
        "(the working tree is shared, so some of those may be unrelated work).",
    ]
    if len(models) > 1:
        lines.append(
            f"The runs did not all use the same CPU ({', '.join(sorted(models))}): compare figures within a "
            "run, never across files."
        )
    lines.append("")
    return lines


# ------------------------------------------------------------------------------------------ acceptance

EXPECTED_OUTCOME = {"handler": "202", "replay": "202 replayed", "baseline": "committed"}


def _unexpected(row: Doc) -> str | None:
    expected = EXPECTED_OUTCOME.get(row["kind"])
    others = {k: v for k, v in row["statuses"].items() if k != expected}
    integrity = row.get("integrity")
    problems = [f"{count} answered {status}" for status, count in others.items()]
    if integrity and (
        integrity["missing"] or integrity["wrong_tenant"] or integrity["found"] != integrity["sent"]
    ):
        problems.append(
            f"{integrity['found']} jobs for {integrity['sent']} keys ({integrity['missing']} never made, "
            f"{integrity['wrong_tenant']} under another tenant)"
        )
    return f"{row['name']}: " + ", ".join(problems) + f" of {row['requests']}" if problems else None


def _row(rows: Sequence[Doc], **match: Any) -> Doc | None:
    for row in rows:
        if all(row.get(key) == value for key, value in match.items()):
            return row
    return None


def acceptance_section(doc: Doc) -> list[str]:
    rows = doc["throughput"]
    config = doc["config"]
    lines = ["## Acceptance: what one accepted job costs", "", *provenance("acceptance", doc)]
    lines += [
        "Each request is a new job (its own Idempotency-Key and document text), "
        f"{config['requests_per_row']:,} a row after {config['warmup_per_row']} warm-up requests, with "
        f"{config['tenants']} tenants and with one, since acceptance holds a per-tenant lock. The floor is "
        "`insert_job` + `insert_outbox_event` in one transaction, the statements `accept_job` runs, "
        "measured in the same run at the same concurrency; every other row is divided by it. It is "
        "mostly the commit's WAL flush, so it moves with the server and its disk: compare ratios to it only "
        "between runs on the same server. Rows run one "
        "after another, so a burst of other work on the machine lands on one row: the drift column (p50 of "
        "a row's last tenth over its first) shows a row that changed pace while it ran.",
        "",
    ]
    table_rows = []
    for row in rows:
        vs = row.get("vs_baseline") or {}
        latency = row["latency_ms"]
        table_rows.append(
            [
                row["name"],
                ", ".join(f"{count:,} {status}" for status, count in row["statuses"].items()),
                num(row["throughput_rps"]),
                ms(latency["p50"]),
                ms(latency["p99"]),
                times(vs["throughput"]) if vs else "",
                times(vs["p50"]) if vs else "",
                times(vs["p99"]) if vs else "",
                times(row["drift"]["last_over_first"]),
            ]
        )
    lines += table(
        [
            "row",
            "outcomes",
            "req/s",
            "p50 ms",
            "p99 ms",
            "÷ floor req/s",
            "÷ floor p50",
            "÷ floor p99",
            "drift",
        ],
        table_rows,
        right=range(2, 9),
    )
    lines.append("")

    notes = []
    floor1 = _row(rows, kind="baseline", concurrency=1)
    in_process = _row(rows, kind="handler", path="in_process")
    if floor1 and in_process:
        p50, floor_p50 = in_process["latency_ms"]["p50"], floor1["latency_ms"]["p50"]
        notes.append(
            f"In process, one request at a time, an accepted job takes {ms(p50)} ms at p50: "
            f"{times(in_process['vs_baseline']['p50'])} the floor's {ms(floor_p50)} ms, "
            "for routing and validation, the tenant scope, the lock, the idempotency lookup, admission's "
            "counters, the document (in its row when small, else an S3 put) and the response."
        )
    replay = _row(rows, kind="replay", path="in_process")
    if replay and in_process:
        notes.append(
            "A replayed request (same key, same body) answers in "
            f"{ms(replay['latency_ms']['p50'])} ms at p50, "
            f"{times(replay['latency_ms']['p50'] / in_process['latency_ms']['p50'])} the first request's."
        )
    top = max(config["http_concurrency"])
    many = _row(rows, kind="handler", path="http", tenants=config["tenants"], concurrency=top)
    one = _row(rows, kind="handler", path="http", tenants=1, concurrency=top)
    if many and one:
        notes.append(
            f"Over HTTP with {top} clients, one tenant gets {num(one['throughput_rps'])} req/s against "
            f"{num(many['throughput_rps'])} for {config['tenants']} tenants "
            f"({times(one['throughput_rps'] / many['throughput_rps'])}): what the per-tenant lock costs a "
            "tenant that sends in parallel."
        )
    full = _row(rows, path="http_full_system")
    if full and many:
        notes.append(
            "While the whole local system works off the accepted jobs in the same process, acceptance "
            f"runs at {times(full['throughput_rps'] / many['throughput_rps'])} the rate of the HTTP row "
            "with the pipeline off: the workers, relay and simulated provider share the same two cores."
        )
    problems = [text for text in map(_unexpected, rows) if text]
    if problems:
        notes.append("Requests that did not get the expected answer: " + "; ".join(problems) + ".")
    else:
        notes.append(
            "Every request got the expected answer, and every key made exactly one job under its own tenant."
        )
    lines += [f"- {note}" for note in notes]
    lines.append("")
    if doc.get("cost_split"):
        lines += cost_split_lines(doc["cost_split"], floor1, in_process)
    lines += cold_start_lines(doc["cold_start"])
    return lines


# The issue 14 target for the in-process row, checked here, never asserted.
IN_PROCESS_MAX_OVER_FLOOR = 3.0


def cost_split_lines(split: Doc, floor: Doc | None, in_process: Doc | None) -> list[str]:
    small, large = split["in_row"], split["in_s3"]
    lines = [
        "### Where an in-process request's time goes",
        "",
        f"{small['requests']:,} more new jobs through the in-process handler, one at a time, each request's "
        "time split at the seams between its parts (the wrappers that time them are on for these rows only, "
        "so the whole runs a little above the row above); then as many again with "
        f"{large['padding_chars']:,} more characters of text each, so that every document is over the row "
        "limit and is put in S3 before its job is written.",
        "",
    ]
    rows = [
        [
            name.replace("_", " "),
            ms(part["p50_ms"]),
            f"{part['share_of_mean']:.0%}",
            ms(large["parts"][name]["p50_ms"]),
            f"{large['parts'][name]['share_of_mean']:.0%}",
            part["what"],
        ]
        for name, part in small["parts"].items()
    ]
    rows.append(["whole request", ms(small["total_ms"]["p50"]), "", ms(large["total_ms"]["p50"]), "", ""])
    lines += table(
        ["part", "in its row: p50 ms", "share", "in S3: p50 ms", "share", "what it covers"],
        rows,
        right=range(1, 5),
    )
    lines.append("")
    if floor and in_process:
        ratio = in_process["latency_ms"]["p50"] / floor["latency_ms"]["p50"]
        verdict = "held" if ratio <= IN_PROCESS_MAX_OVER_FLOOR else "**missed**"
        lines += [
            "Target of issue 14, checked here, not asserted by any test: the in-process row within "
            f"{times(IN_PROCESS_MAX_OVER_FLOOR)} the floor at p50: {verdict} ({times(ratio)}, "
            f"{ms(in_process['latency_ms']['p50'])} ms against {ms(floor['latency_ms']['p50'])} ms). "
            "A document over the row limit pays its S3 put on top "
            f"({ms(large['total_ms']['p50'])} ms for the whole request at p50).",
            "",
        ]
    return lines


COLD_START_NAMES = {
    "bare_python": "bare interpreter",
    "import_app": "import the API's modules",
    "import_handler": "the API Lambda's handler: import, pool ready, one real job",
}


def cold_start_lines(cold: Doc) -> list[str]:
    rows = []
    for row in cold["rows"]:
        wall = row["process_wall_ms"]
        inside = ", ".join(
            f"{key.removesuffix('_ms')} {ms(value)}" for key, value in row["in_child_ms"].items()
        )
        rows.append(
            [
                COLD_START_NAMES.get(row["name"], row["name"]),
                f"`{row['command']}`",
                ms(wall["median"]),
                spread(wall["min"], wall["max"], ms),
                f"{row['vs_bare_python']:.1f}{TIMES}",
                inside,
            ]
        )
    packages = ", ".join(
        f"{entry['package']} {ms(entry['self_ms'])} ms ({pct(entry['share'], 0)})"
        for entry in cold["import_self_time_by_package"][:6]
    )
    statuses = ", ".join(
        f"{count} {TIMES} {status}" for status, count in cold["first_request_statuses"].items()
    )
    return [
        f"### Cold start (median of {cold['repeats']} fresh interpreters, same run)",
        "",
        *table(
            ["measure", "command", "wall ms", f"min{DASH}max", "÷ bare", "inside the child, ms"],
            rows,
            right=[2, 3, 4],
        ),
        "",
        f"First responses: {statuses}. Import self time by top-level package (one `-X importtime` run): "
        f"{packages}.",
        "",
        "moto serves S3 from inside the benchmark process and PostgreSQL is local, so the S3 put and every "
        "query cost a loopback round trip, not a network one; a Lambda cold start also pays for its "
        "runtime's own start, which none of these rows include.",
        "",
    ]


# ----------------------------------------------------------------------------------- cold start, compared

COLD_START_MEASURES = (
    ("import_ms", "import"),
    ("import_cpu_ms", "import, CPU"),
    ("to_first_response_ms", "to first response"),
    ("process_wall_ms", "whole process"),
)


def cold_start_section(doc: Doc) -> list[str]:
    config, targets = doc["config"], doc["targets_ms"]
    rows = []
    for row in doc["rows"]:
        cells = [row["name"]]
        for key, _ in COLD_START_MEASURES:
            cells.append(f"{ms(row[key]['median'])} ({spread(row[key]['min'], row[key]['max'], ms)})")
        cells.append(", ".join(f"{count} {TIMES} {status}" for status, count in row["statuses"].items()))
        rows.append(cells)
    head = _row(doc["rows"], code="head", bytecode=True)
    base = _row(doc["rows"], code="base", bytecode=False)
    verdicts = []
    if head is not None:
        for key, label in (("import_ms", "import"), ("to_first_response_ms", "first response")):
            value = head[key]["median"]
            held_text = "held" if value <= targets[key] else "missed"
            verdicts.append(f"{label} {ms(value)} ms against {ms(targets[key])} ms: **{held_text}**")
    gain = ""
    if head is not None and base is not None:
        gain = (
            f" Against the base commit as it shipped (no bytecode), the first response comes "
            f"{times(base['to_first_response_ms']['median'] / head['to_first_response_ms']['median'])} "
            "sooner."
        )
    return [
        "## API Lambda cold start: before and after, in Lambda's layout",
        "",
        *provenance("cold_start", doc),
        f"Each variant is a fresh CPython {config['python']} process whose `PYTHONPATH` holds only "
        "a function code folder and a dependencies folder, and which may not write bytecode (Lambda's "
        f"file system is read-only). *base* is the code where this work left `{config['base']}` "
        f"(`{config['base_commit'][:7]}`), *head* the working tree; the dependencies are uv.lock's "
        "runtime pins installed as layers/build.py installs the layer, for this machine "
        f"({config['platform']}); *bytecode* means unchecked-hash pycs compiled as layers/build.py "
        "compiles them. One event per process: import the handler, wait for the pool's first "
        f"connection, serve one new job. Median of {config['repeats']} rounds (min{DASH}max), "
        "interleaved; a warm-up round is not counted. CPU is the process's CPU time during the import, "
        "the pool's connecting thread included: it is the figure least moved by other work on the "
        "machine.",
        "",
        *table(
            ["variant", *(f"{label}, ms" for _, label in COLD_START_MEASURES), "first responses"],
            rows,
            right=[1, 2, 3, 4],
        ),
        "",
        "Targets of issue 17 for the head with bytecode, checked here, not asserted by any test: "
        + "; ".join(verdicts)
        + "."
        + gain,
        "",
        "PostgreSQL is local and no AWS call is made (a small document stays in its row and no relay "
        "nudge is configured), so these rows leave out what a deployed cold start also pays: the "
        "runtime's own start, the database secret's fetch (which loads botocore in the pool's thread) "
        "and a connection over the network.",
        "",
    ]


# ---------------------------------------------------------------------------------------------- relay


def _pooled_share(rounds: Sequence[Doc]) -> dict[str, float]:
    """Where the relay's busy time went, over all rounds, weighted by each round's busy time."""
    busy = sum(r["breakdown"]["busy_s"] for r in rounds)
    keys = rounds[0]["breakdown"]["share"].keys()
    return {
        k: sum(r["breakdown"]["share"][k] * r["breakdown"]["busy_s"] for r in rounds) / busy for k in keys
    }


def relay_section(doc: Doc) -> list[str]:
    config, ratios = doc["config"], doc["ratios"]
    rows = doc["throughput"]
    lines = ["## Outbox relay: backlog drain and commit-to-publish latency", "", *provenance("relay", doc)]
    lines += [
        f"A pre-loaded outbox of {config['events']:,} events a row is drained into a moto SQS FIFO queue "
        "over HTTP by one relay and by two, beside the floor: the very `SendMessageBatch` requests the relay "
        "would send, built beforehand and sent back to back. Each row runs "
        f"{config['rounds']} rounds, interleaved with the others so that a change in the machine's load "
        "touches every row alike; ratios are taken per round, then the median. Then one event at a time is "
        f"committed at {num(config['latency_rate'], 0)}/s for {num(config['latency_seconds'], 0)} s while a "
        "nudged relay publishes it.",
        "",
    ]
    table_rows = []
    for row in rows:
        vs_floor, vs_c1 = row.get("vs_floor"), row.get("vs_c1")
        table_rows.append(
            [
                row["name"],
                num(row["per_s"]["median"], 0),
                spread(row["per_s"]["min"], row["per_s"]["max"], lambda v: num(v, 0)),
                f"{times(vs_floor['median'])} ({spread(vs_floor['min'], vs_floor['max'], times)})"
                if vs_floor
                else "",
                f"{times(vs_c1['median'])} ({spread(vs_c1['min'], vs_c1['max'], times)})" if vs_c1 else "",
                ms(row["call_ms"]["p50"]),
            ]
        )
    lines += table(
        [
            "row",
            "events/s (median)",
            f"min{DASH}max",
            "÷ floor, same senders",
            "÷ one sender",
            "SendMessageBatch p50 ms",
        ],
        table_rows,
        right=range(1, 6),
    )
    lines.append("")
    relay_rows = [row for row in rows if row["kind"] == "relay"]
    events = sum(r["events"] for row in rows for r in row["rounds"] if row["kind"] == "relay")
    twice = sum(r["checks"]["confirmed_twice_or_more"] for row in relay_rows for r in row["rounds"])
    unpublished = sum(r["checks"]["unpublished_in_db"] for row in relay_rows for r in row["rounds"])
    notes = []
    one = _row(relay_rows, concurrency=1)
    if one:
        share = _pooled_share(one["rounds"])
        claim = statistics.median(r["breakdown"]["per_batch_ms"]["claim_p50"] for r in one["rounds"])
        mark = statistics.median(r["breakdown"]["per_batch_ms"]["mark_p50"] for r in one["rounds"])
        alone = ratios["relay_over_floor_c1"]
        notes.append(
            f"One relay publishes at {times(alone['median'])} the floor's rate "
            f"(rounds: {spread(alone['min'], alone['max'], times)}). "
            f"{pct(share['sqs'], 0)} of its busy time is the SQS calls; claiming and marking a batch of "
            f"{config['relay_settings']['relay_batch_size']} take {ms(claim)} and {ms(mark)} ms at p50."
        )
    if "relay_c2_over_c1" in ratios:
        notes.append(
            f"Two relays reach {times(ratios['relay_c2_over_c1']['median'])} one relay's rate, while a "
            f"second sender gives the floor itself {times(ratios['floor_c2_over_c1']['median'])}: past one "
            "relay, moto is the ceiling, not the relay."
        )
    notes.append(
        f"{twice:,} of {events:,} relayed events were confirmed more than once (each confirmation is counted "
        f"per event id, so moto's deduplication cannot hide a double publish); {unpublished} were left "
        "unpublished."
    )
    lines += [f"- {note}" for note in notes]
    lines.append("")
    latency, single = doc["latency"], doc["single_message"]
    lat_rows = []
    for label, figures in (
        ("commit → SQS confirmation (nudged relay)", latency["commit_to_confirm_ms"]),
        ("stored `created_at` → SQS confirmation", latency["created_at_to_confirm_ms"]),
        (
            f"floor: `SendMessageBatch` of 1, paced at {num(single['paced_rate_per_s'], 0)}/s",
            single["paced"]["call_ms"],
        ),
        ("floor: `SendMessageBatch` of 1, back to back", single["back_to_back"]["call_ms"]),
    ):
        lat_rows.append(
            [label, ms(figures["p50"]), ms(figures["p90"]), ms(figures["p99"]), ms(figures["max"])]
        )
    lines += [
        f"### Commit-to-publish latency ({latency['events']:,} events at "
        f"{num(latency['achieved_rate_per_s'])}/s)",
        "",
        *table(["measure", "p50 ms", "p90 ms", "p99 ms", "max ms"], lat_rows, right=range(1, 5)),
        "",
        f"- An event's p50 from commit to confirmation is {times(latency['vs_single_message_p50']['paced'])} "
        "a paced one-message call's: the nudge, the claim and the mark add that much to the send itself. "
        f"{latency['relay_runs']:,} relay runs published {latency['events_per_run']:.2f} events each; "
        f"{latency['empty_runs']} found nothing; {latency['unpublished']} events were left unpublished.",
        "",
        "moto answers on 127.0.0.1 with no network between it and the relay, and it is slower than SQS "
        "where SQS scales out: every figure in this section is bounded by moto on this machine. Read the "
        "relay against the floor, which pays the same moto cost in the same run; the absolute rates say "
        "nothing about SQS.",
        "",
    ]
    return lines


# ---------------------------------------------------------------------------------------------- drain

DRAIN_TITLES = {
    "global": "shared DynamoDB budget",
    "per_worker_aimd": "per-worker AIMD (baseline)",
    "no_limit": "no limiter, retry on 429 (baseline)",
}


# Names short enough for a table cell, for the baselines beside the shared budget.
DRAIN_SHORT = {"per_worker_aimd": "per-worker AIMD", "no_limit": "no limiter"}


DRAIN_HEADINGS = {
    "drain": "## Provider budget and fairness (drain)",
    "drain_tokens": "## Provider budget and fairness when tokens per minute bind (drain, tokens profile)",
    "drain_many": "## Provider budget and fairness with many light tenants (drain, many-tenants profile)",
}


def drain_tokens_section(doc: Doc) -> list[str]:
    return drain_section(doc, "drain_tokens")


def drain_many_section(doc: Doc) -> list[str]:
    return drain_section(doc, "drain_many")


def _light_arrivals(config: Doc) -> str:
    """Who submits the light jobs, and when (files from before ``light_span`` was recorded used 0.6)."""
    each = config["light_jobs_each"]
    span = config["window_s"] * config.get("light_span", 0.6)
    return (
        f"{config['light_tenants']:,} light tenants submit {each} job{'s' if each != 1 else ''} each while "
        f"it drains, one job at a time, evenly over the window's first {num(span, 0)} s"
    )


def drain_section(doc: Doc, name: str = "drain") -> list[str]:
    config, targets = doc["config"], doc["targets"]
    provider = config["provider"]
    scenarios = doc["scenarios"]
    lines = [DRAIN_HEADINGS[name], "", *provenance(name, doc)]
    first = scenarios[0]
    capacity = first["capacity_jobs_per_s"]
    binding = min(("requests_per_minute", "tokens_per_minute", "concurrency"), key=lambda k: capacity[k])
    workers = f"{config['workers']} `worker.main` processes {TIMES} {config['slots']} slots"
    quotas = (
        f"{provider['requests_per_minute']:,} requests/min, {provider['tokens_per_minute']:,} tokens/min, "
        f"{provider['max_concurrency']} calls in flight"
    )
    backlog = f"A heavy tenant's backlog of {config['heavy_jobs']:,} jobs; {_light_arrivals(config)}"
    limits = (
        f"requests {num(capacity['requests_per_minute'], 2)}, tokens {num(capacity['tokens_per_minute'], 2)} "
        f"at {num(first['reserved_tokens_per_job'], 0)} reserved tokens a job, "
        f"concurrency {num(capacity['concurrency'], 2)}"
    )
    lines += [
        f"{workers} against the simulated provider ({quotas}, lognormal latency averaging "
        f"{num(provider['latency_mean_s'])} s). {backlog}; {num(config['window_s'], 0)} s per limiter, one "
        f"after the other in the same run"
        + (
            ""
            if len(scenarios) > 1
            else " (only the shared budget in this run; `--scenarios` adds the baselines)"
        )
        + (
            f", each window opening after the backlog has drained for {num(config['warmup_s'], 0)} s "
            "(the provider's per-minute buckets start full, so the first minute is a burst bound by "
            "something else)"
            if config.get("warmup_s")
            else ""
        )
        + f". Capacity is min({limits}) = {num(capacity['binding'], 2)} jobs/s, "
        f"bound by {binding.replace('_', ' ')}.",
        "",
    ]
    baseline = next((s for s in scenarios if s["key"] == "global"), None)
    rows = []
    for s in scenarios:
        light = s["light"]
        rows.append(
            [
                DRAIN_TITLES.get(s["key"], s["title"]),
                num(s["jobs_per_s"], 2),
                pct(s["share_of_capacity"], 0),
                times(s["jobs_per_s"] / baseline["jobs_per_s"]) if baseline else "",
                f"{s['provider_429s']:,} / {s['attempts']:,} ({pct(s['rejected_share'])})",
                f"{s['provider_max_in_flight']} / {s['provider_in_flight_cap']}",
                f"{num(light['p95_s'])} s" if light["count"] else "none finished",
                f"{s['light_p95_over_service']:.1f}{TIMES}" if light["count"] else "",
                f"{light['count']:,} of {s['light_submitted']:,}",
                f"{s['failed']:,}",
            ]
        )
    lines += table(
        [
            "limiter",
            "jobs/s",
            "of capacity",
            "÷ shared budget",
            "provider 429s / attempts",
            "max in flight / cap",
            "light tenants' p95",
            "÷ one job",
            "light jobs done",
            "jobs failed",
        ],
        rows,
        right=range(1, 10),
    )
    lines.append("")
    if baseline:
        held = [
            (
                f"at least {pct(targets['global_min_share_of_capacity'], 0)} of capacity",
                baseline["share_of_capacity"] >= targets["global_min_share_of_capacity"],
            ),
            (
                f"at most {pct(targets['global_max_rejected_share'], 0)} of attempts refused",
                baseline["rejected_share"] <= targets["global_max_rejected_share"],
            ),
            (
                "never above the provider's in-flight cap",
                baseline["provider_max_in_flight"] <= baseline["provider_in_flight_cap"],
            ),
            (
                f"light tenants' p95 within {targets['light_p95_max_multiple_of_service_time']:g}{TIMES} "
                f"one job's service time ({num(baseline['solo_service_s'])} s)",
                baseline["light_p95_over_service"] <= targets["light_p95_max_multiple_of_service_time"],
            ),
        ]
        lines += [
            "Targets for the shared budget, recorded in the file and checked here, not asserted by any test: "
            + "; ".join(f"{text}: {'held' if ok else '**missed**'}" for text, ok in held)
            + ".",
            "",
        ]
        peek = baseline.get("peek_during_window")
        if peek and peek["count"]:
            lines += [
                "The claim's cost during the window: the peek every slot makes before it claims (the same "
                "run-queue reads as the claim, taking nothing), timed by the benchmark twice a second with "
                f"{config['light_tenants'] + 2:,} tenants in the database: p50 {ms(peek['p50_s'] * 1000)} "
                f"ms, p95 {ms(peek['p95_s'] * 1000)} ms, max {ms(peek['max_s'] * 1000)} ms "
                f"({peek['count']} samples).",
                "",
            ]
    simulator = (baseline or first).get("simulator") or {}
    if binding == "tokens_per_minute" and simulator.get("completions"):
        prompt = simulator["prompt_tokens"] / simulator["completions"]
        lines += [
            f"Capacity counts the {num(first['reserved_tokens_per_job'], 0)} tokens Tollgate reserves per "
            f"job. The simulated provider charges each call its own prompt estimate ({num(prompt, 0)} tokens "
            "on average in this run) plus the completion tokens asked for, which comes to less, so a "
            "tokens-bound run can go past 100% of that capacity; compare the limiters with each other, not "
            "with 100%.",
            "",
        ]
    moto = "DynamoDB is moto in a child process, its requests serialized."
    if len(scenarios) > 1:
        moto = (
            "The simulated provider refuses an excess call at once and cheaply, so the baselines' throughput "
            "looks close to the budget's; what they pay shows in refused attempts, failed jobs and the light "
            f"tenants' wait. {moto}"
        )
    lines += [moto, ""]
    return lines


# ---------------------------------------------------------------------------------------------- scale


def held(ok: bool) -> str:
    return "held" if ok else "**missed**"


def scale_section(doc: Doc) -> list[str]:
    config, targets, summary = doc["config"], doc["targets"], doc["summary"]
    claims, accepts = doc["claims"], doc["accept"]
    seeding = config["seeding"]
    lines = ["## Scale: claims and acceptance as tenants and backlogs grow", "", *provenance("scale", doc)]
    seeded = (
        "with triggers off, then `tollgate_backfill_queues()` to rebuild what the triggers keep"
        if seeding["triggers_off"] and seeding["backfill"]
        else "with triggers off (the schema has no queue backfill to run)"
        if seeding["triggers_off"]
        else "with triggers on (the server refused to turn them off)"
    )
    lines += [
        f"Each shape is seeded set-based into one scratch database, {seeded}; it is grown from the shape "
        "before where it can be, then vacuumed and analyzed. In each shape the "
        "fair claim (`claim_next_job`'s query), the peek (`peek_next_job`) and the floor run in turn, the "
        f"order rotating, up to {config['samples']} rounds or {num(config['max_seconds_per_shape'], 0)} s "
        f"(at least {config['min_samples']} rounds), after {config['warmup']} warm-up rounds. Claims run as "
        "`tollgate_system` through the project's `Database`, one transaction each, rolled back so the "
        "shape never changes; the time is the whole transaction. The floor is a plain "
        "`FOR UPDATE SKIP LOCKED LIMIT 1` claim on an index of its own (made only while claims are "
        "measured, on an expression no project query uses, so it cannot speed up the fair claim too). It "
        "ignores tenants, backoff and deadlines, so its plan is the same in every shape (the first entry of "
        "its index): the ratio is what a correct, fair pick adds. Its time still moves somewhat with the "
        "table; its own largest ÷ smallest is given under the targets.",
        "",
    ]
    smallest = claims[0]["claim_ms"]["p50"] if claims else 1.0
    rows = []
    for shape in claims:
        claim, plain, peek = shape["claim_ms"], shape["plain_ms"], shape["peek_ms"]
        rows.append(
            [
                shape["label"],
                f"{shape['counts']['jobs']:,}",
                ms(claim["p50"]),
                ms(claim["p95"]),
                ms(claim["p99"]),
                ms(plain["p50"]),
                times(shape["claim_over_plain"]["p50"]),
                times(shape["claim_over_plain"]["p99"]),
                ms(peek["p50"]),
                times(shape["peek_over_plain"]["p50"]),
                times(claim["p50"] / smallest),
                str(shape["samples"]),
            ]
        )
    lines += table(
        [
            "shape",
            "jobs",
            "claim p50 ms",
            "p95",
            "p99",
            "plain claim p50",
            "claim ÷ plain p50",
            "÷ plain p99",
            "peek p50 ms",
            "peek ÷ plain p50",
            "claim ÷ first shape",
            "rounds",
        ],
        rows,
        right=range(1, 12),
    )
    lines += [
        "",
        "Acceptance: `accept_job` for one tenant (as `tollgate_app`, documents in an in-memory store, so no "
        "S3 round trip), beside the raw two inserts it makes (`insert_job` + `insert_outbox_event` in one "
        "transaction, as the owner, committed), alternating, while the tenant's backlog of READY jobs grows. "
        "The tenant's limits are lifted and the system cap sits above every backlog, so every request is "
        "accepted and admission counts what it must.",
        "",
    ]
    first_accept = accepts[0]["accept_ms"]["p50"] if accepts else 1.0
    accept_rows = []
    for row in accepts:
        accept, raw = row["accept_ms"], row["raw_ms"]
        accept_rows.append(
            [
                f"{row['backlog']:,}",
                ms(accept["p50"]),
                ms(accept["p95"]),
                ms(accept["p99"]),
                ms(raw["p50"]),
                ms(raw["p99"]),
                times(row["accept_over_raw"]["p50"]),
                times(row["accept_over_raw"]["p99"]),
                times(accept["p50"] / first_accept),
                ", ".join(f"{count:,} {what}" for what, count in row["outcomes"].items()),
            ]
        )
    lines += table(
        [
            "tenant backlog",
            "accept p50 ms",
            "p95",
            "p99",
            "raw inserts p50",
            "raw p99",
            "accept ÷ raw p50",
            "÷ raw p99",
            "accept ÷ first backlog",
            "outcomes",
        ],
        accept_rows,
        right=range(0, 9),
    )
    lines.append("")
    lines += scale_targets(targets, summary, claims, accepts)
    return lines


def scale_targets(targets: Doc, summary: Doc, claims: Sequence[Doc], accepts: Sequence[Doc]) -> list[str]:
    """Issue 14's targets against the run: ratios at p50, flatness as the largest shape over the smallest."""
    by_key = {shape["key"]: shape["label"] for shape in claims}
    flat = targets["max_largest_over_smallest"]
    checks = []
    claim = summary.get("claim")
    if claim:
        worst = claim["worst_over_plain_p50"]
        spread_ = claim["claim"]["largest_over_smallest"]
        checks += [
            f"claim ≤ {targets['claim_max_over_plain']:g}{TIMES} the plain claim at every size: "
            f"{held(worst <= targets['claim_max_over_plain'])} (worst {times(worst)}, "
            f"{by_key[claim['worst']]})",
            f"claim flat, largest ÷ smallest ≤ {flat:g}{TIMES}: {held(spread_ <= flat)} "
            f"({times(spread_)}, {by_key[claim['claim']['largest']]} over {by_key[claim['smallest']]})",
        ]
    accept = summary.get("accept")
    if accept:
        worst = accept["worst_over_raw_p50"]
        spread_ = accept["accept_largest_over_smallest"]
        checks += [
            f"accept ≤ {targets['accept_max_over_raw']:g}{TIMES} the raw inserts at every backlog: "
            f"{held(worst <= targets['accept_max_over_raw'])} (worst {times(worst)}, at a backlog of "
            f"{accept['worst']:,})",
            f"accept flat, largest backlog ÷ smallest ≤ {flat:g}{TIMES}: {held(spread_ <= flat)} "
            f"({times(spread_)})",
        ]
    lines = []
    if checks:
        lines += [
            "Targets of issue 14, checked here, not asserted by any test: " + "; ".join(checks) + ".",
            "",
        ]
    notes = []
    if claim:
        notes.append(
            f"The floors' own largest ÷ smallest, the noise to read the flatness figures against: plain "
            f"claim {times(claim['plain']['largest_over_smallest'])}"
            + (f", raw inserts {times(accept['raw_largest_over_smallest'])}" if accept else "")
            + f". The peek's: {times(claim['peek']['largest_over_smallest'])}."
        )
        wrong = claim["wrong_picks"]
        notes.append(
            "Every measured claim took a job of a tenant with runnable work."
            if not wrong
            else f"**{wrong} measured claims took nothing, or a job of a tenant with nothing runnable.**"
        )
    if any(shape["key"] == "past_deadline" for shape in claims):
        notes.append(
            "The past-deadline shape: a claim that meets jobs past their deadline ends them as it goes "
            "(each with its event and attempt row), up to 16 a claim, then walks past up to 4 more tenants "
            "whose next job is expired and, finding none runnable here, takes nothing that time. Rolled back "
            "after each round, every round meets the same jobs again, so its row is the price of 16 endings "
            "and 4 probes a claim: bounded, whatever the number of expired jobs behind them. In service each "
            "expired job is ended once, by a claim or by the scheduler's deadline pass; the "
            "wrong picks above are these rounds."
        )
    if accept and accept["not_accepted"]:
        notes.append(f"**{accept['not_accepted']} requests were not accepted** (see the outcomes column).")
    lines += [f"- {note}" for note in notes]
    if notes:
        lines.append("")
    return lines


# ------------------------------------------------------------------------------------------- accuracy


def accuracy_section(doc: Doc) -> list[str]:
    provider, samples, accuracy = doc["provider"], doc["samples"], doc["accuracy"]
    lines = ["## Extraction accuracy", "", *provenance("accuracy", doc)]
    kinds = ", ".join(f"{count} {kind.replace('_', ' ')}" for kind, count in samples["kinds"].items())
    evidence = accuracy["evidence_resolves"]
    by_kind = ", ".join(
        f"{kind.replace('_', ' ')} {score['matched']}/{score['total']}"
        for kind, score in accuracy["exact_documents_by_kind"].items()
    )
    latency = doc["latency_ms"]
    lines += [
        f"{samples['count']} sample invoices (seed {samples['seed']}: {kinds}) through the "
        f"{provider['endpoint']} (model `{provider['model']}`, prompt `{doc['prompt_version']}`, schema "
        f"`{doc['response_schema']}`), each answer parsed into the strict schema and compared field by field "
        "with the ground truth.",
        "",
        f"- Documents extracted exactly: {accuracy['exact_documents']} of {accuracy['documents']} "
        f"({pct(accuracy['document_accuracy'])}); by kind: {by_kind}.",
        f"- Fields matched: {pct(accuracy['field_accuracy'])}; evidence spans that resolve to the OCR text: "
        f"{evidence['matched']:,} of {evidence['total']:,}.",
        f"- Call latency p50 {ms(latency['p50'])} ms, p95 {ms(latency['p95'])} ms.",
        "",
    ]
    if provider["kind"] == "simulated":
        lines += [
            "With the simulated provider this proves the harness, not a model: the simulator reads the "
            "sample format exactly. There is no baseline to set beside it until the same command runs "
            "with `OPENAI_BASE_URL`/`OPENAI_API_KEY` set against a real model.",
            "",
        ]
    return lines


# ----------------------------------------------------------------------------------------- policy cost


def policy_cost_section(doc: Doc) -> list[str]:
    lines = ["## Validation policy cost", "", *provenance("policy_cost", doc)]
    rows = doc["shapes"]
    lines += [
        "What each job type's policy costs a worker per result, beside the plain step every result already "
        "takes (parsing the model's JSON into the strict output schema), measured side by side in each of "
        f"{rows[0]['rounds']} rounds; p50 of the rounds. The longest invoice prints every value and label "
        "many times over, the search's worst case.",
        "",
        *table(
            ["document", "policy", "values located", "parse", "policy", "policy ÷ parse", "policy a page"],
            [
                [
                    row["shape"],
                    f"`{row['policy_version']}`",
                    str(row["values_located"]),
                    f"{ms(row['parse_ms_p50'])} ms",
                    f"{ms(row['policy_ms_p50'])} ms",
                    times(row["policy_over_parse"]),
                    f"{ms(row['policy_per_page_ms'])} ms",
                ]
                for row in rows
            ],
            right=[2, 3, 4, 5, 6],
        ),
        "",
        "The policy reads the page itself (every value's candidates, the labels of their lines), so it costs "
        "far more than a parse; it grows with the pages, not with anything stored, and stays milliseconds "
        "against a provider call of seconds.",
        "",
    ]
    return lines


MODEL_CELLS = {
    "correct_succeeded": "correct + SUCCEEDED",
    "wrong_review_required": "wrong + REVIEW_REQUIRED (caught)",
    "wrong_succeeded": "**wrong + SUCCEEDED (silently wrong, target 0)**",
    "correct_review_needless": "correct + REVIEW_REQUIRED, the document passes the policy (needless review)",
    "correct_review_expected": "correct + REVIEW_REQUIRED, the document itself breaks the policy (expected)",
    "failed_invalid_output": "FAILED_TERMINAL: invalid output",
    "failed_other": "FAILED_TERMINAL: other",
}


def _rate_text(rate: float | None) -> str:
    return "-" if rate is None else pct(rate)


def model_accuracy_section(doc: Doc) -> list[str]:
    """Schema v1 measured invoices only; v2 measures every job type, each with its own figures."""
    if doc.get("schema") == "tollgate.bench.model_accuracy/v1":
        return _model_accuracy_v1_section(doc)
    return _model_accuracy_v2_section(doc)


def _model_accuracy_v1_section(doc: Doc) -> list[str]:
    model, engine, samples, config = doc["model"], doc["engine"], doc["samples"], doc["config"]
    matrix, accuracy, timing = doc["confusion"], doc["accuracy"], doc["seconds_per_extraction"]
    structured = doc["structured_output"]
    kinds = ", ".join(f"{count} {kind.replace('_', ' ')}" for kind, count in samples["kinds"].items())
    lines = ["## Real-model accuracy", "", *provenance("model_accuracy", doc)]
    if config["limit"] is not None:
        lines += [
            f"**A smoke run:** the first {samples['count']} of the {config['count']}-invoice set. It shows "
            "the harness and the model work end to end; it is too small to say how often the model is wrong.",
            "",
        ]
    lines += [
        f"{samples['count']} sample invoices (seed {config['samples_seed']}: {kinds}) accepted into a "
        "scratch database and run by the worker's own attempt code (fair claim, budget permit, provider "
        f"call, strict parsing, validation policy, fenced commit) against {model['name']} "
        f"{model['quantization']} ({num(model['bytes'] / 1e9, 2)} GB GGUF from {model['source']}), served "
        "on 127.0.0.1 by "
        f"{engine['name']} {engine['version']} ({engine['build']} CPU build, {engine['threads']} threads, "
        f"{engine['context_size']:,}-token context) in the OpenAI wire format; "
        f"{config['decoding']}, {config['max_attempts']} attempt(s) per job. The worker sent "
        f"`{structured['worker_sends']}`"
        + (f" ({structured['note']})" if structured.get("note") else "")
        + f". Prompt `{doc['prompt_version']}`, schema `{doc['response_schema']}`.",
        "",
        "Outcome against truth (correct: equal to the sample's truth on every field that reaches an ERP):",
        "",
        *table(
            ["outcome", "documents", "share"],
            [
                [title, str(matrix["cells"][cell]), _rate_text(matrix["cells"][cell] / matrix["documents"])]
                for cell, title in MODEL_CELLS.items()
            ]
            if matrix["documents"]
            else [],
            right=[1, 2],
        ),
        "",
        f"- Silently wrong: {matrix['silently_wrong']} of {matrix['documents']} (target 0).",
        f"- Caught: {_rate_text(matrix['caught_rate'])} of the {matrix['wrong']} wrong extractions went to "
        "review.",
        f"- Needless review: {_rate_text(matrix['needless_review_rate'])} of the correct extractions of "
        "documents that pass the policy.",
        f"- Seconds per extraction (one provider call, as the worker timed it): mean "
        f"{num(timing['mean'])} s, p50 {num(timing['p50'])} s, p95 {num(timing['p95'])} s over "
        f"{timing['n']} calls; "
        f"{num(doc['tokens']['completion_per_second'] or 0)} completion tokens/s."
        if timing["n"]
        else "- No provider call finished.",
        "",
        "Per-field accuracy (line fields counted per line):",
        "",
        *table(
            ["field", "matched", "compared", "accuracy"],
            [
                [name, str(score["matched"]), str(score["total"]), _rate_text(score["rate"])]
                for name, score in accuracy["fields"].items()
            ],
            right=[1, 2, 3],
        ),
        "",
    ]
    dropped = doc["server"]["dropped_schema_keywords"]
    finishes = ", ".join(
        f"{count} {reason}" for reason, count in sorted(doc["server"]["finish_reasons"].items())
    )
    lines += [
        f"Completions by how they ended: {finishes or 'none'}. Schema constraints the server could not put "
        "in its grammar: " + (", ".join(f"`{item}`" for item in dropped) if dropped else "none") + ".",
        "",
    ]
    return lines


MODEL_TYPE_TITLES = {
    "invoice_extraction": "Invoice extraction",
    "document_summary": "Document summary",
    "document_classification": "Document classification",
}
MODEL_CELL_SHORT = {
    "correct_succeeded": "correct + SUCCEEDED",
    "wrong_review_required": "caught",
    "wrong_succeeded": "**silently wrong**",
    "correct_review_needless": "needless review",
    "correct_review_expected": "expected review",
    "failed_invalid_output": "invalid output",
    "failed_other": "failed, other",
}
# How each type's answer is judged right, for the text under its heading.
MODEL_JUDGED_BY = {
    "invoice_extraction": "correct: equal to the sample's truth on every field that reaches an ERP",
    "document_summary": "correct: every number and date it states is printed in the document, each key "
    "fact's numbers and dates on one line together, each capitalised name in a fact printed "
    "(tollgate_dev/document_judge.py, which never reads the model's quotes)",
    "document_classification": "correct: the document's one true label",
}


def _cell_text(text: str) -> str:
    """Free text (a reviewer's reason, a judge's finding) made safe for one markdown table cell or bullet."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _truth_text(truth: Doc) -> str:
    if truth["method"] == "assumed":
        notes = "; ".join(truth["notes"])
        return f"every document is treated as passing the policy: no faithful answer could be built ({notes})"
    how = "through the type's own `validate`" if truth["method"] == "validate" else "(methods mixed)"
    return (
        f"a faithful answer built from the truth passes the policy on {truth['passing']} of "
        f"{truth['documents']} documents (run {how}); a correct answer sent to review counts as needless "
        "on those and as expected on the rest"
    )


def _model_type_lines(job_type: str, figures: Doc) -> list[str]:
    matrix, reviews, timing = figures["confusion"], figures["reviews"], figures["seconds_per_call"]
    samples = figures["samples"]
    kinds = ", ".join(f"{count} {kind.replace('_', ' ')}" for kind, count in samples["kinds"].items())
    languages = samples.get("languages")
    lines = [
        f"### {MODEL_TYPE_TITLES.get(job_type, job_type)}",
        "",
        f"{samples['count']} document{'' if samples['count'] == 1 else 's'} ({kinds}"
        + (
            "; languages " + ", ".join(f"{n} {lang}" for lang, n in sorted(languages.items()))
            if languages
            else ""
        )
        + f"). Prompt `{figures['prompt_version']}`, schema `{figures['response_schema']}`, policy "
        f"`{figures['policy_version']}`. {MODEL_JUDGED_BY.get(job_type, '').capitalize()}; "
        f"{_truth_text(figures['truth_policy'])}.",
        "",
        f"- Straight through (correct and SUCCEEDED, of all): {_rate_text(matrix['straight_through_rate'])}.",
        f"- Silently wrong: {matrix['silently_wrong']} of {matrix['documents']} (target 0); caught "
        f"{_rate_text(matrix['caught_rate'])} of the {matrix['wrong']} wrong answers.",
        f"- Needless review: {_rate_text(matrix['needless_review_rate'])} of the correct answers to "
        "documents that pass the policy.",
        f"- Seconds per call: mean {num(timing['mean'])} s, p50 {num(timing['p50'])} s, p95 "
        f"{num(timing['p95'])} s over {timing['n']} calls."
        if timing["n"]
        else "- No provider call finished.",
        "",
    ]
    if reviews["by_code"]:
        lines += [
            f"Reasons behind the {reviews['documents']} reviews (a document may give several):",
            "",
            *table(
                ["reason code", "documents", "reasons"],
                [
                    [f"`{code}`", str(count["documents"]), str(count["reasons"])]
                    for code, count in reviews["by_code"].items()
                ],
                right=[1, 2],
            ),
            "",
        ]
    shown = [row for row in figures["documents"] if row["cell"] != "correct_succeeded"]
    if shown:
        lines += [
            "<details><summary>Each document that did not go straight through: its cell, what is wrong "
            "with the answer, and every review reason</summary>",
            "",
        ]
        for row in shown:
            what = row["kind"].replace("_", " ") + (f", {row['language']}" if row.get("language") else "")
            lines.append(f"- `{row['name']}` ({what}): {MODEL_CELL_SHORT.get(row['cell'], row['cell'])}")
            lines += [f"  - wrong: {_cell_text(problem)}" for problem in row["problems"]]
            lines += [
                f"  - `{reason['code']}` {_cell_text(reason['field'])}: {_cell_text(reason['detail'])}"
                for reason in row["review_reasons"]
            ]
            if row["cell"] == "correct_review_expected":
                lines += [
                    f"  - the faithful answer too: `{reason['code']}` {_cell_text(reason['detail'])}"
                    for reason in row["truth_reasons"]
                ]
        lines += ["", "</details>", ""]
    accuracy = figures.get("accuracy")
    if accuracy:
        lines += [
            "Per-field accuracy (line fields counted per line):",
            "",
            *table(
                ["field", "matched", "compared", "accuracy"],
                [
                    [name, str(score["matched"]), str(score["total"]), _rate_text(score["rate"])]
                    for name, score in accuracy["fields"].items()
                ],
                right=[1, 2, 3],
            ),
            "",
        ]
    return lines


def _model_accuracy_v2_section(doc: Doc) -> list[str]:
    model, engine, config = doc["model"], doc["engine"], doc["config"]
    structured, types = doc["structured_output"], doc["job_types"]
    lines = ["## Real-model accuracy", "", *provenance("model_accuracy", doc)]
    if config["limit"] is not None:
        lines += [
            f"**A smoke run:** the first {config['limit']} document(s) of each set. It shows the harness "
            "and the model work end to end; it is too small to say how often the model is wrong.",
            "",
        ]
    lines += [
        "Sample documents of each job type (seed "
        f"{config['samples_seed']}) accepted into a scratch database and run by the worker's own attempt "
        "code (fair claim, budget permit, provider call, strict parsing, the type's validation policy, "
        f"fenced commit) against {model['name']} {model['quantization']} "
        f"({num(model['bytes'] / 1e9, 2)} GB GGUF from {model['source']}), served on 127.0.0.1 by "
        f"{engine['name']} {engine['version']} ({engine['build']} CPU build, {engine['threads']} threads, "
        f"{engine['context_size']:,}-token context) in the OpenAI wire format; {config['decoding']}, "
        f"{config['max_attempts']} attempt(s) per job. The worker sent `{structured['worker_sends']}`"
        + (f" ({structured['note']})" if structured.get("note") else "")
        + ". Tenant label guides: "
        + (
            "sent with the classification documents that have them."
            if config["label_guides_sent"]
            else "not sent (this service's classification options have no `label_guides`)."
        ),
        "",
        "Outcome against truth, per job type (straight through: correct and SUCCEEDED, of all; needless "
        "review: of the correct answers to documents that pass the policy):",
        "",
        *table(
            [
                "job type",
                "documents",
                *MODEL_CELL_SHORT.values(),
                "straight-through rate",
                "needless review rate",
            ],
            [
                [
                    f"`{job_type}`",
                    str(figures["confusion"]["documents"]),
                    *(str(figures["confusion"]["cells"][cell]) for cell in MODEL_CELL_SHORT),
                    _rate_text(figures["confusion"]["straight_through_rate"]),
                    _rate_text(figures["confusion"]["needless_review_rate"]),
                ]
                for job_type, figures in types.items()
            ],
            right=range(1, len(MODEL_CELL_SHORT) + 4),
        ),
        "",
    ]
    for job_type, figures in types.items():
        lines += _model_type_lines(job_type, figures)
    dropped = doc["server"]["dropped_schema_keywords"]
    finishes = ", ".join(
        f"{count} {reason}" for reason, count in sorted(doc["server"]["finish_reasons"].items())
    )
    lines += [
        f"Completions by how they ended: {finishes or 'none'}. Schema constraints the server could not put "
        "in its grammar: " + (", ".join(f"`{item}`" for item in dropped) if dropped else "none") + ".",
        "",
    ]
    return lines


# --------------------------------------------------------------------------------------------- summary


def _light_p95(scenario: Doc) -> str:
    light, submitted = scenario["light"], scenario["light_submitted"]
    if not light["count"]:
        return "none done"
    done = "" if light["count"] == submitted else f" ({light['count']} of {submitted} done)"
    return f"{num(light['p95_s'])} s{done}"


def drain_summary(drain: Doc, at: str, bound: str = "") -> list[list[str]]:
    """The shared budget beside each baseline limiter, all from the one run; ``bound`` names the profile."""
    by_key = {s["key"]: s for s in drain["scenarios"]}
    budget = by_key.get("global")
    others = [(label, by_key[key]) for key, label in DRAIN_SHORT.items() if key in by_key]
    if not budget:
        return []

    def each(figure: Callable[[Doc], str]) -> str:
        return "; ".join(f"{label} {figure(other)}" for label, other in others) or "not run"

    def p95_ratio(other: Doc) -> str:
        return times(budget["light"]["p95_s"] / other["light"]["p95_s"]) if other["light"]["count"] else "-"

    refused = f"{pct(budget['rejected_share'])} ({budget['provider_429s']:,} of {budget['attempts']:,})"
    target = drain["targets"]["light_p95_max_multiple_of_service_time"]
    return [
        [
            f"shared budget{bound}: jobs/s (share of capacity)",
            f"{num(budget['jobs_per_s'], 2)} ({pct(budget['share_of_capacity'], 0)})",
            each(lambda o: num(o["jobs_per_s"], 2)),
            each(lambda o: times(budget["jobs_per_s"] / o["jobs_per_s"])),
            at,
        ],
        [
            f"shared budget{bound}: provider 429s per attempt",
            refused,
            each(lambda o: pct(o["rejected_share"])),
            "",
            at,
        ],
        [
            f"shared budget{bound}: light tenants' p95 behind {drain['config']['heavy_jobs']:,} heavy jobs",
            _light_p95(budget),
            each(_light_p95),
            each(p95_ratio) if others else "",
            at,
        ],
        [
            f"shared budget{bound}: light tenants' p95 ÷ one job's service time (target ≤ {target:g}{TIMES})",
            f"{budget['light_p95_over_service']:.1f}{TIMES} ({num(budget['solo_service_s'])} s a job; "
            f"{budget['light']['count']:,} of {budget['light_submitted']:,} light jobs done): "
            + held(budget["light_p95_over_service"] <= target)
            if budget["light"]["count"]
            else "none done",
            "",
            "",
            at,
        ],
    ]


def _stream_p95(run: Doc) -> str:
    stream = run["stream"]
    if not stream["count"]:
        return f"none of {run['stream_submitted']:,} done"
    done = (
        ""
        if stream["count"] == run["stream_submitted"]
        else f" ({stream['count']} of {run['stream_submitted']} done)"
    )
    return f"{num(stream['p95_s'])} s{done}"


def drain_tiers_summary(doc: Doc) -> list[list[str]]:
    """The tiered run beside the single-tier run of the same workload, both from the one run."""
    runs = {run["key"]: run for run in doc["runs"]}
    tiered, single = runs.get("tiered"), runs.get("single_tier")
    if not tiered:
        return []
    at = f"`drain_tiers.json` {run_date(doc)}"
    target = doc["targets"]["high_p95_max_multiple_of_service_time"]
    ratio = tiered["high_p95_over_service"]
    backlog = doc["config"]["backlog_jobs"]
    return [
        [
            f"tiers: high stream's p95 ÷ one job's service time behind {backlog:,} batch jobs "
            f"(target ≤ {target:g}{TIMES})",
            "none done"
            if ratio is None
            else f"{ratio:.1f}{TIMES} ({num(tiered['solo_service_s'])} s a job): " + held(ratio <= target),
            "one tier: "
            + (
                "not run"
                if not single
                else _stream_p95(single)
                if single["high_p95_over_service"] is None
                else f"{single['high_p95_over_service']:.1f}{TIMES} ({_stream_p95(single)})"
            ),
            "",
            at,
        ],
        [
            "tiers: batch backlog's jobs/s, share of what the stream leaves",
            f"{num(tiered['backlog_jobs_per_s'], 2)} ({pct(tiered['backlog_share_of_what_is_left'], 0)})",
            "one tier: "
            + (
                f"{num(single['backlog_jobs_per_s'], 2)} ({pct(single['backlog_share_of_what_is_left'], 0)})"
                if single
                else "not run"
            ),
            times(tiered["backlog_jobs_per_s"] / single["backlog_jobs_per_s"])
            if single and single["backlog_jobs_per_s"]
            else "",
            at,
        ],
    ]


def drain_tiers_section(doc: Doc) -> list[str]:
    config = doc["config"]
    provider = config["provider"]
    runs = doc["runs"]
    lines = [
        "## Service tiers under contention (drain, tiers)",
        "",
        *provenance("drain_tiers", doc),
        f"One tenant's backlog of {config['backlog_jobs']:,} jobs and a steady stream of its jobs at "
        f"{pct(config['stream_share'], 0)} of the provider's capacity ({provider['max_concurrency']} "
        f"calls in flight at a mean {num(provider['latency_mean_s'])} s: "
        f"{num(provider['max_concurrency'] / provider['latency_mean_s'])} jobs/s), over the first 80% of a "
        f"{config['window_s']:g} s window, on the simulated provider under the shared DynamoDB budget. The "
        "tiered run sends the backlog as `batch` and the stream as `high`, worked by one high-tier worker "
        "(6 slots) and three batch-tier workers (8 slots each: batch alone could fill the pool); the budget "
        "holds batch to its share (50%) while a high-tier call waits and lets it use the whole pool "
        "otherwise. The single-tier run sends the same jobs all as `normal` to five workers of 6 slots "
        "serving every tier. "
        "Service time: one job's measured overhead on an idle system plus the provider's mean latency.",
        "",
    ]
    lines += table(
        [
            "run",
            "stream p95",
            "stream wait p95",
            "1 job service",
            "stream p95 ÷ 1 job",
            "backlog jobs/s",
            "backlog of what is left",
            "all of capacity",
        ],
        [
            [
                run["title"],
                _stream_p95(run),
                "-"
                if run["stream_waiting_for_a_slot"]["p95_s"] is None
                else f"{num(run['stream_waiting_for_a_slot']['p95_s'], 2)} s",
                "-" if run["solo_service_s"] is None else f"{num(run['solo_service_s'], 2)} s",
                "-" if run["high_p95_over_service"] is None else f"{run['high_p95_over_service']:.1f}{TIMES}",
                num(run["backlog_jobs_per_s"], 2),
                pct(run["backlog_share_of_what_is_left"], 0),
                pct(run["total_share_of_capacity"], 0),
            ]
            for run in runs
        ],
        right=range(1, 8),
    )
    lines += [
        "",
        "The stream's wait is accepted to first claimed: the part of its time the tiers decide. In one tier "
        "the stream's jobs are the tenant's own and wait their turn behind its backlog (same priority, "
        "oldest first); jobs of other tenants would be served sooner by the fair claim.",
        "",
    ]
    return lines


# ------------------------------------------------------------------------------------------ batch path


def usd(value: str) -> str:
    """An exact decimal amount as recorded (a string, to the micro-dollar)."""
    return f"${value}"


def _pool_text(run: Doc) -> str:
    """What a path took from the immediate pool: calls made, and the tokens the limiter reserved for them."""
    limiter = run["immediate_pool"]["limiter"]
    return f"{limiter['requests']:,} requests, {limiter['reserved_tokens']:,} tokens reserved"


def _peaks(run: Doc) -> list[tuple[str, int, int]]:
    """Per model: the most tokens the batch pool held at once, and the most prompt tokens the provider had
    enqueued at once (the Batch API's limit is per model)."""
    pool = run.get("batch_pool") or {}
    held, enqueued = pool.get("peak_held_tokens", {}), pool.get("provider_peak_enqueued_tokens", {})
    return [(model, held.get(model, 0), enqueued.get(model, 0)) for model in sorted({*held, *enqueued})]


def _peaks_text(run: Doc) -> str:
    return ", ".join(f"`{model}` {held:,} ({enqueued:,})" for model, held, enqueued in _peaks(run)) or "none"


def batch_path_summary(doc: Doc) -> list[list[str]]:
    """The batch path's cost beside the immediate path's for the same invoices, then the budget each used."""
    paths = doc["paths"]
    immediate, batch = paths.get("immediate"), paths.get("batch")
    if not immediate or not batch:
        return []
    at = f"`batch_path.json` {run_date(doc)}"
    ratio = doc["summary"]["batch_over_immediate_cost"]
    invoices = doc["config"]["invoices"]
    smoke = " (smoke run)" if doc["config"].get("quick") else ""
    requests_ratio = doc["summary"]["batch_immediate_requests_over_immediate"]
    return [
        [
            f"batch path: cost per 1,000 invoices, the same {invoices:,} through each path{smoke}",
            usd(batch["cost_per_1000_invoices_usd"]),
            f"immediate path: {usd(immediate['cost_per_1000_invoices_usd'])}",
            "" if ratio is None else times(ratio),
            at,
        ],
        [
            "batch path: provider budget used",
            f"Batch API pool, peak held per model (prompt tokens enqueued at the provider): "
            f"{_peaks_text(batch)}; immediate pool: {_pool_text(batch)}",
            f"immediate path: {_pool_text(immediate)}",
            "" if requests_ratio is None else f"{times(requests_ratio)} the requests",
            at,
        ],
    ]


def batch_path_section(doc: Doc) -> list[str]:
    config, paths = doc["config"], doc["paths"]
    kinds = ", ".join(f"{n} {kind.replace('_', ' ')}" for kind, n in config["kinds"].items())
    prices = "; ".join(
        f"`{model}` ${inp:g} in / ${out:g} out" for model, (inp, out) in config["model_prices"].items()
    )
    lines = [
        "## Batch path against immediate calls: cost per 1,000 invoices",
        "",
        *provenance("batch_path", doc),
        f"The same {config['invoices']:,} sample invoices (seed {config['seed']}: {kinds}) accepted twice, "
        "each path under a tenant of its own and a deadline of "
        f"{config['deadline_seconds'] // 3600} h: as normal-tier jobs worked by the worker's execution slots "
        f"({config['slots']}), and as batch-tier jobs worked by the worker's batch path (request files "
        "through the simulator's Files and Batches API, polled and settled line by line), whatever it hands "
        "back running on the immediate path as in production. The simulated batch completes "
        f"{num(config['simulated_completion_seconds'], 0)} s after it is created (the real Batch API takes "
        "up to 24 h), so the batch path's wall time is this machine's, not the provider's. Prices are the "
        "worker's defaults per million tokens ("
        f"{prices}), a batch line at {config['batch_price_factor']:g} of them; cost is the sum of "
        "`job_attempts.cost_usd` as stored, discount the sum of `discount_usd`.",
        "",
    ]
    rows = []
    for key in ("immediate", "batch"):
        run = paths.get(key)
        if not run:
            continue
        states, routes, totals = run["job_states"], run["by_route"], run["totals"]
        batches = run.get("provider_batches")
        rows.append(
            [
                key,
                f"{run['jobs']:,}",
                f"{states.get('SUCCEEDED', 0):,} / {states.get('REVIEW_REQUIRED', 0):,}",
                f"{routes['batch_line']['attempts']:,} + {routes['immediate_call']['attempts']:,}",
                usd(totals["cost_usd"]),
                usd(run["cost_per_1000_invoices_usd"]),
                usd(totals["discount_usd"]),
                f"{totals['input_tokens']:,} / {totals['output_tokens']:,}",
                f"{run['immediate_pool']['limiter']['requests']:,} / "
                f"{run['immediate_pool']['limiter']['reserved_tokens']:,} "
                f"({run['immediate_pool']['limiter']['used_tokens']:,})",
                "-" if batches is None else _peaks_text(run),
                "-" if batches is None else f"{batches['batches']} / {batches['lines']:,}",
                f"{num(run['wall_s'])} s",
            ]
        )
    lines += table(
        [
            "path",
            "jobs",
            "SUCCEEDED / REVIEW_REQUIRED",
            "attempts: batch lines + immediate calls",
            "cost",
            "per 1,000 invoices",
            "batch discount",
            "tokens in / out",
            "immediate pool: requests / tokens reserved (used)",
            "Batch API pool: peak held per model (enqueued at the provider)",
            "provider batches / lines",
            "wall time",
        ],
        rows,
        right=range(1, 12),
    )
    immediate, batch = paths.get("immediate"), paths.get("batch")
    if immediate and batch:
        ratio = doc["summary"]["batch_over_immediate_cost"]
        fallback = batch["by_route"]["immediate_call"]
        peaks = _peaks(batch)
        over = max((held / enqueued for _, held, enqueued in peaks if enqueued), default=None)
        cost = Decimal(batch["totals"]["cost_usd"])
        share = Decimal(fallback["cost_usd"]) / cost if cost else 0
        by_kind = ", ".join(
            f"{a['attempts']:,} {a['model']} {a['outcome']}"
            for a in batch["attempts"]
            if a["route"] == "immediate_call"
        )
        lines += [
            "",
            f"Batch cost ÷ immediate cost: {'-' if ratio is None else times(ratio)}. The batch path still "
            f"made {fallback['attempts']:,} immediate calls ({by_kind or 'none'}) at the list price: "
            f"{usd(fallback['cost_usd'])}, {pct(float(share))} of what it paid. A job is offered to the "
            "Batch API once; a retry, including an escalation to the large model after a result that failed "
            "validation, runs on the immediate path.",
            "",
            "The immediate pool's tokens are what the limiter reserved for the calls made (each call's "
            "estimate of prompt and output; what a call did not use goes back when it ends). The Batch API "
            "pool's peak is the most the batch pool held at once for the files in flight, up to "
            f"{'-' if over is None else num(over)}{TIMES} the prompt tokens the simulator had enqueued at "
            "its peak: the batcher enqueues each job's whole estimate, where the provider counts prompt "
            "tokens.",
        ]
        pool = batch.get("batch_pool") or {}
        if pool.get("denials"):
            limits = ", ".join(f"`{m}` {n:,}" for m, n in sorted(pool.get("limit_tokens", {}).items()))
            lines[-1] += (
                f" The batch pool refused room {pool['denials']:,} times (limit per model: {limits}): a file "
                "waited for an earlier one to settle before it could be created."
            )
        errors = [f"{key}: {e}" for key, run in paths.items() for e in run.get("errors", [])]
        if errors:
            lines += ["", "**Problems in this run:** " + "; ".join(errors) + "."]
    lines.append("")
    return lines


def scale_summary(scale: Doc) -> list[list[str]]:
    """The worst claim shape and the largest backlog, each against its floor."""
    at = f"`scale.json` {run_date(scale)}"
    rows = []
    claim = scale["summary"].get("claim")
    if claim:
        worst = next(shape for shape in scale["claims"] if shape["key"] == claim["worst"])
        rows.append(
            [
                f"claim p50, worst shape ({worst['label']})",
                f"{ms(worst['claim_ms']['p50'])} ms",
                f"plain SKIP LOCKED claim: {ms(worst['plain_ms']['p50'])} ms",
                times(worst["claim_over_plain"]["p50"]),
                at,
            ]
        )
    if scale["accept"]:
        largest = scale["accept"][-1]
        rows.append(
            [
                f"accept p50 at a tenant backlog of {largest['backlog']:,}",
                f"{ms(largest['accept_ms']['p50'])} ms",
                f"the raw two inserts: {ms(largest['raw_ms']['p50'])} ms",
                times(largest["accept_over_raw"]["p50"]),
                at,
            ]
        )
    return rows


SUMMARY_HEADER = ["what", "figure", "baseline, same run", "figure ÷ baseline", "from"]


def summary_rows(results: Mapping[str, Doc]) -> list[list[str]]:
    rows: list[list[str]] = []
    acceptance = results.get("acceptance")
    if acceptance:
        at = f"`acceptance.json` {run_date(acceptance)}"
        rows_ = acceptance["throughput"]
        config = acceptance["config"]
        top = max(config["http_concurrency"])
        in_process = _row(rows_, kind="handler", path="in_process")
        floor = _row(rows_, kind="baseline", concurrency=1)
        if in_process and floor:
            rows.append(
                [
                    "accept one job, in process, p50",
                    f"{ms(in_process['latency_ms']['p50'])} ms",
                    f"two inserts in one transaction: {ms(floor['latency_ms']['p50'])} ms",
                    times(in_process["vs_baseline"]["p50"]),
                    at,
                ]
            )
        many = _row(rows_, kind="handler", path="http", tenants=config["tenants"], concurrency=top)
        one = _row(rows_, kind="handler", path="http", tenants=1, concurrency=top)
        if many and one:
            rows.append(
                [
                    f"one tenant over HTTP, {top} clients",
                    f"{num(one['throughput_rps'])} req/s",
                    f"{config['tenants']} tenants: {num(many['throughput_rps'])} req/s",
                    times(one["throughput_rps"] / many["throughput_rps"]),
                    at,
                ]
            )
        cold = {row["name"]: row for row in acceptance["cold_start"]["rows"]}
        if "import_handler" in cold and "bare_python" in cold:
            rows.append(
                [
                    "API handler cold start to first response",
                    f"{ms(cold['import_handler']['process_wall_ms']['median'])} ms",
                    f"bare interpreter: {ms(cold['bare_python']['process_wall_ms']['median'])} ms",
                    f"{cold['import_handler']['vs_bare_python']:.0f}{TIMES}",
                    at,
                ]
            )
    compared = results.get("cold_start")
    if compared:
        head = _row(compared["rows"], code="head", bytecode=True)
        base = _row(compared["rows"], code="base", bytecode=False)
        if head and base:
            after, before = head["to_first_response_ms"]["median"], base["to_first_response_ms"]["median"]
            rows.append(
                [
                    "API Lambda layout, bytecode: cold start to first response",
                    f"{ms(after)} ms",
                    f"{compared['config']['base']} without bytecode: {ms(before)} ms",
                    times(after / before),
                    f"`cold_start.json` {run_date(compared)}",
                ]
            )
    relay = results.get("relay")
    if relay:
        at = f"`relay.json` {run_date(relay)}"
        one = _row(relay["throughput"], kind="relay", concurrency=1)
        floor = _row(relay["throughput"], kind="floor", concurrency=1)
        if one and floor:
            rows.append(
                [
                    "one relay draining a backlog",
                    f"{num(one['per_s']['median'], 0)} events/s",
                    f"the same SendMessageBatch calls alone: {num(floor['per_s']['median'], 0)}/s",
                    times(relay["ratios"]["relay_over_floor_c1"]["median"]),
                    at,
                ]
            )
        latency = relay["latency"]
        rows.append(
            [
                "commit to SQS confirmation, p50",
                f"{ms(latency['commit_to_confirm_ms']['p50'])} ms",
                f"one paced SendMessageBatch: {ms(relay['single_message']['paced']['call_ms']['p50'])} ms",
                times(latency["vs_single_message_p50"]["paced"]),
                at,
            ]
        )
    drain = results.get("drain")
    if drain:
        rows += drain_summary(drain, f"`drain.json` {run_date(drain)}")
    drain_tokens = results.get("drain_tokens")
    if drain_tokens:
        at = f"`drain_tokens.json` {run_date(drain_tokens)}"
        rows += drain_summary(drain_tokens, at, ", tokens per minute bound")
    drain_many = results.get("drain_many")
    if drain_many:
        at = f"`drain_many.json` {run_date(drain_many)}"
        rows += drain_summary(drain_many, at, f", {drain_many['config']['light_tenants']:,} light tenants")
    drain_tiers = results.get("drain_tiers")
    if drain_tiers:
        rows += drain_tiers_summary(drain_tiers)
    batch_path = results.get("batch_path")
    if batch_path:
        rows += batch_path_summary(batch_path)
    scale = results.get("scale")
    if scale:
        rows += scale_summary(scale)
    openloop = results.get("openloop")
    if openloop:
        rows += openloop_summary(openloop)
    live = results.get("live_notifications")
    if live:
        rows += live_notifications_summary(live)
    accuracy = results.get("accuracy")
    if accuracy:
        rows.append(
            [
                f"invoices extracted exactly ({accuracy['provider']['kind']} provider)",
                pct(accuracy["accuracy"]["document_accuracy"]),
                "none (proves the harness)",
                "",
                f"`accuracy.json` {run_date(accuracy)}",
            ]
        )
    policy = results.get("policy_cost")
    if policy:
        one = policy["shapes"][0]
        rows.append(
            [
                f"validation policy on an {one['shape']}",
                f"{ms(one['policy_ms_p50'])} ms",
                f"parsing the answer: {ms(one['parse_ms_p50'])} ms",
                times(one["policy_over_parse"]),
                f"`policy_cost.json` {run_date(policy)}",
            ]
        )
    model = results.get("model_accuracy")
    if model and "job_types" in model:
        rows.append(_model_accuracy_summary(model))
    elif model:
        matrix = model["confusion"]
        smoke = " (smoke run)" if model["config"]["limit"] is not None else ""
        rows.append(
            [
                f"real model: wrong extractions that SUCCEEDED{smoke}",
                f"{matrix['silently_wrong']} of {matrix['documents']}",
                f"caught {matrix['cells']['wrong_review_required']} of {matrix['wrong']} wrong; "
                f"needless review {_rate_text(matrix['needless_review_rate'])}",
                "",
                f"`model_accuracy.json` {run_date(model)}",
            ]
        )
    return rows


def _model_accuracy_summary(model: Doc) -> list[str]:
    """One row for every job type the run measured: silently wrong, then straight through per type."""
    overall, types = model["overall"], model["job_types"]
    smoke = " (smoke run)" if model["config"]["limit"] is not None else ""

    def short(job_type: str) -> str:
        return job_type.rsplit("_", maxsplit=1)[-1]

    return [
        f"real model: wrong answers that SUCCEEDED{smoke}",
        f"{overall['silently_wrong']} of {overall['documents']}",
        "; ".join(
            f"{short(t)}: {f['confusion']['silently_wrong']} of {f['confusion']['documents']} silently "
            f"wrong, straight through {_rate_text(f['confusion']['straight_through_rate'])}, needless review "
            f"{_rate_text(f['confusion']['needless_review_rate'])}"
            for t, f in types.items()
        ),
        "",
        f"`model_accuracy.json` {run_date(model)}",
    ]


# ------------------------------------------------------------------------------------------- open loop


def _sample_at(samples: Sequence[Sequence[float]], t: float) -> Sequence[float] | None:
    """The backlog sample taken nearest ``t`` (they are a second apart)."""
    return min(samples, key=lambda s: abs(s[0] - t)) if samples else None


def _opt(value: float | None, fmt: Callable[[float], str]) -> str:
    return "-" if value is None else fmt(value)


def _seconds_at(value: float | None) -> str:
    return _opt(value, lambda v: f"{num(v)} s")


def openloop_section(doc: Doc) -> list[str]:
    config, prediction, targets = doc["config"], doc["prediction"], doc["targets"]
    backlog, fit, refusals = doc["backlog"], doc["backlog"]["fit"], doc["refusals"]
    latency, client, explained = doc["latency"], doc["client"], doc["explanation"]
    provider, limits = config["provider"], doc["capacity"]
    slots = config["worker_overrides"]["execution_slots"]
    low = config["low_tenant"]
    lines = [
        f"## Open loop: {config['overload']:g}{TIMES} the provider's capacity through the whole local system",
        "",
        *provenance("openloop", doc),
        f"The local system runs in the benchmark process: the API behind the local gateway on 127.0.0.1 with "
        f"its authorizer, the relay, ingress, the scheduler and {config['workers']} workers {TIMES} {slots} "
        f"slots sharing one budget in moto's DynamoDB, against the simulated provider "
        f"({provider['requests_per_minute']:,} requests/min, {provider['tokens_per_minute']:,} tokens/min, "
        f"{provider['max_concurrency']} calls in flight, lognormal latency averaging "
        f"{num(provider['latency_mean_s'])} s; the budget is set to the same). Capacity is "
        f"min(requests {num(limits['requests_per_minute'], 2)}, "
        f"tokens {num(limits['tokens_per_minute'], 2)}, "
        f"concurrency {num(limits['concurrency'], 2)}) = {num(limits['binding'], 2)} jobs/s. "
        f"A spawned client process sends {num(config['arrival_rate_per_s'])} requests/s "
        f"({config['overload']:g}{TIMES} capacity) at fixed instants for {num(config['arrivals_s'], 0)} s "
        f"from {config['client_threads']} threads, never waiting for an answer before the next is due: "
        f"{config['tenants']} tenants in turn, and every {low['every']}th request "
        f"({num(low['rate_per_s'])}/s) from a tenant whose quota is {low['max_pending_jobs']} unfinished "
        f"jobs. The system backlog cap is {config['system_max_backlog']:,} jobs"
        + (
            f", what the rates predict at {pct(config['cap_at'], 0)} of the arrivals"
            if config.get("cap_at")
            else ""
        )
        + f". Then at most {num(config['drain_s'], 0)} s of drain, the system is stopped, and every job in "
        "the database is read back.",
        "",
        "The prediction: the low tenant's jobs are served at its fair share of capacity "
        f"({num(prediction['low_service_rate_per_s'], 2)}/s), so its quota fills at "
        f"{_seconds_at(prediction['quota_full_s'])} and its excess is refused with 429 from then on; the "
        f"backlog grows at {num(prediction['growth_before_quota_per_s'], 2)} jobs/s until then and at "
        f"{num(prediction['growth_after_quota_per_s'], 2)} jobs/s after, reaches the cap at "
        f"{_seconds_at(prediction['cap_reached_s'])}, and the rest is refused with 503. The backlog is "
        "sampled every second from the counters admission reads (a recount beside them); the slope is a "
        "least-squares fit over the stretch where the prediction is a straight line.",
        "",
    ]
    within = targets["backlog_slope_within"]
    ratio = fit["measured_over_predicted"]
    flat = targets["latency_last_over_first_max"]
    p50_ratio, p99_ratio = latency["last_over_first"]["p50"], latency["last_over_first"]["p99"]
    completed = doc["completions"]
    share = completed["share_of_capacity"]
    statuses, predicted = doc["statuses"], prediction["statuses"]

    def judged(kind: str) -> str:
        counts = refusals[kind]
        return f"{counts['matched']:,} of {counts['matched'] + counts['unmatched']:,}"

    def verdict(ok: bool | None) -> str:
        return "" if ok is None else held(ok)

    windows = latency["windows"]
    rows = [
        [
            f"backlog growth, {num(fit['from_s'], 0)}{DASH}{num(fit['to_s'], 0)} s",
            _opt(fit["predicted_per_s"], lambda v: f"{num(v, 2)} jobs/s"),
            _opt(fit["measured_per_s"], lambda v: f"{num(v, 2)} jobs/s")
            + _opt(fit["recount_per_s"], lambda v: f" (recount {num(v, 2)})"),
            f"within {pct(within, 0)}" + _opt(ratio, lambda v: f": {times(v)}"),
            verdict(None if ratio is None else abs(ratio - 1) <= within),
        ],
        [
            "backlog growth at the completion rate reached there",
            _opt(fit.get("predicted_at_completions_per_s"), lambda v: f"{num(v, 2)} jobs/s"),
            _opt(fit["measured_per_s"], lambda v: f"{num(v, 2)} jobs/s"),
            _opt(fit.get("completions_per_s"), lambda v: f"completions {num(v, 2)} jobs/s"),
            "",
        ],
        [
            "backlog when arrivals stop",
            num(backlog["at_end_of_arrivals"]["predicted"], 0),
            _opt(backlog["at_end_of_arrivals"]["measured"], lambda v: num(v, 0)),
            "",
            "",
        ],
        [
            f"completions, {num(completed['from_s'], 0)}{DASH}{num(completed['to_s'], 0)} s",
            f"{num(limits['binding'], 2)} jobs/s",
            _opt(doc["completions"]["per_s"], lambda v: f"{num(v, 2)} jobs/s"),
            f"≥ {pct(targets['completions_min_share_of_capacity'], 0)}"
            + _opt(share, lambda v: f": {pct(v)}"),
            verdict(None if share is None else share >= targets["completions_min_share_of_capacity"]),
        ],
        [
            "completions once the cap is reached",
            f"{num(limits['binding'], 2)} jobs/s",
            _opt(doc["completions"].get("at_cap_per_s"), lambda v: f"{num(v, 2)} jobs/s"),
            "",
            "",
        ],
        [
            "202 latency p50, first → last window",
            "flat",
            f"{_opt(windows[0]['p50_ms'], ms)} → {_opt(windows[-1]['p50_ms'], ms)} ms",
            f"≤ {times(flat)}" + _opt(p50_ratio, lambda v: f": {times(v)}"),
            verdict(None if p50_ratio is None else p50_ratio <= flat),
        ],
        [
            "202 latency p99, first → last window",
            "flat",
            f"{_opt(windows[0]['p99_ms'], ms)} → {_opt(windows[-1]['p99_ms'], ms)} ms",
            _opt(p99_ratio, times),
            "",
        ],
    ]
    for status in ("202", "429", "503"):
        rows.append([f"{status} answers", num(predicted[status], 0), f"{statuses.get(status, 0):,}", "", ""])
    others = {k: v for k, v in statuses.items() if k not in ("202", "429", "503")}
    if others:
        rows.append(["other answers", "0", ", ".join(f"{v} {k}" for k, v in others.items()), "", ""])
    rows += [
        ["first 429", _seconds_at(prediction["quota_full_s"]), _seconds_at(refusals["first_429_s"]), "", ""],
        ["first 503", _seconds_at(prediction["cap_reached_s"]), _seconds_at(refusals["first_503_s"]), "", ""],
        [
            "429s owed by the low tenant's quota",
            "all",
            judged("429"),
            "all",
            held(not refusals["429"]["unmatched"]),
        ],
        ["503s owed by the backlog cap", "all", judged("503"), "all", held(not refusals["503"]["unmatched"])],
        ["202s within both limits", "all", judged("202"), "all", held(not refusals["202"]["unmatched"])],
        [
            "client send lag p50 / p99 / max",
            "0",
            " / ".join(f"{ms(client[key] * 1000)}" for key in ("p50_s", "p99_s", "max_s")) + " ms",
            f"p99 ≤ {ms(targets['send_lag_p99_max_s'] * 1000)} ms",
            held(client["kept_schedule"]),
        ],
    ]
    lines += table(["figure", "predicted", "measured", "target", ""], rows, right=[1, 2])
    lines.append("")
    if not client["kept_schedule"]:
        lines += [
            f"**The client fell behind its schedule** (p99 send lag {ms(client['p99_s'] * 1000)} ms, "
            f"{num(client['achieved_rate_per_s'] or 0, 2)} requests/s achieved): the arrivals were not fully "
            "open-loop, and the figures above are of a slower load.",
            "",
        ]
    samples = backlog["samples"]
    window_rows = []
    for window in windows:
        sample = _sample_at(samples, window["to_s"])
        model_backlog = _model_backlog(prediction, config, window["to_s"])
        window_rows.append(
            [
                f"{num(window['from_s'], 0)}{DASH}{num(window['to_s'], 0)} s",
                f"{window['count']:,}",
                _opt(window["p50_ms"], ms),
                _opt(window["p99_ms"], ms),
                num(model_backlog, 0) if model_backlog is not None else "-",
                num(sample[1], 0) if sample else "-",
            ]
        )
    lines += [
        f"By {num(config['latency_window_s'], 0)} s window of send time (a window holds about "
        f"{num(config['arrival_rate_per_s'] * config['latency_window_s'], 0)} requests, so its p99 is close "
        "to its slowest answer):",
        "",
        *table(
            ["window", "202s", "p50 ms", "p99 ms", "backlog at its end, predicted", "measured"],
            window_rows,
            right=range(1, 6),
        ),
        "",
    ]
    still = ", ".join(f"{n} {state}" for state, n in sorted(explained["still_pending_states"].items()))
    lines += [
        "Every accepted job explained: "
        + ("**yes**" if explained["adds_up"] else "**no**")
        + f". {explained['accepted']:,} answered 202 = {explained['succeeded']:,} succeeded + "
        f"{explained['review']:,} sent to review + {explained['failed']:,} failed + "
        f"{explained['cancelled']:,} cancelled + {explained['still_pending']:,} still pending"
        + (f" ({still})" if still else "")
        + f"; {explained['missing']:,} missing, {explained['wrong_job_id']:,} under another id. "
        f"{explained['refused']:,} refused requests made {explained['refused_with_a_job']:,} jobs (looked up "
        f"by Idempotency-Key); {explained['unanswered']:,} requests went unanswered. Refusals carried "
        "Retry-After "
        + ", ".join(f"{k} s ({v:,})" for k, v in sorted(refusals["retry_after"].items()))
        + ". Counters and recount differed by at most "
        + _opt(backlog["counter_drift_max"], lambda v: num(v, 0))
        + " jobs in any sample."
        + _provider_text(doc),
        "",
        "Each answer is judged from the jobs' own timestamps: a 429 or 503 is owed when, at some instant "
        "between the request's send and its answer, the tenant's (or the system's) unfinished jobs can have "
        f"been at the limit; a 202 when they were surely below it ({num(config['admission_slack_s'], 2)} s "
        "of slack for commits landing after their timestamps). The tenants have no supplier master data, so "
        "validation sends every invoice to review: review is a finished outcome here like success.",
        "",
    ]
    return lines


def _provider_text(doc: Doc) -> str:
    provider, attempts = doc.get("provider"), doc.get("attempts") or {}
    if not provider:
        return ""
    outcomes = ", ".join(f"{v:,} {k}" for k, v in sorted((attempts.get("outcomes") or {}).items()))
    call = attempts.get("call_latency_s")
    # Calls in flight bind: a permit not held by a running job is capacity lost, whatever its reason.
    completed = doc["completions"]
    running = [s[3] for s in doc["backlog"]["samples"] if completed["from_s"] <= s[0] <= completed["to_s"]]
    in_flight = doc["config"]["provider"]["max_concurrency"]
    return (
        f" The provider saw {provider['requests']:,} calls, refused {provider['rate_limited']:,} with 429 "
        f"and had at most {provider['max_concurrency']} in flight; attempts: {outcomes or 'none'}"
        + (
            f"; a successful call took {num(float(call), 2)} s on average as the workers saw it"
            if call
            else ""
        )
        + (
            f"; jobs running averaged {num(statistics.fmean(running), 2)} of the {in_flight} calls in flight "
            f"the budget allows, {num(completed['from_s'], 0)}{DASH}{num(completed['to_s'], 0)} s"
            if running
            else ""
        )
        + "."
    )


def _model_backlog(prediction: Doc, config: Doc, t: float) -> float | None:
    """The predicted backlog at ``t``, rebuilt from the recorded prediction (the same piecewise lines)."""
    quota = prediction.get("quota_full_s")
    provider = config["provider"]
    capacity = provider["max_concurrency"] / provider["latency_mean_s"]
    rate = config["arrival_rate_per_s"]
    after = rate - config["low_tenant"]["rate_per_s"] + prediction["low_service_rate_per_s"]
    before = min(t, quota) if quota is not None else t
    accepted = rate * before + max(0.0, t - before) * after
    uncapped = max(0.0, accepted - capacity * max(0.0, t - provider["latency_mean_s"]))
    return min(float(config["system_max_backlog"]), uncapped)


def openloop_summary(doc: Doc) -> list[list[str]]:
    at = f"`openloop.json` {run_date(doc)}"
    fit, latency = doc["backlog"]["fit"], doc["latency"]
    refusals = doc["refusals"]
    unmatched = sum(refusals[kind]["unmatched"] for kind in ("429", "503", "202"))
    rows = []
    if fit["measured_per_s"] is not None and fit["predicted_per_s"]:
        rows.append(
            [
                f"open loop at {doc['config']['overload']:g}{TIMES} capacity: backlog growth",
                f"{num(fit['measured_per_s'], 2)} jobs/s",
                f"predicted from the rates: {num(fit['predicted_per_s'], 2)} jobs/s",
                times(fit["measured_over_predicted"]),
                at,
            ]
        )
    windows = latency["windows"]
    if latency["last_over_first"]["p50"] is not None:
        rows.append(
            [
                "open loop: 202 latency p50, last 10 s window",
                f"{ms(windows[-1]['p50_ms'])} ms",
                f"first window: {ms(windows[0]['p50_ms'])} ms",
                times(latency["last_over_first"]["p50"]),
                at,
            ]
        )
    rows.append(
        [
            "open loop: answers admission did not owe; accepted jobs unexplained",
            f"{unmatched:,}; {'none' if doc['explanation']['adds_up'] else 'some'}",
            f"{sum(doc['statuses'].values()):,} requests",
            "",
            at,
        ]
    )
    return rows


# ---------------------------------------------------------------------------------- live notifications

# Delivery kept pace with the jobs finishing when every client had its last message within this share of
# the time the cancels took, counted from the last cancel.
KEPT_PACE_LAG_SHARE = 0.10


def _shape_name(shape: Doc) -> str:
    return f"{shape['jobs']:,} jobs {TIMES} {shape['clients']} clients"


def _by_key(doc: Doc, key: str) -> Doc:
    return next(shape for shape in doc["shapes"] if shape["key"] == key)


def live_notifications_section(doc: Doc) -> list[str]:
    config, shapes, comparison = doc["config"], doc["shapes"], doc.get("comparison")
    overrides = config["notification_overrides"]
    lines = [
        "## Live notifications: every job's state change to every listening client",
        "",
        *provenance("live_notifications", doc),
        "The local system in the benchmark process, without workers: moto (with the local system's fix "
        "that keeps an SQS send's cost independent of the queue's depth, since no worker empties the job "
        "queues), the API behind the local gateway, the relay, the notifier and the WebSocket server on "
        f"127.0.0.1, {overrides['max_connections_per_tenant']} connections allowed per tenant. For each "
        f"shape a fresh tenant submits its jobs over HTTP ({config['submit_threads']} threads) and the relay "
        "publishes them; then `tollgate_dev.live_load` connects the clients from a process of its own (one "
        "asyncio loop), each subscribed from the tenant's latest event, and once all are subscribed every "
        "job is cancelled through `cancel_job`, the use case the API's cancel route calls, on "
        f"{config['cancel_threads']} threads without HTTP, so each job's one state change (CANCELLED) goes "
        "through the relay and the notifier to every client. *Cancels* is the first cancel sent to the last "
        "one committed; *lag* is from then until the clients' process reported every client at its last "
        "message; *total* is both; *client s* is each client's own time from its subscribe to its last "
        "message. Every client must get every change once and in order, ending at the tenant's latest "
        "sequence number, or the run fails and writes no results"
        + (
            f" (a warm-up of {_shape_name(config['warmup'])} runs first and is not reported)."
            if config.get("warmup")
            else "."
        ),
        "",
    ]
    rows = []
    for shape in shapes:
        seconds = shape["client_seconds"]
        rows.append(
            [
                _shape_name(shape),
                f"{shape['messages_delivered']:,} of {shape['expected_messages']:,}",
                f"{num(shape['cancel_s'])} s ({num(shape['cancels_per_s'], 0)}/s)",
                f"{num(shape['lag_s'], 2)} s",
                f"{num(shape['total_s'])} s",
                num(shape["messages_per_s"], 0),
                f"{num(seconds['p50_s'])} / {num(seconds['p95_s'])} / {num(seconds['max_s'])}",
            ]
        )
    lines += table(
        [
            "shape",
            "messages delivered",
            "cancels",
            "lag after the last cancel",
            "total",
            "messages/s",
            "client s p50 / p95 / max",
        ],
        rows,
        right=range(1, 7),
    )
    lines.append("")
    if comparison:
        larger, smaller = _by_key(doc, comparison["larger"]), _by_key(doc, comparison["smaller"])
        lag = comparison["lag_ratio"]
        lines += [
            f"{_shape_name(larger)} against {_shape_name(smaller)}, same run: "
            f"{times(comparison['messages_ratio'])} the messages in {times(comparison['total_ratio'])} the "
            f"total time ({times(comparison['total_per_message_ratio'])} per message); the cancels took "
            f"{times(comparison['cancel_ratio'])} as long, the lag after them "
            f"{'-' if lag is None else times(lag)}.",
            "",
        ]
    behind = [s for s in shapes if s["lag_s"] > KEPT_PACE_LAG_SHARE * s["cancel_s"]]
    if behind:
        lines += [
            "**Delivery fell behind the cancels** in "
            + ", ".join(
                f"{_shape_name(s)} (the last message reached every client {num(s['lag_s'], 2)} s after the "
                "last cancel)"
                for s in behind
            )
            + ": there the total measures delivery itself.",
            "",
        ]
    else:
        lines += [
            "Delivery kept pace with the cancels in every shape: the last message reached every client "
            f"within {pct(KEPT_PACE_LAG_SHARE, 0)} of the cancels' duration after the last cancel. The total "
            "is then mostly how fast the jobs finished, and the lag is the part that is delivery's alone.",
            "",
        ]
    return lines


def live_notifications_summary(doc: Doc) -> list[list[str]]:
    comparison = doc.get("comparison")
    if not comparison:
        return []
    larger, smaller = _by_key(doc, comparison["larger"]), _by_key(doc, comparison["smaller"])
    return [
        [
            f"live notifications, {_shape_name(larger)}: first cancel to every client's last message",
            f"{num(larger['total_s'])} s",
            f"{_shape_name(smaller)} ({num(comparison['messages_ratio'], 0)}{TIMES} fewer messages): "
            f"{num(smaller['total_s'])} s",
            times(comparison["total_ratio"]),
            f"`live_notifications.json` {run_date(doc)}",
        ]
    ]


# ---------------------------------------------------------------------------------------------- render

SECTIONS: dict[str, Callable[[Doc], list[str]]] = {
    "acceptance": acceptance_section,
    "cold_start": cold_start_section,
    "relay": relay_section,
    "drain": drain_section,
    "drain_tokens": drain_tokens_section,
    "drain_many": drain_many_section,
    "drain_tiers": drain_tiers_section,
    "batch_path": batch_path_section,
    "scale": scale_section,
    "openloop": openloop_section,
    "live_notifications": live_notifications_section,
    "accuracy": accuracy_section,
    "policy_cost": policy_cost_section,
    "model_accuracy": model_accuracy_section,
}


def load_results(directory: Path) -> dict[str, Doc]:
    """Every results file in the directory, known benchmarks first, in the order `make bench` runs them."""
    found = {
        path.stem: json.loads(path.read_text(encoding="utf-8")) for path in sorted(directory.glob("*.json"))
    }
    ordered = {name: found.pop(name) for name in BENCHMARKS if name in found}
    return {**ordered, **found}


def render(results: Mapping[str, Doc]) -> str:
    lines = [
        "# Benchmarks",
        "",
        "<!-- Generated by `python -m bench.report` from bench/results/*.json; `make bench` rewrites it. "
        "Edit bench/report.py, not this file: tests/unit/test_benchmarks_report.py fails when the two "
        "disagree. -->",
        "",
        "What `make bench` measures, with the machine each run used, the command that reproduces it, and the "
        "baselines measured in the same run. Every figure below is generated from a results file in "
        "`bench/results/`; each section names the file and the run it comes from. `bench/README.md` "
        "describes each benchmark's rows and JSON in detail.",
        "",
        "How to read them:",
        "",
        "- These are reports, not tests: no test asserts a time, and the targets shown are checked here, "
        "not enforced.",
        "- The runs come from a 2-core development machine that other engineers were testing on at the same "
        "time. Absolute numbers are noisy and pessimistic; the ratios against a baseline measured side by "
        "side in the same run are the figures to trust, and only within one run. The load average before "
        "and after each run is in the table below.",
        "- AWS is moto on 127.0.0.1 and the LLM provider is a simulator (except in the real-model section), "
        "so AWS- and provider-bound figures "
        "describe this code against those stand-ins; the sections say where that matters.",
        "",
    ]
    missing = [name for name in BENCHMARKS if name not in results]
    if results:
        lines += [
            "## At a glance",
            "",
            *table(SUMMARY_HEADER, summary_rows(results), right=[3]),
            "",
        ]
        lines += machines_section(results)
    for name, doc in results.items():
        section = SECTIONS.get(name)
        if section is not None:
            lines += section(doc)
    unknown = [name for name in results if name not in SECTIONS]
    if unknown:
        lines += [
            "## Other results files",
            "",
            "Not described by bench/report.py yet: "
            + ", ".join(f"`bench/results/{n}.json`" for n in unknown)
            + ".",
            "",
        ]
    if missing:
        lines += [
            "## Not measured yet",
            "",
            "No results file for: "
            + ", ".join(f"`{RUN_COMMANDS.get(n, f'python -m bench.{n}')}`" for n in missing)
            + ".",
            "",
        ]
    return "\n".join(lines).rstrip("\n") + "\n"


# ------------------------------------------------------------------------------------------------ main


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.report", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check", action="store_true", help="exit 1 if the document differs from the results"
    )
    parser.add_argument("--results", type=Path, default=RESULTS_DIR, help="folder of results files")
    parser.add_argument("--output", type=Path, default=OUTPUT, help="the document (default BENCHMARKS.md)")
    args = parser.parse_args(argv)
    text = render(load_results(args.results))
    if args.check:
        current = args.output.read_text(encoding="utf-8") if args.output.exists() else ""
        if current == text:
            return 0
        diff = difflib.unified_diff(
            current.splitlines(keepends=True),
            text.splitlines(keepends=True),
            f"{args.output.name} (committed)",
            f"{args.output.name} (from the results files)",
        )
        sys.stdout.writelines(diff)
        print(f"\n{args.output.name} disagrees with the results files: run `python -m bench.report`.")
        return 1
    args.output.write_text(text, encoding="utf-8")
    print(f"Wrote {args.output.name} from {len(load_results(args.results))} results files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
