"""``tollgate local demo``: drives the whole local system as tenants would and accounts for every job.

Three tenants submit sample invoices over HTTP (with replays, an idempotency conflict and bad requests),
the pipeline runs them (relay, SQS, workers, the simulated provider, validation), live bars show the jobs
by state, a WebSocket client connected before the first submit follows the first tenant's live feed (one
line per job state change, as the notifications API pushes them, written to a file; the bars count them),
and a summary shows where every job ended and why, attempts, tokens, cost and latency. It exits non-zero
when any admitted job ends somewhere its kind of invoice cannot explain, or any API answer is wrong.

The run keeps to itself: a database of its own (dropped at the end) on an embedded server in its own data
folder, its log lines and the live feed in files there, and only progress and the summary on the terminal.
With ``keep`` its data stays, in the database `tollgate local up --data-dir <that folder>` serves, and it
says how to look at it.
"""

from __future__ import annotations

import math
import random
import secrets
import statistics
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any
from uuid import UUID

from aws_lambda_powertools import Logger
from rich.console import Console, RenderableType
from rich.progress import BarColumn, MofNCompleteColumn, Progress, Task, TextColumn
from rich.table import Table
from rich.text import Text

from tollgate.core.clock import new_id
from tollgate.core.job_states import FINISHED_STATES, JobState
from tollgate.delivery.states import DeliveryState
from tollgate.jobtypes.registry import DEFAULT_JOB_TYPE
from tollgate.tenants.keys import create_tenant
from tollgate.tenants.suppliers import add_supplier
from tollgate_dev.live_feed import LiveFeed
from tollgate_dev.local.client import ApiClient
from tollgate_dev.local.logs import logs_into
from tollgate_dev.local.postgres import kept_database, scratch_database, without_password
from tollgate_dev.local.runtime import LocalStack
from tollgate_dev.receiver import WebhookReceiver
from tollgate_dev.reporting import delivery_states, job_states, jobs, summarize_work
from tollgate_dev.samples import (
    CONSISTENT_KINDS,
    KIND_WEIGHTS,
    KINDS,
    SUPPLIERS,
    SampleInvoice,
    generate_invoices,
    request_body,
)

logger = Logger(service="tollgate-local", child=True)

COMPLETION_TIMEOUT_SECONDS = 180
TENANTS = ("nordwind-buyers", "lumiere-achats", "thames-accounts")
# Its own folder, so the demo's embedded server, discovery file and logs never touch `tollgate local up`'s.
DEFAULT_DATA_DIR = Path(".tollgate/demo")
LOG_FILE = "demo.log"
# One line per state change the live feed pushed, started afresh each run: some 330 of them at the default
# size, which on the terminal would scroll the bars away.
LIVE_FEED_FILE = "live-feed.log"
# What each final state means, for a reader who has not met the state machine yet.
MEANINGS = {
    JobState.SUCCEEDED: "passed every validation rule",
    JobState.REVIEW_REQUIRED: "failed a rule; waits for a reviewer",
    JobState.REJECTED: "rejected by a reviewer",
    JobState.FAILED_TERMINAL: "ran out of attempts or time",
    JobState.CANCELLED: "cancelled by its tenant",
}


@dataclass
class Submitted:
    tenant: str
    job_id: str
    invoice: SampleInvoice  # the document (for a summary or a classification, the invoice it reads)
    job_type: str = DEFAULT_JOB_TYPE


# Besides the invoices, each tenant summarizes and classifies a few of them: the other job types.
OTHER_JOBS_PER_TENANT = 2
LABELS = ["contract", "delivery_note", "invoice", "receipt"]


def other_type_body(job_type: str, invoice: SampleInvoice) -> dict[str, Any]:
    body = request_body(invoice, metadata={"number": invoice.invoice_number})
    options: dict[str, Any] = {"max_words": 60} if job_type == "document_summary" else {"labels": LABELS}
    return {**body, "job_type": job_type, "options": options}


@dataclass
class DemoReport:
    submitted: list[Submitted] = field(default_factory=list)
    accept_latency_ms: list[float] = field(default_factory=list)
    checks: list[tuple[str, bool, str]] = field(default_factory=list)

    def check(self, name: str, ok: bool, detail: str) -> None:
        self.checks.append((name, ok, detail))

    @property
    def ok(self) -> bool:
        return all(ok for _, ok, _ in self.checks)


def _expected_states_of(submitted: Submitted) -> set[str]:
    # A summary or classification quotes printed lines only: it passes its policy whatever the invoice says.
    if submitted.job_type != DEFAULT_JOB_TYPE:
        return {JobState.SUCCEEDED.value}
    return _expected_states(submitted.invoice)


def _expected_states(invoice: SampleInvoice) -> set[str]:
    """Where a job may end for its kind of invoice: consistent ones pass validation, others need review."""
    return {JobState.SUCCEEDED} if invoice.kind in CONSISTENT_KINDS else {JobState.REVIEW_REQUIRED}


def demo_invoices(count: int, seed: int) -> list[SampleInvoice]:
    """Sample invoices whose kinds keep their usual proportions in every block of twenty (shuffled within
    it), so that each run of twenty jobs or more shows every kind, misprinted totals included."""
    unit = math.gcd(*KIND_WEIGHTS)
    block = [kind for kind, weight in zip(KINDS, KIND_WEIGHTS, strict=True) for _ in range(weight // unit)]
    random.Random(seed).shuffle(block)  # noqa: S311 - sample data, not security
    return generate_invoices(count, seed=seed, kinds=block)


def _submit_all(
    stack: LocalStack, clients: dict[str, ApiClient], per_tenant: int, report: DemoReport
) -> None:
    invoices = demo_invoices(per_tenant * len(clients), seed=secrets.randbelow(10_000))
    work = [
        (name, invoice, f"inv-{invoice.invoice_number}-{i}")
        for i, (name, invoice) in enumerate(zip(list(clients) * per_tenant, invoices, strict=True))
    ]

    def submit(item: tuple[str, SampleInvoice, str]) -> None:
        name, invoice, key = item
        started = time.perf_counter()
        response = clients[name].submit(
            request_body(invoice, metadata={"number": invoice.invoice_number}), key
        )
        report.accept_latency_ms.append((time.perf_counter() - started) * 1000)
        if response.status == 202:
            report.submitted.append(Submitted(name, response.json["job_id"], invoice))
        else:
            report.check(f"submit {invoice.invoice_number}", False, f"HTTP {response.status}")

    others = [
        (name, job_type, invoice)
        for number, name in enumerate(clients)
        for job_type in ("document_summary", "document_classification")
        for invoice in invoices[number * OTHER_JOBS_PER_TENANT : (number + 1) * OTHER_JOBS_PER_TENANT]
    ]

    def submit_other(item: tuple[str, str, SampleInvoice]) -> None:
        name, job_type, invoice = item
        response = clients[name].submit(
            other_type_body(job_type, invoice), f"{job_type}-{invoice.invoice_number}"
        )
        if response.status == 202:
            report.submitted.append(Submitted(name, response.json["job_id"], invoice, job_type))
        else:
            report.check(f"submit {job_type} {invoice.invoice_number}", False, f"HTTP {response.status}")

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(submit, work))
        list(pool.map(submit_other, others))

    name, invoice, key = work[0]
    replay = clients[name].submit(request_body(invoice, metadata={"number": invoice.invoice_number}), key)
    report.check(
        "same key and invoice: same job, replayed",
        replay.status in {200, 202} and replay.header("Idempotent-Replayed") == "true",
        f"{replay.status} Idempotent-Replayed={replay.header('Idempotent-Replayed')}",
    )
    conflict = clients[name].submit(request_body(work[1][1]), key)
    report.check("same key, another invoice: 409", conflict.status == 409, str(conflict.status))
    bad = clients[name].submit({"document": {"pages": []}}, "bad-1")
    report.check(
        "empty document: 422 problem", bad.status == 422, f"{bad.status} {bad.header('Content-Type')}"
    )
    unauthorized = ApiClient(stack.api_url, "tg_not-a-real-key").request("GET", "/extraction-jobs")
    report.check("unknown API key: 401", unauthorized.status == 401, str(unauthorized.status))


class LiveFeedView:
    """One tenant's live notifications: a compact line each, as they arrive, in a file (the terminal only
    counts them), and each job's last state as the feed told it, to compare with where the job ended."""

    def __init__(self, url: str, api_key: str, tenant: str, path: Path) -> None:
        self.feed = LiveFeed(url, api_key, reconnect_wait=0.2)
        self.tenant = tenant
        self.path = path
        self.last_state: dict[str, str] = {}
        self.messages = 0
        self.failure: str | None = None
        self.changed = threading.Condition()
        self._lines: IO[str] | None = None
        self._thread = threading.Thread(target=self._run, name="demo-live-feed", daemon=True)

    def start(self) -> bool:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lines = self.path.open("w", encoding="utf-8", buffering=1)
        self._thread.start()
        return self.feed.subscribed.wait(COMPLETION_TIMEOUT_SECONDS)

    def _run(self) -> None:
        assert self._lines is not None
        try:
            for message in self.feed:
                with self.changed:
                    self.messages += 1
                    if message["type"] == "job.state_changed":
                        self.last_state[message["job_id"]] = message["state"]
                    self.changed.notify_all()
                if message["type"] == "job.state_changed":
                    self._lines.write(
                        f"{self.tenant} #{message['sequence']:<5} {message['job_id']} "
                        f"{message['state']:<16} v{message['state_version']}\n"
                    )
                else:
                    self._lines.write(f"{self.tenant} resync to {message['latest']}\n")
        except Exception as error:  # the demo reports it as a failed check
            with self.changed:
                self.failure = f"{type(error).__name__}: {error}"
                self.changed.notify_all()

    def summary(self) -> str:
        """The feed in one line, for under the bars."""
        # "so far": the bars stop once every job is final, a moment before the feed has told the last of it.
        return f"{'live feed':>16} {self.messages} messages so far ({self.tenant})"

    def saw_every_end(self, ends: dict[str, str], timeout: float) -> bool:
        """Waits until the feed's last state of every job is where the job ended."""
        with self.changed:
            return (
                self.changed.wait_for(
                    lambda: (
                        self.failure is not None
                        or all(self.last_state.get(job) == state for job, state in ends.items())
                    ),
                    timeout,
                )
                and self.failure is None
            )

    def stop(self) -> None:
        self.feed.close()
        self._thread.join(COMPLETION_TIMEOUT_SECONDS)
        if self._lines is not None and not self._thread.is_alive():
            self._lines.close()


class BarsWithFooter(Progress):
    """The bars, and a line under them that is read again at each refresh (the live feed's count)."""

    def __init__(self, *columns: Any, footer: Callable[[], str], console: Console) -> None:
        self._footer = footer  # first: the parent's start may already render
        super().__init__(*columns, console=console)

    def get_renderables(self) -> Iterable[RenderableType]:
        tasks: list[Task] = list(self.tasks)
        yield self.make_tasks_table(tasks)
        yield Text(self._footer(), style="dim")


def _follow(
    stack: LocalStack, tenant_ids: list[UUID], total: int, console: Console, live: LiveFeedView
) -> bool:
    """Live bars per state until every admitted job is terminal (or the time limit passes), and the live
    feed's count under them."""
    assert stack.system_db is not None
    db = stack.system_db
    columns = (TextColumn("{task.description:>16}"), BarColumn(), MofNCompleteColumn())
    with BarsWithFooter(*columns, footer=live.summary, console=console) as bars:
        tasks = {state: bars.add_task(state.value, total=total) for state in JobState}

        def all_terminal() -> bool:
            counts = job_states(db, tenant_ids)
            for state, task in tasks.items():
                bars.update(task, completed=counts.get(state.value, 0))
            return sum(counts.get(s.value, 0) for s in FINISHED_STATES) >= total

        return stack.wait_for(all_terminal, timeout=COMPLETION_TIMEOUT_SECONDS)


def run_local_demo(
    jobs_per_tenant: int,
    data_dir: Path = DEFAULT_DATA_DIR,
    console: Console | None = None,
    *,
    keep: bool = False,
) -> DemoReport:
    """`tollgate local demo`: the system on a database of its own, logs in a file, progress on screen. With
    ``keep``, the database stays for `tollgate local up --data-dir <data_dir>` (DATABASE_URL's server: a
    database of the run's own), and the end says how to look at it."""
    console = console or Console()
    log_path = data_dir / LOG_FILE
    console.print(
        f"[bold]Tollgate demo[/bold]: {len(TENANTS)} tenants send {jobs_per_tenant * len(TENANTS)} sample "
        "invoices through the local system."
    )
    console.print(
        f"Each tenant also has {OTHER_JOBS_PER_TENANT} summarized and {OTHER_JOBS_PER_TENANT} classified.",
        highlight=False,
    )
    database_for_run = kept_database if keep else scratch_database
    with logs_into(log_path), database_for_run(data_dir, "tollgate_demo") as database:
        embedded = database.server.startswith("in ")
        if not keep:
            data = f"a database of its own {database.server}, dropped at the end"
        elif embedded:
            data = f"the database of the server {database.server}, kept (--keep)"
        else:
            data = f"{database.name} {database.server}, kept (--keep)"
        console.print(f"Data: {data}.", highlight=False)
        console.print(f"Logs: {log_path} (the terminal shows progress only).", highlight=False)
        logger.info("demo database created", extra={"database": database.name, "kept": keep})
        with LocalStack(port=0, data_dir=data_dir, database_url=database.url) as stack:
            report = run_demo(stack, jobs_per_tenant, console)
    live_feed = data_dir / LIVE_FEED_FILE
    if not keep:
        console.print(f"Done. The demo's database is dropped; logs stay in {log_path}", highlight=False)
        console.print(f"The live feed is in {live_feed}.", highlight=False)
        console.print(
            "To keep the data and explore it: make demo KEEP=1 (tollgate local demo --keep).", highlight=False
        )
        return report
    _say_how_to_explore(console, data_dir, None if embedded else database.url)
    console.print(
        f"It stays until you delete {data_dir} (later kept runs add to it)."
        if embedded
        else f"It stays until you drop the database {database.name}.",
        highlight=False,
    )
    console.print(f"Logs stay in {log_path}.", highlight=False)
    console.print(f"The live feed is in {live_feed}.", highlight=False)
    return report


def _tollgate() -> str:
    """How to run this command again from here: `.venv/bin/tollgate` when run as `make demo` runs it."""
    program = Path(sys.argv[0])
    if program.name != "tollgate":
        return "tollgate"
    try:
        return str(program.absolute().relative_to(Path.cwd()))
    except ValueError:
        return str(program)


def _say_how_to_explore(console: Console, data_dir: Path, database_url: str | None) -> None:
    """The commands that serve what the demo kept and show the review queue it filled. ``database_url``:
    the kept database on DATABASE_URL's server, None for the embedded server's in ``data_dir``."""
    tollgate = _tollgate()
    if database_url is None:
        # The support commands find the embedded server through the discovery file `local up` writes.
        first = ("serve it in one terminal:", f"{tollgate} local up --data-dir {data_dir}")
        then = "and in a second one see the review queue it filled, and every job:"
        where = f" --data-dir {data_dir}"
    else:
        first = ("point DATABASE_URL at it:", f"export DATABASE_URL='{without_password(database_url)}'")
        then = "and see the review queue it filled, and every job:"
        where = ""
    console.print(f"[bold]Done. The demo's data is kept.[/bold] To explore it, {first[0]}")
    console.print(f"  {first[1]}", highlight=False, soft_wrap=True, markup=False)
    console.print(then, highlight=False, markup=False)
    for command in ("reviews list", "jobs list"):
        console.print(f"  {tollgate} {command}{where}", highlight=False, soft_wrap=True, markup=False)


def run_demo(stack: LocalStack, jobs_per_tenant: int = 40, console: Console | None = None) -> DemoReport:
    console = console or Console()
    report = DemoReport()
    assert stack.system_db is not None
    db = stack.system_db
    run = secrets.token_hex(3)
    clients: dict[str, ApiClient] = {}
    tenant_ids: list[UUID] = []
    for base in TENANTS:
        currencies = sorted({supplier.currency for supplier in SUPPLIERS})
        tenant = create_tenant(db, f"{base}-{run}", new_id, allowed_currencies=currencies)
        for supplier in SUPPLIERS:
            add_supplier(db, tenant.tenant_id, supplier.name, supplier.iban, new_id)
        clients[tenant.name] = ApiClient(stack.api_url, tenant.api_key)
        tenant_ids.append(tenant.tenant_id)
    receivers = [_register_receiver(client) for client in clients.values()]
    provider = "the simulated provider" if stack.simulator else "the configured OpenAI endpoint"
    console.print(f"[bold]{len(clients)} tenants[/bold] created; API at {stack.api_url}; LLM: {provider}")
    watched, watched_client = next(iter(clients.items()))
    assert watched_client.api_key is not None
    live_path = stack.data_dir / LIVE_FEED_FILE
    live = LiveFeedView(stack.websocket_url, watched_client.api_key, watched, live_path)
    subscribed = live.start()
    report.check("live feed subscribed before the first submit", subscribed, stack.websocket_url)
    # One line per state change goes to the file: some 330 of them at the default size would scroll the
    # bars away. The bars count them.
    console.print(f"Live feed of [bold]{watched}[/bold] in {live_path}", highlight=False, soft_wrap=True)

    _submit_all(stack, clients, jobs_per_tenant, report)
    console.print(f"{len(report.submitted)} jobs accepted; following them through the pipeline…")
    finished = _follow(stack, tenant_ids, len(report.submitted), console, live)
    report.check(
        "every admitted job reached a final state", finished, f"within {COMPLETION_TIMEOUT_SECONDS} s"
    )
    ends = {
        str(row["job_id"]): row["state"]
        for row in jobs(db, [tenant_ids[0]])
        if str(row["job_id"]) in {s.job_id for s in report.submitted if s.tenant == watched}
    }
    saw = subscribed and live.saw_every_end(ends, COMPLETION_TIMEOUT_SECONDS)
    report.check(
        "the live feed saw every job of its tenant reach its final state",
        saw,
        f"{len(ends)} jobs, {live.messages} messages" + (f", {live.failure}" if live.failure else ""),
    )
    live.stop()

    by_id = {s.job_id: s for s in report.submitted}
    unexplained = [
        (by_id[str(row["job_id"])], row)
        for row in jobs(db, tenant_ids)
        if row["state"] not in _expected_states_of(by_id[str(row["job_id"])])
    ]
    detail = (
        ", ".join(
            f"{s.job_type} {s.invoice.kind} -> {row['state']} "
            f"{[r['code'] for r in row['review_reasons'] or []]}"
            for s, row in unexplained[:5]
        )
        or "none"
    )
    report.check("every job ended where its invoice explains it", not unexplained, f"unexplained: {detail}")
    # The ERPs' endpoints take the default subscription: a result waiting for review is not sent to them.
    acted_on = sum(1 for row in jobs(db, tenant_ids) if row["state"] != JobState.REVIEW_REQUIRED)
    delivered = stack.wait_for(
        lambda: delivery_states(db, tenant_ids).get(DeliveryState.DELIVERED, 0) >= acted_on,
        timeout=COMPLETION_TIMEOUT_SECONDS,
    )
    verified = sum(len(r.accepted) for r in receivers)
    rejected = sum(len(r.rejections) for r in receivers)
    webhooks_ok = delivered and verified == acted_on and rejected == 0
    report.check(
        "one signed webhook per ERP outcome",
        webhooks_ok,
        f"{verified} verified, {rejected} rejected"
        + ("" if webhooks_ok else f", deliveries {delivery_states(db, tenant_ids)}"),
    )
    for receiver in receivers:
        receiver.stop()
    _print_summary(console, db, tenant_ids, report)
    _print_usage(console, clients, report)
    _print_checks(console, report)
    return report


def _print_usage(console: Console, clients: dict[str, ApiClient], report: DemoReport) -> None:
    """Each tenant's usage by job type, as the tenant reads it: GET /usage?group_by=job_type."""
    console.print("[bold]Usage per tenant and job type[/bold] (GET /usage?group_by=job_type)")
    types_seen = 0
    for name, client in clients.items():
        answer = client.request("GET", "/usage?group_by=job_type")
        if answer.status != 200:
            report.check(f"usage of {name}", False, f"HTTP {answer.status}")
            continue
        console.print(f"  {name}", highlight=False)
        console.print(
            f"    {'job type':<24}{'jobs':>5}{'done':>5}{'attempts':>9}{'tokens':>9}{'cost USD':>10}"
            f"{'per done':>10}",
            highlight=False,
        )
        for row in answer.json["rows"]:
            types_seen += 1
            per_job = row["cost_per_completed_job"]
            tokens = row["input_tokens"] + row["output_tokens"]
            console.print(
                f"    {row['job_type']:<24}{row['finished_jobs']:>5}{row['completed_jobs']:>5}"
                f"{row['attempts']:>9}{tokens:>9}{float(row['cost_usd']):>10.4f}"
                + (f"{float(per_job):>10.5f}" if per_job is not None else f"{'-':>10}"),
                highlight=False,
            )
    report.check(
        "usage reported per tenant for every job type",
        types_seen == len(clients) * 3,
        f"{types_seen} tenant and type rows",
    )


def _register_receiver(client: ApiClient) -> WebhookReceiver:
    """A tenant's ERP stand-in: registers an endpoint, then listens with the secret it was shown once."""
    created = client.request(
        "POST", "/webhook-endpoints", json_body={"url": "http://127.0.0.1:9/pending"}
    ).json
    receiver = WebhookReceiver(created["secret"]).start()
    client.request(
        "PATCH", f"/webhook-endpoints/{created['endpoint_id']}", json_body={"url": f"{receiver.url}/erp"}
    )
    return receiver


def _review_reasons(rows: list[dict[str, Any]]) -> Counter[str]:
    """How often each validation rule sent a job to review (a job can break several)."""
    return Counter(
        reason["code"]
        for row in rows
        if row["state"] == JobState.REVIEW_REQUIRED
        for reason in row["review_reasons"] or []
    )


def _print_summary(console: Console, db: object, tenant_ids: list[UUID], report: DemoReport) -> None:
    summary = summarize_work(db, tenant_ids)  # type: ignore[arg-type]
    reasons = _review_reasons(jobs(db, tenant_ids))  # type: ignore[arg-type]
    # Plain lines, not tables: what a reader compares with the README reads the same at any width.
    console.print("[bold]Where the jobs ended[/bold]")
    for state in JobState:  # in the state machine's order, SUCCEEDED first
        if not (count := summary.states.get(state.value, 0)):
            continue
        meaning = MEANINGS.get(state, "")
        if state == JobState.REVIEW_REQUIRED and reasons:
            meaning += " (" + ", ".join(f"{code} {n}" for code, n in reasons.most_common()) + ")"
        console.print(f"  {state.value:<16}{count:>5}  {meaning}", highlight=False)
    if reasons:
        console.print("  Waiting for a reviewer: tollgate reviews list, or GET /reviews", highlight=False)

    models = Table(title="Attempts, tokens and cost per model")
    for column in ("model", "attempts", "failed", "input tokens", "output tokens", "cost (USD)"):
        models.add_column(column, justify="left" if column == "model" else "right")
    for usage in summary.models:
        models.add_row(
            usage.model,
            str(usage.attempts),
            str(usage.failed_attempts),
            f"{usage.input_tokens:,}",
            f"{usage.output_tokens:,}",
            f"{usage.cost_usd:.4f}",
        )
    console.print(models)

    latencies = sorted(report.accept_latency_ms)
    p50 = statistics.median(latencies) if latencies else 0.0
    p95 = latencies[int(len(latencies) * 0.95) - 1] if latencies else 0.0
    console.print(f"acceptance latency  p50 {p50:.0f} ms, p95 {p95:.0f} ms", highlight=False)
    console.print(
        f"completion latency  p50 {summary.completion_p50_seconds or 0:.1f} s, "
        f"p95 {summary.completion_p95_seconds or 0:.1f} s (accepted to final state)",
        highlight=False,
    )


def _print_checks(console: Console, report: DemoReport) -> None:
    console.print("[bold]What the system promised, and what it did[/bold]")
    for name, ok, detail in report.checks:
        mark = "[green]ok[/green]    " if ok else "[red]FAILED[/red]"
        console.print(f"  {mark} {name} ({detail})", highlight=False)
    failed = sum(1 for _, ok, _ in report.checks if not ok)
    console.print(f"{len(report.checks) - failed}/{len(report.checks)} checks passed.")
