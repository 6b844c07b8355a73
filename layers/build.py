"""Builds the Lambda dependency layer (``build/layer/python``) from pyproject's ``[project].dependencies``.

No Docker: the installer fetches manylinux wheels for Lambda's CPU and CPython version instead of building
for this machine, so the layer comes out the same on any host. Usage: ``python layers/build.py [--force]``.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Sequence
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = REPO_ROOT / "pyproject.toml"
DEFAULT_OUTPUT = REPO_ROOT / "build" / "layer"

# Must match stacks/constructs/lambda_packaging.py (LAMBDA_RUNTIME, LAMBDA_ARCHITECTURE); an
# infrastructure test compares them, because compiled wheels only load on the CPython they were built for.
PYTHON_VERSION = "3.13"
PIP_PLATFORM = "manylinux2014_aarch64"
UV_PLATFORM = "aarch64-manylinux2014"

# Synth-time packages: if one of these ever lands in [project].dependencies, the layer would grow by
# hundreds of megabytes and break Lambda's size limit, so refuse loudly instead.
FORBIDDEN = frozenset({"aws-cdk-lib", "constructs", "cdk-nag", "jsii"})


def requirement_name(requirement: str) -> str:
    match = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement.strip())
    if match is None:
        raise ValueError(f"cannot read a package name from {requirement!r}")
    return re.sub(r"[-_.]+", "-", match.group()).lower()


def runtime_requirements(pyproject: Path = PYPROJECT) -> list[str]:
    """``[project].dependencies`` as written, after checking that no synth-time package is among them."""
    requirements: list[str] = tomllib.loads(pyproject.read_text())["project"]["dependencies"]
    forbidden = sorted(FORBIDDEN & {requirement_name(r) for r in requirements})
    if forbidden:
        raise SystemExit(
            f"{', '.join(forbidden)} must not be runtime dependencies (they would enter the layer)"
        )
    return requirements


def install_command(requirements: Sequence[str], target: Path, python_version: str) -> list[str]:
    """pip when this interpreter has it, else uv (its venvs come without pip); both mean the same install."""
    if importlib.util.find_spec("pip") is not None:
        return [
            sys.executable, "-m", "pip", "install",
            "--platform", PIP_PLATFORM,
            "--only-binary=:all:",
            "--python-version", python_version,
            "--implementation", "cp",
            # Bytecode compiled by this interpreter would not match the runtime's version; skip it.
            "--no-compile",
            "--disable-pip-version-check",
            "--quiet",
            "--target", str(target),
            *requirements,
        ]  # fmt: skip
    # `make setup` installs uv into the virtualenv itself, which need not be on PATH.
    beside_python = Path(sys.executable).with_name("uv")
    uv = str(beside_python) if beside_python.is_file() else shutil.which("uv")
    if uv is None:
        raise SystemExit("neither pip (in this interpreter) nor uv is available to build the layer")
    return [
        uv, "pip", "install",
        "--python", sys.executable,
        "--python-platform", UV_PLATFORM,
        "--only-binary", ":all:",
        "--python-version", python_version,
        "--quiet",
        "--target", str(target),
        *requirements,
    ]  # fmt: skip


def fingerprint(requirements: Sequence[str], python_version: str) -> str:
    """What the layer's content depends on; an unchanged fingerprint means the last build still holds."""
    inputs = {"requirements": list(requirements), "python": python_version, "platform": PIP_PLATFORM}
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()


def build(output: Path, python_version: str, force: bool) -> bool:
    """Fill ``output/python``; returns False when an up-to-date build was already there."""
    requirements = runtime_requirements()
    stamp = output.with_name(output.name + ".stamp")
    expected = fingerprint(requirements, python_version)
    if not force and (output / "python").is_dir() and stamp.is_file() and stamp.read_text() == expected:
        return False

    output.parent.mkdir(parents=True, exist_ok=True)
    # Build beside the old layer and swap at the end, so a failed download never leaves half a layer
    # for the next synth to upload.
    with tempfile.TemporaryDirectory(dir=output.parent, prefix=".layer-") as scratch:
        staging = Path(scratch) / "layer"
        # The command is built from pyproject and fixed flags; no shell is involved.
        subprocess.run(install_command(requirements, staging / "python", python_version), check=True)  # noqa: S603
        # Console scripts carry this machine's interpreter path; nothing in Lambda runs them.
        shutil.rmtree(staging / "python" / "bin", ignore_errors=True)
        stamp.unlink(missing_ok=True)
        shutil.rmtree(output, ignore_errors=True)
        staging.rename(output)
    stamp.write_text(expected)
    return True


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="layer folder (holds python/)")
    parser.add_argument("--python-version", default=PYTHON_VERSION, help="Lambda runtime's CPython version")
    parser.add_argument("--force", action="store_true", help="rebuild even when the inputs are unchanged")
    args = parser.parse_args(argv)

    built = build(args.output.resolve(), args.python_version, args.force)
    print(f"layer {'built' if built else 'up to date'}: {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
