"""Parent of the cold-start comparison (``python -m bench.cold_start``): the base commit's API Lambda against
the working tree's, each with and without bytecode, in Lambda's layout, in one run.

Every variant is a folder of function code plus a folder of dependencies, put on ``PYTHONPATH`` of a
fresh interpreter that may not write bytecode (Lambda's /var/task and /opt are read-only). The
dependencies are uv.lock's runtime pins installed the way layers/build.py installs the layer, for this
machine's CPU; "bytecode" means unchecked-hash pycs compiled the way layers/build.py compiles them.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import secrets
import shutil
import statistics
import subprocess
import sys
import tarfile
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from bench.acceptance import BenchTenant, JobSource, gateway_event, scratch_database
from bench.machine import command_line, describe_machine, load_average, write_json
from layers import build
from tollgate.core.clock import SystemClock, new_id
from tollgate.db import build_database
from tollgate.db.migrations import apply_migrations
from tollgate.settings import MIGRATIONS_DIR, REPO_ROOT, DatabaseSettings
from tollgate.tenants.authorizer import authorize_request
from tollgate.tenants.keys import ApiKeyResolver, create_tenant

BENCH_DIR = Path(__file__).resolve().parent
DEFAULT_OUTPUT = BENCH_DIR / "results" / "cold_start.json"
WORK_DIR = REPO_ROOT / "build" / "cold-start"
CHILD = BENCH_DIR / "cold_start.py"
SCHEMA = "tollgate.bench.cold_start/v1"
TARGETS_MS = {"import_ms": 400.0, "to_first_response_ms": 600.0}
METHOD_ARN = "arn:aws:execute-api:eu-west-1:000000000000:bench/dev/POST/extraction-jobs"


def interpreter_for_bench(explicit: str | None) -> str:
    """The runtime's CPython version when this machine has one, so the figures are for 3.13's import."""
    if explicit:
        return explicit
    return build.find_runtime_python(build.PYTHON_VERSION) or sys.executable


def _version(python: str) -> str:
    return subprocess.run(
        [python, "-c", "import sys; print('%d.%d.%d' % sys.version_info[:3])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def install_dependencies(python: str, target: Path) -> dict[str, str]:
    """uv.lock's runtime pins for this machine's CPU and ``python``'s version, as the layer installs them."""
    minor = ".".join(_version(python).split(".")[:2])
    plan = build.plan_layer(python_version=minor, platform=f"{platform.machine()}-manylinux_2_28")
    stamp = target.with_name(target.name + ".stamp")
    fingerprint = plan.fingerprint(None)
    if target.is_dir() and stamp.is_file() and stamp.read_text() == fingerprint:
        return plan.pins
    shutil.rmtree(target, ignore_errors=True)
    requirements = target.with_name("requirements.txt")
    requirements.parent.mkdir(parents=True, exist_ok=True)
    requirements.write_text(plan.exported)
    subprocess.run(build.install_command(requirements, target, plan, build.uv_binary()), check=True)
    if build.installed_versions(target) != plan.pins:
        raise SystemExit("the benchmark's dependencies differ from uv.lock's pins")
    stamp.write_text(fingerprint)
    return plan.pins


def base_sources(commit: str, target: Path) -> str:
    """The runtime folders of the merge base of ``commit`` and HEAD (git archive), as the code asset would
    have held them: the base this work started from, so both sides run on the same uv.lock."""
    resolved = subprocess.run(
        ["git", "merge-base", commit, "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()
    archive = subprocess.run(
        ["git", "archive", "--format=tar", resolved, *build.RUNTIME_FOLDERS],
        cwd=REPO_ROOT,
        capture_output=True,
        check=True,
    ).stdout
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(target, filter="data")
    return resolved


def with_bytecode(python: str, source: Path, target: Path, shown_as: str) -> None:
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    build.compile_tree(python, target, shown_as)


def prepare_variants(python: str, base: str) -> tuple[dict[str, tuple[Path, Path]], str, dict[str, str]]:
    """name -> (code folder, dependencies folder), for base/head with and without bytecode."""
    WORK_DIR.mkdir(parents=True, exist_ok=True)
    pins = install_dependencies(python, WORK_DIR / "deps")
    with_bytecode(python, WORK_DIR / "deps", WORK_DIR / "deps-pyc", build.LAYER_MOUNT)
    base_commit = base_sources(base, WORK_DIR / "base")
    build.build_function(WORK_DIR / "head", interpreter=None)
    variants: dict[str, tuple[Path, Path]] = {}
    for code in ("base", "head"):
        with_bytecode(python, WORK_DIR / code, WORK_DIR / f"{code}-pyc", build.TASK_ROOT)
        variants[f"{code}, no bytecode"] = (WORK_DIR / code, WORK_DIR / "deps")
        variants[f"{code}, bytecode"] = (WORK_DIR / f"{code}-pyc", WORK_DIR / "deps-pyc")
    return variants, base_commit, pins


def make_tenant(db_url: str) -> BenchTenant:
    apply_migrations(db_url, MIGRATIONS_DIR)
    system = build_database(
        DatabaseSettings(database_url=SecretStr(db_url), database_role="tollgate_system"), pool_name="bench"
    )
    # The authorizer resolves keys as the API's role, as in a deployment.
    api = build_database(DatabaseSettings(database_url=SecretStr(db_url)), pool_name="bench-api")
    try:
        created = create_tenant(system, f"cold-{secrets.token_hex(4)}", new_id)
        resolver = ApiKeyResolver(api, SystemClock(), ttl_seconds=60)
        policy = authorize_request(resolver, f"Bearer {created.api_key}", METHOD_ARN)
    finally:
        api.close()
        system.close()
    return BenchTenant(
        created.tenant_id, created.api_key, {"principalId": policy["principalId"], **policy["context"]}
    )


def child_env(db_url: str, code: Path, deps: Path) -> dict[str, str]:
    """What the Lambda's environment holds, and no more: nothing of this process's virtualenv leaks in.

    The endpoint is a closed local port: a small document never reaches S3 and no nudge is configured,
    so no AWS call is made; if one were, it would fail on 127.0.0.1 and show in the status.
    """
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONPATH": f"{code}{os.pathsep}{deps}",
        "PYTHONDONTWRITEBYTECODE": "1",
        "DATABASE_URL": db_url,
        "DOCUMENTS_BUCKET": "tollgate-bench-documents",
        "AWS_DEFAULT_REGION": "eu-west-1",
        "AWS_ACCESS_KEY_ID": "bench",
        "AWS_SECRET_ACCESS_KEY": "bench",
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9",
        "POWERTOOLS_SERVICE_NAME": "tollgate-api",
    }


def run_child(python: str, env: dict[str, str], event: dict[str, Any]) -> tuple[float, dict[str, Any]]:
    start = time.perf_counter_ns()
    # -s: no user site; -P: the child's own folder (bench/) is not put on sys.path.
    done = subprocess.run(
        [python, "-s", "-P", str(CHILD), "handler"],
        env=env,
        input=json.dumps(event),
        capture_output=True,
        text=True,
        check=False,
    )
    wall = (time.perf_counter_ns() - start) / 1e6
    if done.returncode != 0:
        raise RuntimeError(f"cold-start child failed ({done.returncode}):\n{done.stderr[-3000:]}")
    report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return wall, report


def _spread(values: Sequence[float]) -> dict[str, Any]:
    return {
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
        "samples": list(values),
    }


def measure(
    python: str, variants: dict[str, tuple[Path, Path]], db_url: str, tenant: BenchTenant, repeats: int
) -> list[dict[str, Any]]:
    source = JobSource()
    samples: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    statuses: dict[str, Counter[int]] = defaultdict(Counter)
    # Round 0 warms the page cache and is not counted; rounds interleave the variants so a change in
    # the machine's load touches them all alike.
    for round_number in range(repeats + 1):
        for name, (code, deps) in variants.items():
            (job,) = source.take(1, [tenant])
            wall, report = run_child(python, child_env(db_url, code, deps), gateway_event(job, "bench.local"))
            if round_number == 0:
                continue
            statuses[name][report.pop("status")] += 1
            samples[name]["process_wall_ms"].append(wall)
            for key, value in report.items():
                samples[name][key].append(value)
    return [
        {
            "name": name,
            "code": "base" if name.startswith("base") else "head",
            "bytecode": name.endswith(", bytecode"),
            "statuses": {str(k): v for k, v in statuses[name].items()},
            **{key: _spread(values) for key, values in samples[name].items()},
        }
        for name in variants
    ]


def print_rows(rows: Sequence[dict[str, Any]]) -> None:
    names = ("variant", "import ms", "cpu ms", "first response ms", "process ms")
    print(f"{names[0]:24} {names[1]:>10} {names[2]:>8} {names[3]:>18} {names[4]:>11}  statuses")
    for row in rows:
        print(
            f"{row['name']:24} {row['import_ms']['median']:10.0f} {row['import_cpu_ms']['median']:8.0f} "
            f"{row['to_first_response_ms']['median']:18.0f} {row['process_wall_ms']['median']:11.0f}  "
            f"{row['statuses']}"
        )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="API Lambda cold start: base commit against working tree")
    parser.add_argument("--repeats", type=int, default=7, help="counted rounds (one more warms up)")
    parser.add_argument("--base", default="main", help="the 'before' is its merge base with HEAD")
    parser.add_argument("--python", help="interpreter to run the children (default: a CPython 3.13 if found)")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("need at least one counted round")

    python = interpreter_for_bench(args.python)
    started = datetime.now(UTC)
    t0 = time.monotonic()
    print(f"preparing variants with {python} ({_version(python)}) in {WORK_DIR.relative_to(REPO_ROOT)}/")
    variants, base_commit, pins = prepare_variants(python, args.base)
    with scratch_database() as db:
        tenant = make_tenant(db.url)
        machine = describe_machine(db_url=db.url, database=db.source)
        load_before = load_average()
        rows = measure(python, variants, db.url, tenant, args.repeats)
    machine["load_average_before"] = load_before
    machine["load_average_after"] = load_average()
    document = {
        "schema": SCHEMA,
        "started_at": started.isoformat(),
        "duration_s": time.monotonic() - t0,
        "command": command_line("bench.cold_start", argv),
        "machine": machine,
        "config": {
            "repeats": args.repeats,
            "base": args.base,
            "base_commit": base_commit,
            "python": _version(python),
            "platform": f"{platform.machine()}-manylinux_2_28",
            "dependencies": pins,
        },
        "targets_ms": TARGETS_MS,
        "rows": rows,
    }
    write_json(args.output, document)
    print_rows(rows)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
