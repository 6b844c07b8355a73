"""The code asset comes from layers/build.py's staged copy only while that copy matches the sources; a layer
built with a test database CA bundle is named at synth."""

from __future__ import annotations

import json
from pathlib import Path

import aws_cdk as cdk
import pytest

from layers.build import layer_stamp, source_fingerprint
from stacks.config import REPO_ROOT
from stacks.constructs.lambda_packaging import DependenciesLayer, code_folder

pytestmark = pytest.mark.infrastructure


def _staged(tmp_path: Path, source: str) -> Path:
    staged = tmp_path / "function"
    staged.mkdir()
    (tmp_path / "function.stamp").write_text(json.dumps({"source": source, "bytecode": "cpython-313"}))
    return staged


def test_a_staged_copy_of_the_current_sources_is_packaged(tmp_path: Path) -> None:
    staged = _staged(tmp_path, source_fingerprint())

    assert code_folder(staged) == staged


def test_a_staged_copy_older_than_the_sources_is_never_packaged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    staged = _staged(tmp_path, "0" * 64)

    assert code_folder(staged) == REPO_ROOT
    assert "older than the sources" in capsys.readouterr().err


def test_without_a_staged_copy_the_sources_are_packaged(tmp_path: Path) -> None:
    assert code_folder(tmp_path / "function") == REPO_ROOT


@pytest.mark.parametrize("from_amazon", [False, True])
def test_a_layer_holding_a_test_ca_bundle_is_named_at_synth(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], from_amazon: bool
) -> None:
    layer = tmp_path / "layer"
    (layer / "python").mkdir(parents=True)
    rds_ca = {"sha256": "0" * 64, "from_amazon": from_amazon, "source": "test-ca.pem"}
    layer_stamp(layer).write_text(json.dumps({"fingerprint": "1" * 64, "rds_ca": rds_ca}))
    stack = cdk.Stack(cdk.App(outdir=str(tmp_path / "cdk.out")), "Layered")

    DependenciesLayer(stack, "Dependencies", layer_dir=layer)

    warned = "TEST database CA bundle" in capsys.readouterr().err
    assert warned is not from_amazon
