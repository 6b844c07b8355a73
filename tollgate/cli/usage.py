"""How ``tollgate usage`` shows a usage report: a table per tenant and dimension, or the report as JSON."""

from __future__ import annotations

from typing import Any

from tollgate.cli.support import _json, _table
from tollgate.usage.service import UsageReport, UsageRow


def show_usage(report: UsageReport, *, as_json: bool) -> None:
    if as_json:
        _json(report.model_dump(mode="json", by_alias=True))
        return
    dimensions = ["tenant", *(d.value for d in report.group_by)]
    columns = [
        *dimensions,
        "attempts",
        "input",
        "output",
        "cost USD",
        "batch",
        "batch saved USD",
        "finished",
        "completed",
        "USD/completed",
    ]
    rows = [_cells(row, dimensions) for row in report.rows]
    rows.append(_cells(report.total.model_copy(update={"tenant": "total"}), dimensions))
    _table(f"usage {report.from_day} to {report.to_day}", columns, rows)


def _cells(row: UsageRow, dimensions: list[str]) -> list[Any]:
    def shown(value: Any) -> Any:
        return "-" if value is None else value

    return [
        *(shown(getattr(row, name)) for name in dimensions),
        row.attempts,
        row.input_tokens,
        row.output_tokens,
        row.cost_usd,
        row.batch_attempts,
        row.batch_discount_usd,
        shown(row.finished_jobs),
        shown(row.completed_jobs),
        shown(row.cost_per_completed_job),
    ]
