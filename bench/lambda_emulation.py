"""Runs the built Lambda artifacts on the runtime's platform, emulated: CPython 3.13 on arm64 under QEMU.

``make lambda-emulate`` builds the layer and function code (layers/build.py), then this script:

1. makes an arm64 Debian trixie root once (``.cache/lambda-root/``, about 100 MB): debootstrap's first
   stage downloads the packages (python3.13 and what it needs) and this script unpacks them, so no arm64
   program runs during the setup;
2. puts the function code at ``/var/task`` and the layer at ``/opt/python`` inside that root, as Lambda
   does, and runs the cold-start child (bench/cold_start.py) with that root's python3.13 through
   qemu-aarch64-static: import the API handler, wait for the pool, serve one new job against a scratch
   database on this machine's PostgreSQL;
3. runs it with ``-v`` and counts the modules loaded from the shipped bytecode and the ones compiled, so
   a pyc that the runtime would not accept shows up as a number, not as a slow cold start in production.

Needs root, debootstrap and qemu-user-static (Debian: ``apt-get install debootstrap qemu-user-static``).
Times under emulation are many times Lambda's; the point is that the artifacts import and answer there.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.acceptance import JobSource, gateway_event, scratch_database
from bench.cold_start_compare import make_tenant
from layers import build
from tollgate.settings import REPO_ROOT

ROOT = REPO_ROOT / ".cache" / "lambda-root"
SUITE = "trixie"  # Debian 13: the release whose python3.13 is the runtime's minor version
CHILD = REPO_ROOT / "bench" / "cold_start.py"
PYTHON = f"/usr/bin/python{build.PYTHON_VERSION}"
# `python -v` says where each module's code came from: a quoted .pyc path when it was loaded from
# bytecode, an unquoted .py path when it was compiled from source.
CODE_FROM = re.compile(r"^# code object from (?P<quote>'?)(?P<path>[^']+?)'?$")


def _require(tool: str) -> str:
    found = shutil.which(tool)
    if found is None:
        raise SystemExit(f"{tool} is missing: apt-get install debootstrap qemu-user-static")
    return found


def make_root(root: Path) -> None:
    """An arm64 trixie root with python3.13 unpacked; kept between runs."""
    if (root / PYTHON.lstrip("/")).is_file():
        return
    if os.geteuid() != 0:
        raise SystemExit("debootstrap needs root to make the arm64 root")
    debootstrap = _require("debootstrap")
    root.parent.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(root, ignore_errors=True)
    # --foreign: download and unpack only; nothing arm64 is executed. The default mirror is Debian's own.
    include = f"--include=python{build.PYTHON_VERSION}"
    subprocess.run(
        [debootstrap, "--foreign", "--arch=arm64", "--variant=minbase", include, SUITE, str(root)], check=True
    )
    # The first stage unpacked only the essential packages; unpack the rest (python3.13 and its libraries).
    for deb in sorted((root / "var" / "cache" / "apt" / "archives").glob("*.deb")):
        subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], check=True)
    if not (root / PYTHON.lstrip("/")).is_file():
        raise SystemExit(f"{PYTHON} did not land in {root}")


def place_artifacts(root: Path, function: Path, layer: Path) -> None:
    """Lambda's layout inside the root: the code at /var/task, the layer's python/ at /opt/python."""
    for inside, outside in ((root / "var" / "task", function), (root / "opt" / "python", layer / "python")):
        if not outside.is_dir():
            raise SystemExit(f"{outside} is missing: run `python layers/build.py` first")
        inside.parent.mkdir(parents=True, exist_ok=True)
        if inside.is_symlink() or inside.is_file():
            inside.unlink()
        elif inside.is_dir():
            shutil.rmtree(inside)
        inside.symlink_to(outside.resolve(), target_is_directory=True)


def count_sources(stderr: str) -> dict[str, int]:
    counts = {"task_pyc": 0, "layer_pyc": 0, "task_compiled": 0, "layer_compiled": 0, "stdlib_compiled": 0}
    for line in stderr.splitlines():
        found = CODE_FROM.match(line)
        if found is None:
            continue
        path, from_pyc = found["path"], bool(found["quote"])
        where = "task" if path.startswith("/var/task/") else "layer" if path.startswith("/opt/") else "stdlib"
        if from_pyc and where != "stdlib":
            counts[f"{where}_pyc"] += 1
        elif not from_pyc:
            counts[f"{where}_compiled"] += 1
    return counts


def compile_root_stdlib(root: Path) -> None:
    """Debian compiles its standard library when a package is configured, which an unpacked root skips;
    Lambda's runtime ships its own compiled. Compile it once, with a host CPython 3.13 when there is one
    (same bytecode format), else with the emulated one."""
    stamp = root / ".stdlib-compiled"
    if stamp.is_file():
        return
    stdlib = root / "usr" / "lib" / f"python{build.PYTHON_VERSION}"
    host = build.find_runtime_python(build.PYTHON_VERSION)
    command = (
        [host, "-m", "compileall", "-q", "-j", "0", "-s", str(root), "-p", "/", str(stdlib)]
        if host
        else [_require("qemu-aarch64-static"), "-L", str(root), str(root / PYTHON.lstrip("/")), "-m",
              "compileall", "-q", f"/usr/lib/python{build.PYTHON_VERSION}"]
    )  # fmt: skip
    subprocess.run(command, check=False, stdout=subprocess.DEVNULL)
    stamp.write_text("compiled\n")


def run_emulated(root: Path, db_url: str, event: dict[str, Any]) -> dict[str, Any]:
    qemu = _require("qemu-aarch64-static")
    env = {
        "PATH": "/usr/bin:/bin",
        # qemu's -L looks absolute paths up in the root first, so these are the placed artifacts.
        "PYTHONPATH": "/var/task:/opt/python",
        "PYTHONDONTWRITEBYTECODE": "1",  # Lambda's file system is read-only
        "DATABASE_URL": db_url,
        "DOCUMENTS_BUCKET": "tollgate-emulated-documents",
        "AWS_DEFAULT_REGION": "eu-west-1",
        "AWS_ACCESS_KEY_ID": "emulated",
        "AWS_SECRET_ACCESS_KEY": "emulated",
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9",
    }
    # The child script is read through the host path (qemu falls back to it when the root has no such file).
    start = time.monotonic()
    done = subprocess.run(
        [qemu, "-L", str(root), str(root / PYTHON.lstrip("/")), "-v", "-s", "-P", str(CHILD), "handler"],
        env=env,
        input=json.dumps(event),
        capture_output=True,
        text=True,
        check=False,
    )
    elapsed = time.monotonic() - start
    if done.returncode != 0:
        raise SystemExit(f"the emulated cold start failed ({done.returncode}):\n{done.stderr[-4000:]}")
    report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return {"wall_s": elapsed, "child": report, "modules": count_sources(done.stderr)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Import and call the built API Lambda on emulated arm64")
    parser.add_argument("--root", type=Path, default=ROOT, help="where the arm64 root is kept")
    args = parser.parse_args(argv)

    started = time.monotonic()
    make_root(args.root)
    compile_root_stdlib(args.root)
    place_artifacts(args.root, build.FUNCTION_OUTPUT, build.DEFAULT_OUTPUT)
    with scratch_database() as db:
        tenant = make_tenant(db.url)
        (job,) = JobSource().take(1, [tenant])
        result = run_emulated(args.root, db.url, gateway_event(job, "emulated.local"))
    result["total_s"] = time.monotonic() - started
    print(json.dumps(result, indent=2))
    status, modules = result["child"]["status"], result["modules"]
    compiled = modules["task_compiled"] + modules["layer_compiled"]
    ok = status == 202 and compiled == 0 and modules["task_pyc"] > 0 and modules["layer_pyc"] > 0
    print(
        f"emulated arm64 CPython {build.PYTHON_VERSION}: first response {status} in "
        f"{result['child']['to_first_response_ms'] / 1000:.1f} s; modules from shipped bytecode: "
        f"{modules['task_pyc']} code, {modules['layer_pyc']} layer; compiled from the artifacts' sources: "
        f"{compiled}" + ("" if ok else "  <- not what Lambda should see"),
        file=sys.stderr,
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
