"""Loads the named queries kept in ``tollgate/db/queries/*.sql``.

Each file holds blocks that start with ``-- name: some_query``; the text up to the next such line is the
query, written with psycopg named parameters (``%(tenant_id)s``). SQL lives nowhere else.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import LiteralString

QUERIES_DIR = Path(__file__).parent / "queries"
_NAME_LINE = re.compile(r"^--\s*name:\s*([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)


class Queries:
    """Read-only mapping of query name to SQL text; unknown names fail loudly."""

    def __init__(self, queries: dict[str, str]) -> None:
        self._queries = queries

    def __getattr__(self, name: str) -> LiteralString:
        try:
            # The text comes from files shipped with the package, never from input: it is literal SQL.
            return self._queries[name]
        except KeyError:
            raise AttributeError(f"no query named {name!r} in {QUERIES_DIR}") from None

    def names(self) -> list[str]:
        return sorted(self._queries)


def parse_queries(text: str, source: str) -> dict[str, str]:
    parts = _NAME_LINE.split(text)
    queries: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        sql = body.strip()
        if not sql:
            raise ValueError(f"{source}: query {name!r} is empty")
        if name in queries:
            raise ValueError(f"{source}: query {name!r} is defined twice")
        queries[name] = sql
    return queries


@cache
def load_queries(directory: Path = QUERIES_DIR) -> Queries:
    merged: dict[str, str] = {}
    for path in sorted(directory.glob("*.sql")):
        for name, sql in parse_queries(path.read_text(encoding="utf-8"), path.name).items():
            if name in merged:
                raise ValueError(f"{path.name}: query {name!r} is also defined in another file")
            merged[name] = sql
    return Queries(merged)
