"""What every benchmark records about where and how it ran (cores, memory, Python, PostgreSQL, load, the
command and the code's commit), so that BENCHMARKS.md can print each figure with its machine.

bench.report reads what this writes from the JSON alone, so it never needs a database to render.
"""

from __future__ import annotations

import json
import os
import platform
import shlex
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psycopg
from psycopg.rows import dict_row

from tollgate.db import load_queries

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent


def load_average() -> list[float] | None:
    return list(os.getloadavg()) if hasattr(os, "getloadavg") else None


def cpu_model() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor()


def memory_bytes() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def postgres_facts(db_url: str) -> dict[str, str]:
    """The server's version and the settings that govern commit cost, which is most of what a write costs."""
    with psycopg.connect(db_url, row_factory=dict_row) as conn:
        row = conn.execute(load_queries(BENCH_DIR / "queries").server_facts).fetchone()
    assert row is not None
    return {key: str(value) for key, value in row.items()}


def code_commit() -> str | None:
    """The commit checked out when the run started. The working tree is shared and may hold uncommitted
    edits to unrelated files, so this names the code measured, not a guarantee that nothing else changed."""
    try:
        done = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True, check=False
        )
    except OSError:
        return None
    return done.stdout.strip() or None


def uncommitted_paths() -> list[str] | None:
    """Tracked files that differed from that commit when the run started (results files aside)."""
    try:
        done = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            check=False,
        )
    except OSError:
        return None
    if done.returncode != 0:
        return None
    paths = (line[3:] for line in done.stdout.splitlines() if len(line) > 3)
    return sorted(path for path in paths if not path.startswith("bench/results/"))


def command_line(module: str, argv: Sequence[str] | None) -> str:
    """How to run this again: the module and the options it was given. ``--output`` is left out: it changes
    no figure, and its value is a path on the machine that ran it."""
    args = list(sys.argv[1:] if argv is None else argv)
    kept: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
        elif arg == "--output":
            skip = True
        elif not arg.startswith("--output="):
            kept.append(arg)
    return shlex.join(["python", "-m", module, *kept])


def describe_machine(
    *, db_url: str | None = None, database: str | None = None, **where: str
) -> dict[str, Any]:
    """The machine section of a results file. ``where`` says where the other parts ran (moto, provider).

    Call it before the measured work: the load average then says whether the machine was busy already.
    """
    return {
        "cpu_count": os.cpu_count(),
        "cpu_model": cpu_model(),
        "memory_bytes": memory_bytes(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "postgres": postgres_facts(db_url) if db_url else None,
        # "DATABASE_URL" (a server someone else runs) or "embedded" (started by the benchmark).
        "database": database,
        **where,
        "code_commit": code_commit(),
        "code_uncommitted": uncommitted_paths(),
        "load_average_before": load_average(),
    }


def write_json(path: Path, document: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    # Written beside and renamed, so a run cut short never leaves half a file for the report to read.
    partial = path.with_suffix(path.suffix + ".tmp")
    partial.write_text(json.dumps(document, indent=2, default=str) + "\n", encoding="utf-8")
    partial.replace(path)
