"""Options every ``tollgate`` command group shares, declared once: how a list or a show prints (``--output``)
and where the local system's data is (``--data-dir``).

Kept free of heavy imports: typer reads these annotations to build ``tollgate --help``.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer


class Output(StrEnum):
    TABLE = "table"
    JSON = "json"


OutputOption = Annotated[
    Output,
    typer.Option(
        "--output",
        "-o",
        case_sensitive=False,
        help="table for people, json for scripts (plain JSON on stdout).",
    ),
]

DataDir = Annotated[
    Path,
    typer.Option(
        help="The local system's folder: where `tollgate local up` keeps its embedded PostgreSQL and its "
        "local.json, and where every other command looks for them when the environment names no database."
    ),
]
DEFAULT_DATA_DIR = Path(".tollgate")
