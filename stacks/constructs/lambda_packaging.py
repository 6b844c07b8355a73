"""How Tollgate's Python code and its dependencies reach Lambda: one code asset, one layer.

``layers/build.py`` fills both folders: the layer with the locked Linux ARM64 wheels, the function code
with a copy of the runtime folders; both carry bytecode compiled for the runtime's CPython, so a cold
start loads code instead of compiling it. Neither needs Docker at synth time.
"""

from __future__ import annotations

import sys
from pathlib import Path

import aws_cdk as cdk
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from layers.build import (
    FUNCTION_OUTPUT,
    LAYER_MOUNT,
    RUNTIME_FOLDERS,
    holds_test_ca_bundle,
    read_function_stamp,
    source_fingerprint,
)
from layers.database_ca import LAYER_RELATIVE_PATH
from stacks.config import REPO_ROOT, StageConfig

__all__ = [
    "DATABASE_CA_ENVIRONMENT",
    "LAMBDA_ARCHITECTURE",
    "LAMBDA_RUNTIME",
    "RUNTIME_FOLDERS",
    "DependenciesLayer",
    "function_code",
    "lambda_database_environment",
]

LAMBDA_RUNTIME = lambda_.Runtime.PYTHON_3_13
LAMBDA_ARCHITECTURE = lambda_.Architecture.ARM_64
# What every Lambda that connects to PostgreSQL verifies the server with: the layer's bundle of public roots
# (RDS Proxy) and Amazon's RDS roots (the cluster itself), written by layers/build.py (layers/database_ca.py).
DATABASE_CA_ENVIRONMENT = {"DATABASE_CA_BUNDLE": f"{LAYER_MOUNT}/{LAYER_RELATIVE_PATH.as_posix()}"}


def lambda_database_environment(config: StageConfig, secret_arn: str, endpoint: str) -> dict[str, str]:
    """How a Lambda reaches the database: the secret, the host (RDS Proxy), the CA bundle in the layer, one
    connection (one request, batch or command at a time per execution environment; the proxy pools across
    them), and waits long enough for a paused cluster to resume."""
    return {
        "DATABASE_SECRET_ARN": secret_arn,
        "DATABASE_HOST": endpoint,
        **DATABASE_CA_ENVIRONMENT,
        "DATABASE_POOL_SIZE": "1",
        **config.database_wait_environment(),
    }


# Git-style patterns: drop every top-level entry, then re-admit the runtime folders. Excluding by
# allow-list means a new top-level folder (a venv, cdk.out, a benchmark dump) never leaks into the zip.
_CODE_EXCLUDES = ["/*", *(f"!/{folder}/" for folder in RUNTIME_FOLDERS), ".DS_Store"]
# From the repository itself, this machine's bytecode (another CPython's, timestamp-checked) stays out.
_SOURCE_EXCLUDES = [*_CODE_EXCLUDES, "__pycache__/", "*.py[cod]"]


def code_folder(staged: Path = FUNCTION_OUTPUT) -> Path:
    """``build/function`` when layers/build.py staged it from the sources as they are now, else the
    repository itself (sources without bytecode, e.g. for template tests that never ran the build).

    A staged copy whose sources changed since is never used: it would deploy yesterday's code.
    """
    stamp = read_function_stamp(staged)
    if stamp is not None and stamp.get("source") == source_fingerprint():
        return staged
    if stamp is not None:
        print(f"{staged} is older than the sources; packaging them without bytecode", file=sys.stderr)
    return REPO_ROOT


def function_code() -> lambda_.Code:
    """A fresh code asset per call: an asset binds to one stack, so each stack asks for its own.

    The content hash is the same everywhere, so CDK uploads the zip once.
    """
    folder = code_folder()
    excludes = _SOURCE_EXCLUDES if folder == REPO_ROOT else _CODE_EXCLUDES
    return lambda_.Code.from_asset(str(folder), exclude=excludes, ignore_mode=cdk.IgnoreMode.GIT)


def lambda_handler(entrypoint: str) -> str:
    """Handler path of ``functions/<entrypoint>/handler.py``."""
    if not (REPO_ROOT / "functions" / entrypoint).is_dir():
        # Missing handler files are a packaging bug worth catching at synth, not at first invocation.
        raise FileNotFoundError(f"functions/{entrypoint}/ does not exist")
    return f"functions.{entrypoint}.handler.lambda_handler"


class DependenciesLayer(Construct):
    """The locked runtime packages of uv.lock, built for the Lambda runtime by layers/build.py.

    Each stack makes its own layer version from the same folder: sharing one across stacks would pin its
    ARN in a cross-stack reference that CloudFormation refuses to change on the next dependency bump.
    """

    def __init__(self, scope: Construct, construct_id: str, *, layer_dir: Path) -> None:
        super().__init__(scope, construct_id)
        if not layer_dir.is_dir():
            raise FileNotFoundError(
                f"Lambda layer folder {layer_dir} is missing; build it with `python layers/build.py`"
            )
        if holds_test_ca_bundle(layer_dir):
            # Synth goes on (a template review needs no real CA), but whoever deploys this must hear it.
            print(
                f"WARNING: {layer_dir} holds a TEST database CA bundle, not Amazon's: a stage deployed with "
                "it fails every verify-full connection to its cluster. Rebuild it with layers/build.py.",
                file=sys.stderr,
            )
        self.layer = lambda_.LayerVersion(
            self,
            "Layer",
            code=lambda_.Code.from_asset(str(layer_dir)),
            compatible_runtimes=[LAMBDA_RUNTIME],
            compatible_architectures=[LAMBDA_ARCHITECTURE],
            description="Tollgate runtime dependencies (uv.lock, with CPython bytecode)",
        )
