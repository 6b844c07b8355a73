"""How Tollgate's Python code and its dependencies reach Lambda: one code asset, one layer.

The code asset is the repository with everything but the runtime packages excluded; the layer is the
folder ``layers/build.py`` fills with Linux ARM64 wheels, so neither needs Docker at synth time.
"""

from __future__ import annotations

from pathlib import Path

import aws_cdk as cdk
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from stacks.config import REPO_ROOT

LAMBDA_RUNTIME = lambda_.Runtime.PYTHON_3_13
LAMBDA_ARCHITECTURE = lambda_.Architecture.ARM_64

# The only top-level folders a Lambda imports from or reads at run time.
RUNTIME_FOLDERS = ("tollgate", "functions", "migrations")

# Git-style patterns: drop every top-level entry, then re-admit the runtime folders. Excluding by
# allow-list means a new top-level folder (a venv, cdk.out, a benchmark dump) never leaks into the zip.
_CODE_EXCLUDES = [
    "/*",
    *(f"!/{folder}/" for folder in RUNTIME_FOLDERS),
    "__pycache__/",
    "*.py[cod]",
    ".DS_Store",
]


def function_code() -> lambda_.Code:
    """A fresh code asset per call: an asset binds to one stack, so each stack asks for its own.

    The content hash is the same everywhere, so CDK uploads the zip once.
    """
    return lambda_.Code.from_asset(str(REPO_ROOT), exclude=_CODE_EXCLUDES, ignore_mode=cdk.IgnoreMode.GIT)


def lambda_handler(entrypoint: str) -> str:
    """Handler path of ``functions/<entrypoint>/handler.py``."""
    if not (REPO_ROOT / "functions" / entrypoint).is_dir():
        # Missing handler files are a packaging bug worth catching at synth, not at first invocation.
        raise FileNotFoundError(f"functions/{entrypoint}/ does not exist")
    return f"functions.{entrypoint}.handler.lambda_handler"


class DependenciesLayer(Construct):
    """The packages of ``[project].dependencies``, built for the Lambda runtime by layers/build.py.

    Each stack makes its own layer version from the same folder: sharing one across stacks would pin its
    ARN in a cross-stack reference that CloudFormation refuses to change on the next dependency bump.
    """

    def __init__(self, scope: Construct, construct_id: str, *, layer_dir: Path) -> None:
        super().__init__(scope, construct_id)
        if not layer_dir.is_dir():
            raise FileNotFoundError(
                f"Lambda layer folder {layer_dir} is missing; build it with `python layers/build.py`"
            )
        self.layer = lambda_.LayerVersion(
            self,
            "Layer",
            code=lambda_.Code.from_asset(str(layer_dir)),
            compatible_runtimes=[LAMBDA_RUNTIME],
            compatible_architectures=[LAMBDA_ARCHITECTURE],
            description="Tollgate runtime dependencies (pyproject [project].dependencies)",
        )
