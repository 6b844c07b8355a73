"""The harness's own named queries (chaos, ledger, reporting), kept out of the set production loads.

They read the same tables as production, written in the same ``-- name:`` form, from ``tollgate_dev/sql/``.
"""

from __future__ import annotations

from pathlib import Path

from tollgate.db.queries import Queries, load_queries

DEV_QUERIES_DIR = Path(__file__).resolve().parent / "sql"


def dev_queries() -> Queries:
    return load_queries(DEV_QUERIES_DIR)
