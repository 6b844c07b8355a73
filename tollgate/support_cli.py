"""``tollgate jobs``, ``tollgate dlq`` and ``tollgate deliveries``: support commands with rich tables.

They run against AWS with the default credential chain and the environment (SupportSettings), or against
``tollgate local up`` on this machine, found through the file it writes in its data folder.
"""

from __future__ import annotations

import getpass
import json
import os
from pathlib import Path
from typing import Annotated, Any
from uuid import UUID

import typer
from rich.console import Console
from rich.table import Table

from tollgate.errors import TollgateError

console = Console()
jobs_app = typer.Typer(help="Inspect jobs; retry ones that failed.", no_args_is_help=True)
dlq_app = typer.Typer(help="Inspect and redrive the jobs queue's dead letters.", no_args_is_help=True)
deliveries_app = typer.Typer(help="Inspect and replay webhook deliveries.", no_args_is_help=True)

DataDir = Annotated[Path, typer.Option(help="The local system's data folder (when not against AWS).")]
Reason = Annotated[str, typer.Option(help="Why: written to the audit trail.", min=3)]
DEFAULT_DATA_DIR = Path(".tollgate")


def _environment(data_dir: Path) -> None:
    """Without AWS settings in the environment, point at a running ``tollgate local up``."""
    if os.environ.get("JOBS_QUEUE_URL"):
        return
    discovery = data_dir.resolve() / "local.json"
    if not discovery.exists():
        console.print(
            "[red]Set JOBS_QUEUE_URL, JOBS_DLQ_URL and the database settings, or start "
            "`tollgate local up` first.[/red]"
        )
        raise typer.Exit(2)
    facts = json.loads(discovery.read_text(encoding="utf-8"))
    from tollgate.local.aws import FAKE_AWS_ENV

    os.environ.update(FAKE_AWS_ENV)
    os.environ["AWS_ENDPOINT_URL"] = facts["aws_endpoint_url"]
    os.environ["JOBS_QUEUE_URL"] = facts["jobs_queue_url"]
    os.environ["JOBS_DLQ_URL"] = facts["jobs_dlq_url"]
    if facts.get("webhook_state_machine_arn"):
        os.environ["WEBHOOK_STATE_MACHINE_ARN"] = facts["webhook_state_machine_arn"]
    os.environ.setdefault("DATABASE_URL", facts["database_url"])


def _support(data_dir: Path, actor: str | None = None) -> Any:
    _environment(data_dir)
    from tollgate.settings import SupportSettings
    from tollgate.wiring import build_support

    return build_support(SupportSettings(), actor or os.environ.get("TOLLGATE_ACTOR") or getpass.getuser())


def _fail(error: TollgateError) -> None:
    console.print(f"[red]{error.detail}[/red]")
    raise typer.Exit(2) from None


def _table(title: str, columns: list[str], rows: list[list[Any]]) -> None:
    table = Table(title=title)
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*("" if value is None else str(value) for value in row))
    console.print(table)


@jobs_app.command("list")
def jobs_list(
    state: Annotated[str | None, typer.Option(help="Only jobs in this state.")] = None,
    tenant: Annotated[str | None, typer.Option(help="Only this tenant's jobs (by name).")] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000)] = 50,
    data_dir: DataDir = DEFAULT_DATA_DIR,
) -> None:
    """Recent jobs, newest first."""
    deps = _support(data_dir)
    with deps.db.transaction() as conn:
        rows = conn.execute(
            deps.db.q.support_list_jobs, {"state": state, "tenant": tenant, "limit": limit}
        ).fetchall()
    _table(
        "Jobs",
        ["job id", "tenant", "state", "attempts", "reason", "created"],
        [
            [
                r["job_id"],
                r["tenant"],
                r["state"],
                f"{r['attempt']}/{r['max_attempts']}",
                r["reason"],
                r["created_at"],
            ]
            for r in rows
        ],
    )


@jobs_app.command("show")
def jobs_show(job_id: UUID, data_dir: DataDir = DEFAULT_DATA_DIR) -> None:
    """A job, every attempt it made, and what support did to it."""
    deps = _support(data_dir)
    with deps.db.transaction() as conn:
        job = conn.execute(deps.db.q.support_get_job, {"job_id": job_id}).fetchone()
        attempts = conn.execute(deps.db.q.support_job_attempts, {"job_id": job_id}).fetchall()
        trail = conn.execute(deps.db.q.audit_for_target, {"target": str(job_id)}).fetchall()
    if job is None:
        console.print(f"[red]no job {job_id}[/red]")
        raise typer.Exit(2)
    console.print(
        f"job {job_id}: [bold]{job['state']}[/bold], attempt {job['attempt']}/{job['max_attempts']}, "
        f"deadline {job['deadline_at']}, last error {job['last_error']}",
        highlight=False,
    )
    _table(
        "Attempts",
        ["#", "worker", "outcome", "model", "tokens in/out", "cost", "latency ms", "provider request"],
        [
            [
                a["attempt"],
                a["worker_id"],
                a["outcome"],
                a["model"],
                f"{a['input_tokens']}/{a['output_tokens']}",
                a["cost_usd"],
                a["latency_ms"],
                a["provider_request_id"],
            ]
            for a in attempts
        ],
    )
    if trail:
        _table(
            "Audit",
            ["when", "who", "action", "outcome", "why"],
            [[t["created_at"], t["actor"], t["action"], t["outcome"], t["reason"]] for t in trail],
        )


@jobs_app.command("retry")
def jobs_retry(job_id: UUID, reason: Reason, data_dir: DataDir = DEFAULT_DATA_DIR) -> None:
    """Give a FAILED_TERMINAL job a new attempt budget and signal the workers (audited)."""
    from tollgate.support import retry_job

    try:
        audit_id = retry_job(_support(data_dir), job_id, reason)
    except TollgateError as error:
        _fail(error)
    console.print(f"job {job_id} is READY again (audit #{audit_id})")


@dlq_app.command("list")
def dlq_list(
    limit: Annotated[int, typer.Option(min=1, max=500)] = 50, data_dir: DataDir = DEFAULT_DATA_DIR
) -> None:
    """Dead letters with their jobs' current state and what a redrive would do."""
    from tollgate.support import decide, receive_dead_letters, release

    deps = _support(data_dir)
    letters = receive_dead_letters(deps, limit)
    try:
        items = [decide(deps, letter, include_failed=False) for letter in letters]
    finally:
        release(deps, letters)
    _table(
        f"{len(items)} dead letter(s)",
        ["message id", "job id", "receives", "job state", "a redrive would", "because"],
        [
            [
                i.letter.message_id,
                i.letter.job_id,
                i.letter.receive_count,
                i.job_state,
                i.decision.value,
                i.why,
            ]
            for i in items
        ],
    )


@dlq_app.command("show")
def dlq_show(message_id: str, data_dir: DataDir = DEFAULT_DATA_DIR) -> None:
    """One dead letter's body and its job's reconciliation."""
    from tollgate.support import decide, receive_dead_letters, release

    deps = _support(data_dir)
    letters = receive_dead_letters(deps, 500)
    try:
        found = [letter for letter in letters if letter.message_id == message_id]
        if not found:
            console.print(f"[red]no dead letter {message_id}[/red]")
            raise typer.Exit(2)
        item = decide(deps, found[0], include_failed=False)
    finally:
        release(deps, letters)
    console.print_json(found[0].body if found[0].event else json.dumps({"unparseable_body": found[0].body}))
    console.print(
        f"job {item.letter.job_id}: {item.job_state}; a redrive would {item.decision.value}: {item.why}"
    )


@dlq_app.command("redrive")
def dlq_redrive(
    reason: Reason,
    dry_run: Annotated[bool, typer.Option(help="Show what would happen; change nothing.")] = False,
    max_per_second: Annotated[float, typer.Option(min=0.1, max=100)] = 5.0,
    include_failed: Annotated[
        bool, typer.Option(help="Also give jobs that failed for other reasons (refused, …) a new budget.")
    ] = False,
    limit: Annotated[int, typer.Option(min=1, max=10_000)] = 100,
    data_dir: DataDir = DEFAULT_DATA_DIR,
) -> None:
    """Reconcile each dead letter with its job, then redrive, reset and redrive, discard, or leave it."""
    from tollgate.support import redrive_dead_letters

    try:
        report = redrive_dead_letters(
            _support(data_dir),
            reason=reason,
            dry_run=dry_run,
            max_per_second=max_per_second,
            include_failed=include_failed,
            limit=limit,
        )
    except TollgateError as error:
        _fail(error)
    title = "Dry run: nothing changed" if dry_run else "Redrive"
    _table(
        title,
        ["message id", "job id", "job state", "decision", "done", "audit", "because"],
        [
            [
                i.letter.message_id,
                i.letter.job_id,
                i.job_state,
                i.decision.value,
                "yes" if i.done else "no",
                i.audit_id,
                i.why,
            ]
            for i in report.items
        ],
    )


@dlq_app.command("move-all")
def dlq_move_all(
    reason: Reason,
    max_per_second: Annotated[int, typer.Option(min=1, max=500)] = 10,
    data_dir: DataDir = DEFAULT_DATA_DIR,
) -> None:
    """Move every dead letter back with SQS's own move task: no reconciliation; for upstream outages."""
    from tollgate.support import start_bulk_move

    deps = _support(data_dir)
    arns = [
        deps.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        for url in (deps.dlq_url, deps.queue_url)
    ]
    handle = start_bulk_move(deps.sqs, arns[0], arns[1], max_per_second)
    with deps.db.transaction() as conn:
        conn.execute(
            deps.db.q.insert_audit,
            {
                "actor": deps.actor,
                "reason": reason,
                "action": "dlq_move_all",
                "target": arns[0],
                "outcome": "started",
                "details": json.dumps({"task_handle": handle}),
            },
        )
    console.print(f"move task started: {handle}")


@deliveries_app.command("list")
def deliveries_list(
    tenant: Annotated[str, typer.Option(help="The tenant's name.")],
    endpoint: Annotated[UUID, typer.Option(help="The endpoint id.")],
    limit: Annotated[int, typer.Option(min=1, max=100)] = 20,
    data_dir: DataDir = DEFAULT_DATA_DIR,
) -> None:
    """An endpoint's deliveries with their attempts, newest first."""
    from tollgate.suppliers import find_tenant
    from tollgate.webhooks.deliveries import list_deliveries

    deps = _support(data_dir)
    try:
        found = list_deliveries(deps.db, find_tenant(deps.db, tenant), endpoint, limit)
    except TollgateError as error:
        _fail(error)
    _table(
        "Deliveries",
        [
            "delivery id (webhook-id)",
            "event",
            "state",
            "attempts",
            "last status",
            "last error",
            "next attempt",
        ],
        [
            [d.delivery_id, d.event_type, d.state, d.attempts, d.last_status, d.last_error, d.next_attempt_at]
            for d in found.items
        ],
    )


@deliveries_app.command("replay")
def deliveries_replay(
    tenant: Annotated[str, typer.Option(help="The tenant's name.")],
    endpoint: Annotated[UUID, typer.Option(help="The endpoint id.")],
    delivery: Annotated[UUID, typer.Option(help="The delivery id (its webhook-id).")],
    reason: Reason,
    data_dir: DataDir = DEFAULT_DATA_DIR,
) -> None:
    """Send one delivery again under the same webhook-id (audited)."""
    import boto3

    from tollgate.suppliers import find_tenant
    from tollgate.webhooks.deliveries import ReplayDeps, StepFunctionsStarter, replay_delivery

    deps = _support(data_dir)
    arn = os.environ.get("WEBHOOK_STATE_MACHINE_ARN")
    if not arn:
        console.print("[red]set WEBHOOK_STATE_MACHINE_ARN: there is no dispatcher to replay through[/red]")
        raise typer.Exit(2)
    replays = ReplayDeps(deps.db, deps.clock, StepFunctionsStarter(boto3.client("stepfunctions"), arn))
    try:
        result = replay_delivery(replays, find_tenant(deps.db, tenant), endpoint, delivery)
    except TollgateError as error:
        _fail(error)
    with deps.db.transaction() as conn:
        conn.execute(
            deps.db.q.insert_audit,
            {
                "actor": deps.actor,
                "reason": reason,
                "action": "delivery_replay",
                "target": str(delivery),
                "outcome": "started",
                "details": json.dumps({"replayed": [str(r) for r in result.replayed]}),
            },
        )
    console.print(f"delivery {delivery} replayed with the same webhook-id")
