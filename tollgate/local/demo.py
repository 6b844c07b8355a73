"""``tollgate local demo``: drives the local system over HTTP as tenants would, and checks every answer.

At this stage the system accepts work and carries it to the worker's inbox (execution is built in a later
piece): the demo submits sample invoices for two tenants, replays a request, provokes a conflict and a bad
request, follows the events through the relay and SQS to the worker, then reads every job back. It fails
(non-zero exit) when any answer is not the one the system promises.
"""

from __future__ import annotations

import secrets
from collections import Counter
from dataclasses import dataclass, field

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from tollgate.auth import create_tenant
from tollgate.clock import new_id
from tollgate.local.client import ApiClient
from tollgate.local.runtime import LocalStack
from tollgate.samples import generate_invoices, request_body
from tollgate.scheduling import PipelineProgress, read_pipeline_progress

PIPELINE_TIMEOUT_SECONDS = 60


@dataclass
class DemoReport:
    accepted: list[tuple[str, str, str]] = field(default_factory=list)
    checks: list[tuple[str, bool, str]] = field(default_factory=list)

    def check(self, name: str, ok: bool, detail: str) -> None:
        self.checks.append((name, ok, detail))

    @property
    def ok(self) -> bool:
        return all(ok for _, ok, _ in self.checks)


def _wait_for_pipeline(
    stack: LocalStack, before: PipelineProgress, expected: int, console: Console
) -> PipelineProgress:
    """Shows events travelling outbox -> SQS -> worker inbox; waits on the ingress loop's steps, bounded."""
    assert stack.system_db is not None
    db = stack.system_db
    ingress = stack.loops["ingress"]
    with Progress(console=console, transient=False) as bars:
        published = bars.add_task("published to SQS", total=expected)
        received = bars.add_task("taken in by the worker", total=expected)

        def update(_: object) -> bool:
            now = read_pipeline_progress(db)
            bars.update(published, completed=now.published - before.published)
            bars.update(received, completed=now.received - before.received)
            return now.received - before.received >= expected

        ingress.wait_for(update, timeout=PIPELINE_TIMEOUT_SECONDS)
    now = read_pipeline_progress(db)
    return PipelineProgress(
        events=now.events - before.events,
        published=now.published - before.published,
        received=now.received - before.received,
    )


def run_demo(stack: LocalStack, jobs_per_tenant: int = 6, console: Console | None = None) -> DemoReport:
    console = console or Console()
    report = DemoReport()
    assert stack.system_db is not None
    run = secrets.token_hex(3)
    before = read_pipeline_progress(stack.system_db)
    invoices = generate_invoices(jobs_per_tenant * 2, seed=11)
    clients: dict[str, ApiClient] = {}
    for name in (f"nordwind-{run}", f"lumiere-{run}"):
        tenant = create_tenant(stack.system_db, name, new_id)
        clients[name] = ApiClient(stack.api_url, tenant.api_key)
    console.print(f"[bold]Tenants[/bold] {', '.join(clients)} created; API at {stack.api_url}")

    for index, (name, client) in enumerate(clients.items()):
        for n, invoice in enumerate(invoices[index::2][:jobs_per_tenant]):
            response = client.submit(
                request_body(invoice, metadata={"number": invoice.invoice_number}), f"inv-{n}"
            )
            report.check(
                f"{name} submit {invoice.invoice_number}", response.status == 202, str(response.status)
            )
            if response.status == 202:
                report.accepted.append((name, response.json["job_id"], invoice.invoice_number))

    name, client = next(iter(clients.items()))
    first = invoices[0]
    replay = client.submit(request_body(first), "inv-0")
    report.check(
        "same key, same invoice: replayed",
        replay.status == 202 and replay.header("Idempotent-Replayed") == "true",
        f"{replay.status} Idempotent-Replayed={replay.header('Idempotent-Replayed')}",
    )
    conflict = client.submit(request_body(invoices[2]), "inv-0")
    report.check("same key, other invoice: 409", conflict.status == 409, str(conflict.status))
    bad = client.submit({"document": {"pages": []}}, "bad-1")
    report.check(
        "empty document: 422 problem", bad.status == 422, f"{bad.status} {bad.header('Content-Type')}"
    )
    stranger = ApiClient(stack.api_url, "tg_not-a-real-key")
    unauthorized = stranger.request("GET", "/extraction-jobs")
    report.check("unknown API key: 401", unauthorized.status == 401, str(unauthorized.status))

    progress = _wait_for_pipeline(stack, before, expected=len(report.accepted), console=console)
    report.check(
        "every accepted job's event published and taken in by the worker",
        progress.published == progress.received == len(report.accepted),
        f"{progress.published} published, {progress.received} in the worker's inbox",
    )

    states: Counter[str] = Counter()
    table = Table(title="Accepted jobs, read back over the API")
    for column in ("tenant", "job id", "invoice", "state", "document"):
        table.add_column(column)
    for tenant_name, job_id, number in report.accepted:
        job = clients[tenant_name].request("GET", f"/extraction-jobs/{job_id}")
        state = job.json.get("state", f"HTTP {job.status}")
        states[state] += 1
        report.check(f"read back {job_id}", job.status == 200 and state == "READY", state)
        pages = job.json.get("document", {}).get("page_count", "?")
        table.add_row(tenant_name, job_id, number, state, f"{pages} page(s)")
    console.print(table)

    checks = Table(title="What the API promised, and what it did")
    checks.add_column("check")
    checks.add_column("result")
    checks.add_column("detail")
    for check_name, ok, detail in report.checks:
        if not check_name.startswith(("read back", f"{name} submit", "lumiere")):
            checks.add_row(check_name, "[green]ok[/green]" if ok else "[red]FAILED[/red]", detail)
    console.print(checks)
    failed = [c for c in report.checks if not c[1]]
    console.print(
        f"{len(report.accepted)} jobs accepted ({dict(states)}); "
        f"{len(report.checks) - len(failed)}/{len(report.checks)} checks passed."
    )
    return report
