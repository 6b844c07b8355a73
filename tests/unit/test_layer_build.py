"""The Lambda layer holds uv.lock's versions for the Lambda runtime, and nothing the lock does not pin.

No network: ``uv export --frozen`` reads uv.lock alone, and the built layer is only checked when present.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from layers import build

LOCKED = {
    package["name"]: package.get("version")
    for package in tomllib.loads(build.LOCKFILE.read_text())["package"]
}


@pytest.fixture(scope="module")
def plan() -> build.LayerPlan:
    return build.plan_layer()


def test_the_plan_pins_every_package_at_its_locked_version(plan: build.LayerPlan) -> None:
    assert plan.pins, "the export pinned nothing"
    assert {name: LOCKED.get(name) for name in plan.pins} == plan.pins
    # The versions that once drifted: the layer took the newest release within pyproject's range.
    assert plan.pins["psycopg"] == LOCKED["psycopg"]
    assert plan.pins["psycopg-binary"] == LOCKED["psycopg-binary"]


def test_the_plan_holds_the_runtime_closure_and_no_tooling(plan: build.LayerPlan) -> None:
    direct = {build.requirement_name(r) for r in build.runtime_requirements()}

    assert direct <= plan.pins.keys()
    # Dependencies of the runtime ones come along (pydantic's core, boto3's botocore)...
    assert {"pydantic-core", "botocore", "psycopg-binary"} <= plan.pins.keys()
    # ...but not the dev, CDK or local-stack packages, nor the project itself.
    assert not {"pytest", "ruff", "aws-cdk-lib", "moto", "typer", "tollgate"} & plan.pins.keys()


def test_pins_follow_the_lambda_runtimes_markers() -> None:
    exported = (
        "pydantic==2.14.4 \\\n    --hash=sha256:00\n"
        "tzdata==2026.6 ; sys_platform == 'win32' \\\n    --hash=sha256:11\n"
        "psycopg-binary==3.3.9 ; implementation_name != 'pypy'\n"
        "backport==1.0 ; python_full_version < '3.12'\n"
    )

    assert build.pinned_versions(exported) == {"pydantic": "2.14.4", "psycopg-binary": "3.3.9"}


def test_an_unpinned_export_is_refused() -> None:
    with pytest.raises(SystemExit, match="not pinned"):
        build.pinned_versions("pydantic>=2\n")


def test_the_install_takes_the_export_alone_as_target_wheels(plan: build.LayerPlan, tmp_path: Path) -> None:
    requirements = tmp_path / "requirements.txt"

    command = build.install_command(requirements, tmp_path / "python", plan, "uv")

    def flag(name: str) -> str:
        return command[command.index(name) + 1]

    assert flag("--requirements") == str(requirements) and flag("--target") == str(tmp_path / "python")
    assert flag("--python-platform") == "aarch64-manylinux_2_28" and flag("--python-version") == "3.13"
    assert flag("--only-binary") == ":all:"
    # Nothing but the export's pins, checked against the lock's hashes.
    assert {"--no-deps", "--require-hashes"} <= set(command)
    assert "--hash=sha256:" in plan.exported


def test_the_build_reads_versions_from_dist_info(tmp_path: Path) -> None:
    for name, version in (("Pydantic_Core", "2.50.5"), ("psycopg", "3.3.9")):
        dist_info = tmp_path / f"{name}-{version}.dist-info"
        dist_info.mkdir()
        (dist_info / "METADATA").write_text(f"Metadata-Version: 2.4\nName: {name}\nVersion: {version}\n")

    assert build.installed_versions(tmp_path) == {"pydantic-core": "2.50.5", "psycopg": "3.3.9"}


def test_a_built_layer_holds_the_locked_versions(plan: build.LayerPlan) -> None:
    site = build.DEFAULT_OUTPUT / "python"
    stamp = build.DEFAULT_OUTPUT.with_name("layer.stamp")
    if not site.is_dir() or not stamp.is_file():
        pytest.skip("no layer built here (python layers/build.py)")
    if stamp.read_text() not in {plan.fingerprint(None), plan.fingerprint("cpython-313")}:
        pytest.skip("the built layer predates uv.lock; the next build replaces it")

    assert build.installed_versions(site) == plan.pins


def test_bytecode_is_unchecked_hash_for_the_lambda_paths(tmp_path: Path) -> None:
    command = build.compile_command("python3.13", tmp_path, build.TASK_ROOT)

    assert command[command.index("--invalidation-mode") + 1] == "unchecked-hash"
    assert (
        command[command.index("-s") + 1] == str(tmp_path) and command[command.index("-p") + 1] == "/var/task"
    )


def test_an_interpreter_of_another_version_is_refused() -> None:
    import sys

    other = "3.12" if sys.version_info[:2] != (3, 12) else "3.11"
    with pytest.raises(SystemExit, match=f"not a CPython {other}"):
        build.find_runtime_python(other, explicit=sys.executable)


def test_the_function_stamp_names_the_sources_it_was_copied_from(tmp_path: Path) -> None:
    output = tmp_path / "function"

    build.build_function(output, interpreter=None)

    stamp = json.loads((tmp_path / "function.stamp").read_text())
    assert stamp == {"source": build.source_fingerprint(), "bytecode": None}
    assert (output / "functions" / "api" / "handler.py").is_file()
    assert not list(output.rglob("__pycache__"))
    assert build.source_fingerprint(output) == build.source_fingerprint()


def test_compiled_function_code_is_unchecked_hash_and_reproducible(tmp_path: Path) -> None:
    """The code asset's hash must not change from one build to the next of the same sources, or every
    deploy would replace every function; and each pyc must be one Lambda uses without its source's mtime."""
    interpreter = build.find_runtime_python()
    if interpreter is None:
        pytest.skip(f"no CPython {build.PYTHON_VERSION} on this machine")
    first, second = tmp_path / "first", tmp_path / "second"
    build.build_function(first, interpreter)
    build.build_function(second, interpreter)

    pycs = sorted(p.relative_to(first) for p in first.rglob("*.pyc"))
    assert pycs and all(p.name.endswith(".cpython-313.pyc") for p in pycs)
    assert len(pycs) == len(list(first.rglob("*.py")))
    for relative in pycs:
        header = (first / relative).read_bytes()[:16]
        assert int.from_bytes(header[4:8], "little") == 0b01, f"{relative} is not an unchecked-hash pyc"
        assert (first / relative).read_bytes() == (second / relative).read_bytes()
