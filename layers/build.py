"""Builds what every Tollgate Lambda runs: the dependency layer (``build/layer/python``) from uv.lock, and the
function code (``build/function``), both with bytecode compiled for the Lambda runtime's CPython.

No Docker: the installer fetches the locked versions' manylinux wheels for Lambda's CPU and CPython instead
of building for this machine. Usage: ``python layers/build.py [--force] [--bytecode require|skip]
[--rds-ca-bundle FILE] [--test-ca-bundle]``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if not __package__:  # run as a script (`python layers/build.py`): make the `layers` package importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from layers import database_ca

REPO_ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = REPO_ROOT / "pyproject.toml"
LOCKFILE = REPO_ROOT / "uv.lock"
BUILD_DIR = REPO_ROOT / "build"
DEFAULT_OUTPUT = BUILD_DIR / "layer"
FUNCTION_OUTPUT = BUILD_DIR / "function"

# Must match stacks/constructs/lambda_packaging.py (LAMBDA_RUNTIME, LAMBDA_ARCHITECTURE); an
# infrastructure test compares them, because compiled wheels only load on the CPython they were built for.
PYTHON_VERSION = "3.13"
# psycopg-binary 3.3 publishes only manylinux_2_28 wheels for aarch64; Lambda's Amazon Linux 2023
# (glibc 2.34) runs them.
UV_PLATFORM = "aarch64-manylinux_2_28"
# Where Lambda puts the two artifacts; compiled code objects carry these paths, so tracebacks show them.
LAYER_MOUNT = "/opt/python"
TASK_ROOT = "/var/task"

# The only top-level folders a Lambda imports from or reads at run time.
RUNTIME_FOLDERS = ("tollgate", "functions", "migrations")
# Never copied into the function code: this machine's bytecode and editor litter.
_NOT_SHIPPED = ("__pycache__", "*.py[cod]", ".DS_Store")

# Synth-time packages: if one of these ever lands in the runtime dependencies, the layer would grow by
# hundreds of megabytes and break Lambda's size limit, so refuse loudly instead.
FORBIDDEN = frozenset({"aws-cdk-lib", "constructs", "cdk-nag", "jsii"})

# The marker environment of the Lambda runtime, for deciding which exported requirements apply to it.
LAMBDA_MARKERS = {
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "platform_machine": "aarch64",
    "os_name": "posix",
    "python_version": PYTHON_VERSION,
    "python_full_version": f"{PYTHON_VERSION}.0",
}


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(requirement: str) -> str:
    match = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement.strip())
    if match is None:
        raise ValueError(f"cannot read a package name from {requirement!r}")
    return normalize(match.group())


def runtime_requirements(pyproject: Path = PYPROJECT) -> list[str]:
    """``[project].dependencies`` as written, after checking that no synth-time package is among them."""
    requirements: list[str] = tomllib.loads(pyproject.read_text())["project"]["dependencies"]
    forbidden = sorted(FORBIDDEN & {requirement_name(r) for r in requirements})
    if forbidden:
        raise SystemExit(
            f"{', '.join(forbidden)} must not be runtime dependencies (they would enter the layer)"
        )
    return requirements


def uv_binary() -> str:
    # `make setup` installs uv into the virtualenv itself, which need not be on PATH.
    beside_python = Path(sys.executable).with_name("uv")
    uv = str(beside_python) if beside_python.is_file() else shutil.which("uv")
    if uv is None:
        raise SystemExit("uv is needed to export uv.lock and build the layer (`make setup` installs it)")
    return uv


def export_command(uv: str) -> list[str]:
    """The locked runtime dependencies, pinned and hashed: no dev or CDK group, no extra, not the project."""
    return [
        uv, "export", "--frozen", "--no-dev", "--no-default-groups", "--no-emit-project",
        "--format", "requirements.txt", "--no-header", "--no-annotate",
    ]  # fmt: skip


def export_locked_requirements(project: Path = REPO_ROOT) -> str:
    """Runs ``uv export --frozen``: it reads uv.lock only, so it needs no network and never re-resolves."""
    done = subprocess.run(  # noqa: S603  # fixed flags, no shell
        export_command(uv_binary()), cwd=project, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"uv export failed (is uv.lock in step with pyproject.toml?):\n{done.stderr}")
    return done.stdout


def _marker_applies(marker: str, environment: Mapping[str, str]) -> bool:
    from packaging.markers import Marker  # dev tooling; only the build and its tests evaluate markers

    return Marker(marker).evaluate(dict(environment))


def pinned_versions(exported: str, environment: Mapping[str, str] = LAMBDA_MARKERS) -> dict[str, str]:
    """``name -> version`` of every exported pin whose marker holds on the Lambda runtime."""
    pins: dict[str, str] = {}
    # A requirement may continue over lines ending in a backslash (its hashes).
    for raw in exported.replace("\\\n", " ").splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", "-")):
            continue
        requirement, _, marker = line.partition(";")
        marker = marker.split(" --hash")[0].strip()
        requirement = requirement.split(" --hash")[0].strip()
        name, separator, version = requirement.partition("==")
        if separator != "==":
            raise SystemExit(f"exported requirement {requirement!r} is not pinned with ==")
        if marker and not _marker_applies(marker, environment):
            continue
        pins[normalize(name)] = version.strip()
    return pins


@dataclass(frozen=True)
class LayerPlan:
    """What the layer will hold, decided before anything is downloaded."""

    exported: str  # uv export's requirements.txt, hashes included
    pins: dict[str, str]  # the versions that apply to the target
    python_version: str = PYTHON_VERSION
    platform: str = UV_PLATFORM

    def fingerprint(self, bytecode: str | None, rds_ca_sha256: str | None = None) -> str:
        """Digest of everything the layer is made from: a layer with another fingerprint is stale. The
        database CA bundle is one of those inputs: a layer once built with a stand-in bundle must not keep
        it when Amazon's is given."""
        inputs = {
            "exported": self.exported,
            "python": self.python_version,
            "platform": self.platform,
            "bytecode": bytecode,
            "rds_ca_sha256": rds_ca_sha256,
        }
        return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()


def plan_layer(
    exported: str | None = None, python_version: str = PYTHON_VERSION, platform: str = UV_PLATFORM
) -> LayerPlan:
    runtime_requirements()  # refuses CDK packages before anything else
    exported = export_locked_requirements() if exported is None else exported
    environment = dict(LAMBDA_MARKERS)
    if python_version != PYTHON_VERSION:
        environment.update(python_version=python_version, python_full_version=f"{python_version}.0")
    if not platform.startswith("aarch64"):
        environment["platform_machine"] = platform.split("-", maxsplit=1)[0]
    pins = pinned_versions(exported, environment)
    forbidden = sorted(FORBIDDEN & pins.keys())
    if forbidden:
        raise SystemExit(
            f"{', '.join(forbidden)} must not be runtime dependencies (they would enter the layer)"
        )
    return LayerPlan(exported, pins, python_version, platform)


def install_command(requirements_file: Path, target: Path, plan: LayerPlan, uv: str) -> list[str]:
    """Installs exactly the exported pins: ``--no-deps`` so nothing outside the lock comes in, hashes
    checked, wheels only (a package with no wheel for the target fails the build instead of compiling)."""
    return [
        uv, "pip", "install",
        "--python", sys.executable,
        "--python-platform", plan.platform,
        "--python-version", plan.python_version,
        "--only-binary", ":all:",
        "--no-deps",
        "--require-hashes",
        "--quiet",
        "--target", str(target),
        "--requirements", str(requirements_file),
    ]  # fmt: skip


def install_locked(requirements_file: Path, target: Path, plan: LayerPlan) -> None:
    """The layer's packages as uv installs them (see ``install_command``)."""
    subprocess.run(install_command(requirements_file, target, plan, uv_binary()), check=True)  # noqa: S603


def installed_versions(site: Path) -> dict[str, str]:
    """``name -> version`` from the ``*.dist-info`` folders of an installed tree (a built layer's python/)."""
    versions: dict[str, str] = {}
    for dist_info in site.glob("*.dist-info"):
        fields = dict(
            line.split(": ", 1) for line in (dist_info / "METADATA").read_text().splitlines() if ": " in line
        )
        versions[normalize(fields["Name"])] = fields["Version"]
    return versions


# ------------------------------------------------------------------------------------------------ bytecode


def python_version_of(interpreter: str) -> str | None:
    try:
        done = subprocess.run(  # noqa: S603  # a candidate interpreter, asked only its version
            [interpreter, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except OSError:
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def _candidate_interpreters(version: str) -> Iterator[tuple[str, dict[str, str] | None]]:
    on_path = shutil.which(f"python{version}")
    if on_path:
        yield on_path, None
    # pyenv puts a shim on PATH that only works when the version is selected; select it for the call.
    pyenv = shutil.which("pyenv")
    if pyenv:
        done = subprocess.run([pyenv, "versions", "--bare"], capture_output=True, text=True, check=False)  # noqa: S603
        for installed in done.stdout.split():
            if installed == version or installed.startswith(f"{version}."):
                env = {**os.environ, "PYENV_VERSION": installed}
                found = subprocess.run(  # noqa: S603
                    [pyenv, "which", f"python{version}"], capture_output=True, text=True, env=env, check=False
                )
                if found.returncode == 0 and found.stdout.strip():
                    yield found.stdout.strip(), None


def find_runtime_python(version: str = PYTHON_VERSION, explicit: str | None = None) -> str | None:
    """A CPython of the runtime's minor version on this machine: ``explicit`` (``--python`` or
    ``LAMBDA_PYTHON``) when given, else ``python3.13`` on PATH, else a pyenv-installed 3.13."""
    if explicit:
        if python_version_of(explicit) != version:
            raise SystemExit(f"{explicit} is not a CPython {version} interpreter")
        return explicit
    for interpreter, _ in _candidate_interpreters(version):
        if python_version_of(interpreter) == version:
            return interpreter
    return None


def compile_command(interpreter: str, tree: Path, shown_as: str) -> list[str]:
    """Unchecked-hash pycs: Lambda unpacks the zips with file times that are not the build's, so
    timestamp pycs would never match their sources and a read-only /var/task means each cold start
    compiles again; unchecked-hash pycs are used as they are. They are rebuilt with every build, from the
    same sources, so they cannot go stale."""
    return [
        interpreter, "-m", "compileall", "-q", "-f", "-j", "0",
        "--invalidation-mode", "unchecked-hash",
        "-s", str(tree), "-p", shown_as,
        str(tree),
    ]  # fmt: skip


def compile_tree(interpreter: str | None, tree: Path, shown_as: str) -> None:
    if interpreter is None:
        return
    subprocess.run(compile_command(interpreter, tree, shown_as), check=True, stdout=subprocess.DEVNULL)  # noqa: S603


# ---------------------------------------------------------------------------------------- function code


def _shipped(path: Path) -> bool:
    return not any(part == "__pycache__" for part in path.parts) and not any(
        path.match(pattern) for pattern in _NOT_SHIPPED
    )


def source_files(root: Path = REPO_ROOT) -> list[Path]:
    """The files of the function code, relative to ``root``, in a stable order."""
    files = [
        path.relative_to(root)
        for folder in RUNTIME_FOLDERS
        for path in (root / folder).rglob("*")
        if path.is_file() and _shipped(path.relative_to(root))
    ]
    return sorted(files)


def source_fingerprint(root: Path = REPO_ROOT) -> str:
    """Digest of every shipped file's path and bytes: a staged copy with another digest is stale."""
    digest = hashlib.sha256()
    for relative in source_files(root):
        digest.update(relative.as_posix().encode() + b"\0")
        digest.update(hashlib.sha256((root / relative).read_bytes()).digest())
    return digest.hexdigest()


def function_stamp(output: Path) -> Path:
    return output.with_name(output.name + ".stamp")


def read_function_stamp(output: Path = FUNCTION_OUTPUT) -> dict[str, str | None] | None:
    stamp = function_stamp(output)
    if not stamp.is_file() or not output.is_dir():
        return None
    loaded: dict[str, str | None] = json.loads(stamp.read_text())
    return loaded


def build_function(output: Path, interpreter: str | None) -> None:
    """Copy the runtime folders into ``output`` and compile them; the stamp records what was copied."""
    fingerprint = source_fingerprint()
    output.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=output.parent, prefix=".function-") as scratch:
        staging = Path(scratch) / "function"
        for relative in source_files():
            (staging / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO_ROOT / relative, staging / relative)
        compile_tree(interpreter, staging, TASK_ROOT)
        function_stamp(output).unlink(missing_ok=True)
        shutil.rmtree(output, ignore_errors=True)
        staging.rename(output)
    bytecode = _cache_tag(interpreter)
    function_stamp(output).write_text(json.dumps({"source": fingerprint, "bytecode": bytecode}))


def _cache_tag(interpreter: str | None) -> str | None:
    return f"cpython-{PYTHON_VERSION.replace('.', '')}" if interpreter else None


# ------------------------------------------------------------------------------------------------- layer


def layer_stamp(output: Path) -> Path:
    return output.with_name(output.name + ".stamp")


def read_layer_stamp(output: Path = DEFAULT_OUTPUT) -> dict[str, Any] | None:
    """What the last build recorded of the layer in ``output``: its ``fingerprint`` and its ``rds_ca``
    (``sha256``, ``from_amazon``, ``source``, or None without a CA file); None when there is no layer, or
    only one from before the stamp was JSON (which the next build replaces)."""
    stamp = layer_stamp(output)
    if not stamp.is_file() or not (output / "python").is_dir():
        return None
    try:
        loaded = json.loads(stamp.read_text())
    except json.JSONDecodeError:
        return None
    return loaded if isinstance(loaded, dict) else None


def holds_test_ca_bundle(output: Path = DEFAULT_OUTPUT) -> bool:
    """True when the layer in ``output`` was built with a bundle the build was told is a test bundle."""
    stamp = read_layer_stamp(output)
    rds_ca = stamp.get("rds_ca") if stamp else None
    return isinstance(rds_ca, dict) and rds_ca.get("from_amazon") is False


def build_layer(
    output: Path,
    plan: LayerPlan,
    interpreter: str | None,
    force: bool,
    *,
    rds_ca: database_ca.RdsBundle | None = None,
    install: Callable[[Path, Path, LayerPlan], None] = install_locked,
) -> bool:
    """Fill ``output/python``; returns False when an up-to-date build was already there.

    ``rds_ca`` is the classified RDS CA bundle; its digest is part of the fingerprint, so another bundle
    means another layer. ``None`` leaves the database CA file out, for tests of the install alone.
    ``install`` puts the plan's packages into a folder (uv, or a test's stand-in).
    """
    expected = plan.fingerprint(_cache_tag(interpreter), rds_ca.sha256 if rds_ca else None)
    previous = read_layer_stamp(output)
    if not force and previous is not None and previous.get("fingerprint") == expected:
        return False

    output.parent.mkdir(parents=True, exist_ok=True)
    # Build beside the old layer and swap at the end, so a failed download never leaves half a layer
    # for the next synth to upload.
    with tempfile.TemporaryDirectory(dir=output.parent, prefix=".layer-") as scratch:
        staging = Path(scratch) / "layer"
        requirements = Path(scratch) / "requirements.txt"
        requirements.write_text(plan.exported)
        install(requirements, staging / "python", plan)
        # Console scripts carry this machine's interpreter path; nothing in Lambda runs them.
        shutil.rmtree(staging / "python" / "bin", ignore_errors=True)
        installed = installed_versions(staging / "python")
        if installed != plan.pins:
            raise SystemExit(
                f"the layer does not hold uv.lock's versions: {_difference(plan.pins, installed)}"
            )
        if rds_ca is not None:
            database_ca.write_database_ca(staging / "python", rds_ca.pem)
        compile_tree(interpreter, staging / "python", LAYER_MOUNT)
        layer_stamp(output).unlink(missing_ok=True)
        shutil.rmtree(output, ignore_errors=True)
        staging.rename(output)
    recorded = None
    if rds_ca is not None:
        recorded = {"sha256": rds_ca.sha256, "from_amazon": rds_ca.from_amazon, "source": rds_ca.source}
    layer_stamp(output).write_text(json.dumps({"fingerprint": expected, "rds_ca": recorded}, indent=1))
    return True


def _difference(expected: Mapping[str, str], found: Mapping[str, str]) -> str:
    names = sorted(expected.keys() | found.keys())
    return ", ".join(
        f"{name} lock {expected.get(name, '-')} layer {found.get(name, '-')}"
        for name in names
        if expected.get(name) != found.get(name)
    )


TEST_BUNDLE_WARNING = """
################################################################################################
  WARNING: the layer in {output} holds a TEST database CA bundle, not Amazon's
  ({source}, sha256 {sha256}).
  A stage deployed with it fails every verify-full connection to its Aurora cluster (the
  migrations custom resource, and every client of a stage without RDS Proxy). Never deploy it:
  build again with Amazon's global-bundle.pem and without --test-ca-bundle first.
################################################################################################
"""

UNRECORDED_ROOTS = (
    "note: the RDS CA bundle holds Amazon RDS roots that layers/{roots} does not record yet; after checking "
    "them against {url}, add these lines there so an offline build knows them:\n{lines}"
)


def announce_rds_ca(bundle: database_ca.RdsBundle, output: Path) -> None:
    """Says on stderr, loudly, that the layer holds a test bundle; or, quietly, which new roots to record."""
    if not bundle.from_amazon:
        print(
            TEST_BUNDLE_WARNING.format(output=output, source=bundle.source, sha256=bundle.sha256),
            file=sys.stderr,
        )
    elif bundle.unrecorded:
        print(
            UNRECORDED_ROOTS.format(
                roots=database_ca.AMAZON_RDS_ROOTS_FILE.name,
                url=database_ca.RDS_CA_BUNDLE_URL,
                lines="\n".join(bundle.unrecorded),
            ),
            file=sys.stderr,
        )


NO_INTERPRETER = (
    "No CPython {version} found to compile the Lambda bytecode. Without it every cold start compiles "
    "each module it imports (about a second for the API). Install CPython {version} (e.g. `apt-get install "
    "python{version}` on Debian trixie, or pyenv), point LAMBDA_PYTHON (or --python) at it, or build "
    "without bytecode on purpose with `--bytecode skip` (`make synth BYTECODE=skip`)."
)


def parse_arguments(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="layer folder (holds python/)")
    parser.add_argument(
        "--function-output", type=Path, default=FUNCTION_OUTPUT, help="folder for the function code"
    )
    parser.add_argument(
        "--force", action="store_true", help="rebuild the layer even when its inputs are unchanged"
    )
    parser.add_argument(
        "--bytecode",
        choices=("require", "skip"),
        default=os.environ.get("LAMBDA_BYTECODE", "require"),
        help="require: fail without a CPython 3.13 to compile with (default); skip: ship sources only",
    )
    parser.add_argument(
        "--python", default=os.environ.get("LAMBDA_PYTHON") or None, help="CPython 3.13 to use"
    )
    parser.add_argument(
        "--rds-ca-bundle",
        type=Path,
        default=os.environ.get("LAMBDA_RDS_CA_BUNDLE") or None,
        help="Amazon's RDS CA bundle (global-bundle.pem) already downloaded; without it the build fetches it",
    )
    parser.add_argument(
        "--test-ca-bundle",
        action="store_true",
        default=os.environ.get("LAMBDA_TEST_CA_BUNDLE") == "1",
        help="accept an RDS CA bundle that is not Amazon's, for a layer never to be deployed (warns loudly)",
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_arguments(argv)
    interpreter = None
    if args.bytecode == "require":
        interpreter = find_runtime_python(PYTHON_VERSION, args.python)
        if interpreter is None:
            raise SystemExit(NO_INTERPRETER.format(version=PYTHON_VERSION))
    plan = plan_layer()
    # Read (or downloaded) on every build, even when the layer may be current: its digest decides that.
    try:
        rds_ca = database_ca.rds_bundle(args.rds_ca_bundle, test_bundle=args.test_ca_bundle)
    except (database_ca.DatabaseCaError, OSError) as error:
        raise SystemExit(str(error)) from error

    built = build_layer(args.output.resolve(), plan, interpreter, args.force, rds_ca=rds_ca)
    print(
        f"layer {'built' if built else 'up to date'}: {args.output} ({len(plan.pins)} packages from uv.lock)"
    )
    announce_rds_ca(rds_ca, args.output)
    build_function(args.function_output.resolve(), interpreter)
    compiled = f"bytecode for CPython {PYTHON_VERSION} by {interpreter}" if interpreter else "no bytecode"
    print(f"function code staged: {args.function_output} ({compiled})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
