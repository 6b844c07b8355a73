"""The Lambda layer holds uv.lock's versions for the Lambda runtime, and nothing the lock does not pin; it is
rebuilt when anything it is made from changes, the database CA bundle included.

No network: ``uv export --frozen`` reads uv.lock alone, a stand-in installer fills the layers built here, and
the real built layer is only checked when present.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from layers import build, database_ca
from tests.certificates import NOW, certificate, digests

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
    stamp = build.read_layer_stamp()
    if stamp is None:
        pytest.skip("no layer built here (python layers/build.py)")
    ca = (stamp.get("rds_ca") or {}).get("sha256")
    if stamp.get("fingerprint") not in {plan.fingerprint(tag, ca) for tag in (None, "cpython-313")}:
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


# ------------------------------------------------------------------------------------ the database CA


# A one-package plan and an installer that writes it without uv: enough for build_layer to write the CA
# file (it needs certifi's roots) and check the installed versions against the pins.
TINY_PLAN = build.LayerPlan(exported="certifi==2026.1.4\n", pins={"certifi": "2026.1.4"})
PUBLIC_ROOTS = certificate("Public Root CA", organization="Public Trust")


def install_certifi(requirements: Path, target: Path, plan: build.LayerPlan) -> None:
    (target / "certifi").mkdir(parents=True)
    (target / "certifi" / "cacert.pem").write_bytes(PUBLIC_ROOTS)
    dist_info = target / "certifi-2026.1.4.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text("Metadata-Version: 2.4\nName: certifi\nVersion: 2026.1.4\n")


def amazons(pem: bytes) -> database_ca.RdsBundle:
    """``pem`` classified as Amazon's bundle, its roots standing in for amazon_rds_roots.txt."""
    return database_ca.classify_rds_bundle(pem, "global-bundle.pem", roots=digests(pem), now=NOW)


def layer_ca(layer: Path) -> bytes:
    return (layer / "python" / database_ca.LAYER_RELATIVE_PATH).read_bytes()


def test_a_layer_built_with_one_ca_bundle_is_rebuilt_when_the_bundle_changes(tmp_path: Path) -> None:
    layer = tmp_path / "layer"
    first = amazons(certificate("Amazon RDS test-region-1 Root CA RSA2048 G1"))
    second = amazons(certificate("Amazon RDS test-region-1 Root CA RSA4096 G1"))

    # Given a layer built with one bundle, which the same bundle finds current
    assert build.build_layer(layer, TINY_PLAN, None, False, rds_ca=first, install=install_certifi)
    assert not build.build_layer(layer, TINY_PLAN, None, False, rds_ca=first, install=install_certifi)
    assert layer_ca(layer).endswith(first.pem)

    # When the bundle changes, and nothing else
    rebuilt = build.build_layer(layer, TINY_PLAN, None, False, rds_ca=second, install=install_certifi)

    # Then the layer is built again and holds the new bundle, after certifi's roots, and not the old one
    assert rebuilt
    assert layer_ca(layer) == PUBLIC_ROOTS.rstrip(b"\n") + b"\n" + second.pem.strip() + b"\n"
    assert first.pem.strip() not in layer_ca(layer)
    stamp = build.read_layer_stamp(layer)
    assert stamp is not None and stamp["rds_ca"]["sha256"] == second.sha256


def test_the_stamp_says_when_a_layer_holds_a_test_bundle(tmp_path: Path) -> None:
    layer = tmp_path / "layer"
    stand_in = database_ca.classify_rds_bundle(
        certificate("Tollgate Local Test CA", organization="Tollgate tests"),
        "test-ca.pem",
        test_bundle=True,
        now=NOW,
    )

    build.build_layer(layer, TINY_PLAN, None, False, rds_ca=stand_in, install=install_certifi)

    assert build.holds_test_ca_bundle(layer)
    assert build.read_layer_stamp(layer) == {
        "fingerprint": TINY_PLAN.fingerprint(None, stand_in.sha256),
        "rds_ca": {"sha256": stand_in.sha256, "from_amazon": False, "source": "test-ca.pem"},
    }

    # Amazon's bundle replaces it, and the stamp stops saying so.
    build.build_layer(
        layer,
        TINY_PLAN,
        None,
        False,
        rds_ca=amazons(certificate("Amazon RDS x Root CA")),
        install=install_certifi,
    )
    assert not build.holds_test_ca_bundle(layer)


def test_a_layer_stamped_before_the_ca_counted_is_rebuilt(tmp_path: Path) -> None:
    layer = tmp_path / "layer"
    bundle = amazons(certificate("Amazon RDS test-region-1 Root CA RSA2048 G1"))
    build.build_layer(layer, TINY_PLAN, None, False, rds_ca=bundle, install=install_certifi)
    # What the build wrote before: the fingerprint alone, in plain text, with no CA in it.
    build.layer_stamp(layer).write_text(TINY_PLAN.fingerprint(None))

    assert build.read_layer_stamp(layer) is None
    assert build.build_layer(layer, TINY_PLAN, None, False, rds_ca=bundle, install=install_certifi)


def test_a_test_bundle_is_announced_loudly_and_amazons_new_roots_quietly(
    capsys: pytest.CaptureFixture[str],
) -> None:
    stand_in = database_ca.RdsBundle(b"pem", from_amazon=False, source="test-ca.pem")
    newer = database_ca.RdsBundle(
        b"pem", from_amazon=True, source="global-bundle.pem", unrecorded=("ab  Amazon RDS new",)
    )

    build.announce_rds_ca(stand_in, Path("build/layer"))
    warning = capsys.readouterr().err
    build.announce_rds_ca(newer, Path("build/layer"))
    note = capsys.readouterr().err

    assert "WARNING" in warning and "TEST database CA bundle" in warning and "test-ca.pem" in warning
    assert "Never deploy it" in warning
    assert note.startswith("note:") and note.rstrip().endswith("ab  Amazon RDS new")


def test_the_build_refuses_a_stand_in_bundle_before_building_anything(tmp_path: Path) -> None:
    stand_in = tmp_path / "global-bundle.pem"
    stand_in.write_bytes(certificate("Amazon RDS test-region-1 Root CA RSA2048 G1"))
    layer = tmp_path / "layer"

    with pytest.raises(SystemExit, match="--test-ca-bundle"):
        build.main(["--bytecode", "skip", "--rds-ca-bundle", str(stand_in), "--output", str(layer)])

    assert not layer.exists() and not build.layer_stamp(layer).exists()


@pytest.mark.parametrize(("value", "test_bundle"), [("1", True), ("", False), ("0", False)])
def test_the_test_flag_may_come_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, value: str, test_bundle: bool
) -> None:
    monkeypatch.setenv("LAMBDA_TEST_CA_BUNDLE", value)

    assert build.parse_arguments([]).test_ca_bundle is test_bundle
    assert build.parse_arguments(["--test-ca-bundle"]).test_ca_bundle
