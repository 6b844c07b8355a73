"""Helpers shared by the test suites: request bodies and database probes."""

from __future__ import annotations

from typing import Any

import psycopg


def invoice_request(
    text: str = "ACME GmbH\nInvoice 2026-001\nTotal EUR 119.00", **extra: Any
) -> dict[str, Any]:
    return {"document": {"pages": [{"text": text}]}, **extra}


def count_rows(owner_url: str) -> dict[str, int]:
    """Row counts of every table a request could write, read as the owner (no row-level security)."""
    tables = ("extraction_jobs", "outbox_events", "documents", "job_attempts", "extraction_results")
    with psycopg.connect(owner_url) as conn:
        return {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in tables}  # type: ignore[index]
