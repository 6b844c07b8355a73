"""``tollgate jobs``, ``tollgate dlq`` and ``tollgate deliveries``: support commands for people and scripts.

They find their database, queues and dispatcher as every command does (``tollgate.cli.connect``): the
environment, else a running ``tollgate local up`` (the file it writes in its data folder), else, for the
commands that need only the database, the embedded PostgreSQL. Each command parses its options, gets its
dependencies from wiring, calls one support use case and prints what it returns; the use cases write the
audit trail. Modules behind a command are imported when it runs, so ``--help`` stays quick.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, TypeVar
from uuid import UUID

import typer

from tollgate.cli.connect import command_settings
from tollgate.cli.options import DEFAULT_DATA_DIR, DataDir, Output, OutputOption
from tollgate.cli.remote import command, remote
from tollgate.core.errors import TollgateError
from tollgate.core.job_states import JobState

if TYPE_CHECKING:
    from pydantic import BaseModel
    from rich.console import Console

    from tollgate.ops import models as ops
    from tollgate.support.service import JobDetail, SupportDeps
else:
    from tollgate.cli.lazy import Deferred

    # The operations' requests and results, imported when a command first names one.
    ops = Deferred("tollgate.ops.models")

__all__ = ["DEFAULT_DATA_DIR", "DataDir", "Output", "OutputOption"]

R = TypeVar("R", bound="BaseModel")

jobs_app = typer.Typer(help="Inspect jobs; retry ones that failed.", no_args_is_help=True)
dlq_app = typer.Typer(
    help="Inspect and redrive dead letters: each job type's queue has a dead-letter queue of its own.",
    no_args_is_help=True,
)
deliveries_app = typer.Typer(
    help="A tenant's webhook endpoints, and their deliveries: inspect and replay.", no_args_is_help=True
)


def _reason(value: str) -> str:
    if len(value.strip()) < 3:
        raise typer.BadParameter("say why in at least 3 characters: it goes into the audit trail")
    return value.strip()


Reason = Annotated[str, typer.Option(help="Why: written to the audit trail.", callback=_reason)]
Actor = Annotated[
    str | None,
    typer.Option(
        envvar="TOLLGATE_ACTOR",
        help="Who acts, in the audit trail (default: your login name). With --stage the trail names your "
        "verified IAM identity instead.",
    ),
]
JobTypeOption = Annotated[
    str | None,
    typer.Option(
        "--job-type",
        help="Only this job type's dead-letter queue (e.g. invoice_extraction); default: every type's.",
    ),
]


def _job_type(value: str | None) -> str | None:
    """A registered job type, checked before anything is looked at (the registry is imported only then)."""
    if value is None:
        return None
    from tollgate.jobtypes.registry import JOB_TYPES

    if value not in JOB_TYPES:
        raise typer.BadParameter(f"{value!r} is not a job type; one of: {', '.join(JOB_TYPES)}")
    return value


def _stdout() -> Console:
    # Made for each use, not at import: the width (COLUMNS, the terminal) and the stream are the current ones.
    from rich.console import Console

    return Console()


def _fail(message: str, code: int = 2) -> NoReturn:
    from rich.console import Console

    Console(stderr=True).print(
        f"error: {message}", style="red", markup=False, highlight=False, soft_wrap=True
    )
    raise typer.Exit(code)


def _in_stage(model: type[BaseModel], result: type[R], **fields: Any) -> R | None:
    """In stage mode (``tollgate --stage``), the command's result from the stage's operations function, a
    refusal reported as the local command reports it; None in local mode."""
    function = remote()
    if function is None:
        return None
    try:
        return function.call(command(model, **fields), result)
    except TollgateError as error:
        _fail(error.detail)


@contextmanager
def _support(
    data_dir: Path, *, queues: bool = False, dispatcher: bool = False, actor: str | None = None
) -> Iterator[SupportDeps]:
    """The command's dependencies for its duration, built by wiring from the settings ``command_settings``
    finds; a domain error becomes a message and exit code 2. Only a command that asks for the queues or the
    webhook dispatcher gets AWS clients (and pays for importing boto3)."""
    import psycopg
    from botocore.exceptions import BotoCoreError, ClientError
    from psycopg_pool import PoolTimeout

    from tollgate.settings import SupportDatabaseSettings, SupportSettings
    from tollgate.wiring import build_support

    try:
        model = SupportSettings if queues else SupportDatabaseSettings
        settings, aws = command_settings(model, data_dir)
    except TollgateError as error:
        _fail(error.detail)
    if not dispatcher and settings.webhook_state_machine_arn:
        settings = settings.model_copy(update={"webhook_state_machine_arn": None})
    try:
        deps = build_support(settings, actor, aws=aws)
    except BotoCoreError as error:
        _fail(f"cannot set up the AWS clients: {error}", code=1)
    try:
        yield deps
    except TollgateError as error:
        _fail(error.detail)
    except (psycopg.OperationalError, PoolTimeout) as error:
        _fail(f"cannot reach the database: {error}", code=1)
    except (BotoCoreError, ClientError) as error:
        _fail(f"AWS said: {error}", code=1)
    finally:
        deps.db.close()


def _when(value: datetime | None) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ") if value else ""


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, datetime):
        return _when(value)
    if isinstance(value, dict | list):
        return json.dumps(value, default=str)
    return str(value)


def _json(value: Any) -> None:
    """Machine-readable output: plain JSON on stdout, never wrapped or coloured."""
    from pydantic import BaseModel

    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    elif isinstance(value, list):
        value = [v.model_dump(mode="json") if isinstance(v, BaseModel) else v for v in value]
    typer.echo(json.dumps(value, indent=2, default=str))


def _line(text: str) -> None:
    # soft_wrap: a long line is wrapped by the terminal, never cut by rich, so ids stay whole.
    _stdout().print(text, soft_wrap=True, highlight=False, markup=False)


def _table(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """A table when it fits the terminal; otherwise one block per row, so no value (an id) is ever cut."""
    from rich import box
    from rich.table import Table

    cells = [[_text(value) for value in row] for row in rows]
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD)
    for column in columns:
        table.add_column(column, no_wrap=True)
    for row in cells:
        table.add_row(*row)
    console = _stdout()
    wanted = console.measure(table, options=console.options.update_width(100_000)).maximum
    if wanted <= console.width:
        console.print(table)
        return
    _line(title)
    width = max(len(column) for column in columns)
    for row in cells:
        _line("")
        for column, value in zip(columns, row, strict=True):
            _line(f"  {column:<{width}}  {value}")


JobTypeFilter = Annotated[
    str | None,
    typer.Option(
        "--type",
        "--job-type",
        callback=_job_type,
        help="Only jobs of this type (invoice_extraction, document_summary, document_classification).",
    ),
]


@jobs_app.command("list")
def jobs_list(
    state: Annotated[
        JobState | None, typer.Option(case_sensitive=False, help="Only jobs in this state.")
    ] = None,
    tenant: Annotated[str | None, typer.Option(help="Only this tenant's jobs (by name).")] = None,
    job_type: JobTypeFilter = None,
    limit: Annotated[int, typer.Option(min=1, max=1000)] = 50,
    output: OutputOption = Output.TABLE,
    data_dir: DataDir = DEFAULT_DATA_DIR,
) -> None:
    """Recent jobs, newest first, with their type. Needs only the database."""
    from tollgate.support.service import list_jobs

    listed = _in_stage(ops.ListJobs, ops.JobList, state=state, tenant=tenant, job_type=job_type, limit=limit)
    if listed is not None:
        jobs = listed.jobs
    else:
        with _support(data_dir) as deps:
            jobs = list_jobs(deps.db, state=state, tenant=tenant, job_type=job_type, limit=limit)
    if output is Output.JSON:
        _json(jobs)
        return
    _table(
        f"{len(jobs)} job(s)",
        ["job id", "tenant", "type", "state", "attempts", "reason", "created"],
        [
            [j.job_id, j.tenant, j.job_type, j.state, f"{j.attempt}/{j.max_attempts}", j.reason, j.created_at]
            for j in jobs
        ],
    )


def _print_job(job: JobDetail) -> None:
    def field(label: str, value: str) -> None:
        _line(f"{label:<15} {value}")

    field("job", str(job.job_id))
    field("tenant", f"{job.tenant} ({job.tenant_id})")
    field("state", f"{job.state} (version {job.state_version}), attempt {job.attempt}/{job.max_attempts}")
    field("type", job.job_type)
    field("tier", f"{job.service_tier}, priority {job.priority}")
    field("created", _when(job.created_at))
    field("deadline", _when(job.deadline_at))
    field("finished", _when(job.finished_at) or "-")
    field("last error", _text(job.last_error) or "-")
    if not job.review_reasons:
        field("review reasons", "none")
    else:
        field("review reasons", f"{len(job.review_reasons)} (policy {job.policy_version})")
        for reason in job.review_reasons:
            where = f" ({reason['field']})" if reason.get("field") else ""
            detail = f": {reason['detail']}" if reason.get("detail") else ""
            _line(f"  - {reason.get('code', '?')}{where}{detail}")
    if job.timeline is not None:
        return  # the timeline below holds every attempt and audit entry, in the order they happened
    field("attempts", str(len(job.attempts)) if job.attempts else "none")
    for a in job.attempts:
        _line(
            f"  #{a.attempt} {a.outcome or 'running'} on {a.worker_id}, model {a.model or '-'}, "
            f"tokens {a.input_tokens}/{a.output_tokens}, cost {a.cost_usd}, {a.latency_ms} ms, "
            f"provider request {a.provider_request_id or '-'}"
        )
    field("audit", str(len(job.audit)) if job.audit else "none")
    if job.audit:
        for entry in job.audit:
            _line(
                f"  #{entry.audit_id} {_when(entry.created_at)} {entry.actor} {entry.action} -> "
                f"{entry.outcome}: {entry.reason}"
            )


@jobs_app.command("show")
def jobs_show(
    job_id: UUID, output: OutputOption = Output.TABLE, data_dir: DataDir = DEFAULT_DATA_DIR
) -> None:
    """A job, its tenant and review reasons, every attempt it made, what support did to it, and its timeline:
    state changes, attempts (model, tokens, cost, outcome), escalations, the review decision and webhook
    deliveries with their attempts, in the order they happened."""
    from tollgate.cli.timeline import print_timeline
    from tollgate.support.service import JobDetail, show_job

    shown = _in_stage(ops.ShowJob, JobDetail, job_id=job_id)
    if shown is not None:
        job = shown
    else:
        with _support(data_dir) as deps:
            job = show_job(deps.db, job_id)
    if output is Output.JSON:
        _json(job)
    else:
        _print_job(job)
        print_timeline(job, _line)


@jobs_app.command("retry")
def jobs_retry(
    job_id: UUID, reason: Reason, actor: Actor = None, data_dir: DataDir = DEFAULT_DATA_DIR
) -> None:
    """Give a FAILED_TERMINAL job a new attempt budget and signal the workers (audited)."""
    from tollgate.support.service import retry_job

    retried = _in_stage(ops.RetryJob, ops.Audited, job_id=job_id, reason=reason)
    if retried is not None:
        audit_id = retried.audit_id
    else:
        with _support(data_dir, actor=actor) as deps:
            audit_id = retry_job(deps, job_id, reason)
    _line(f"job {job_id} is READY again (audit #{audit_id})")


def _dead_letter(item: ops.DeadLetterView) -> dict[str, Any]:
    return item.model_dump(mode="json", exclude={"done", "audit_id"})


@dlq_app.command("list")
def dlq_list(
    job_type: JobTypeOption = None,
    limit: Annotated[int, typer.Option(min=1, max=500)] = 50,
    output: OutputOption = Output.TABLE,
    data_dir: DataDir = DEFAULT_DATA_DIR,
) -> None:
    """Dead letters, each with its job type, its job's current state and what a redrive would do."""
    from tollgate.support.service import list_dead_letters

    listed = _in_stage(ops.ListDeadLetters, ops.DeadLetters, job_type=job_type, limit=limit)
    if listed is not None:
        items = listed.items
    else:
        with _support(data_dir, queues=True) as deps:
            items = [ops.DeadLetterView.of(i) for i in list_dead_letters(deps, limit, job_type)]
    if output is Output.JSON:
        _json([_dead_letter(i) for i in items])
        return
    _table(
        f"{len(items)} dead letter(s)",
        ["job type", "message id", "job id", "receives", "job state", "a redrive would", "because"],
        [
            [i.job_type, i.message_id, i.job_id, i.receive_count, i.job_state, i.decision, i.why]
            for i in items
        ],
    )


@dlq_app.command("show")
def dlq_show(
    message_id: str,
    job_type: JobTypeOption = None,
    output: OutputOption = Output.TABLE,
    data_dir: DataDir = DEFAULT_DATA_DIR,
) -> None:
    """One dead letter's body and its job's reconciliation."""
    from tollgate.ops.service import dead_letter_body
    from tollgate.support.service import show_dead_letter

    shown = _in_stage(ops.ShowDeadLetter, ops.DeadLetterShown, message_id=message_id, job_type=job_type)
    if shown is None:
        with _support(data_dir, queues=True) as deps:
            found = show_dead_letter(deps, message_id, job_type)
        shown = ops.DeadLetterShown(item=ops.DeadLetterView.of(found), body=dead_letter_body(found))
    item, body = shown.item, shown.body
    if output is Output.JSON:
        _json({**_dead_letter(item), "body": body})
        return
    _stdout().print_json(data=body)
    _line(
        f"message {item.message_id} in the {item.job_type} dead-letter queue, received "
        f"{item.receive_count} time(s)"
    )
    _line(f"job {item.job_id}: {item.job_state}; a redrive would {item.decision}: {item.why}")


@dlq_app.command("redrive")
def dlq_redrive(
    reason: Reason,
    job_type: JobTypeOption = None,
    dry_run: Annotated[bool, typer.Option(help="Show what would happen; change nothing.")] = False,
    max_per_second: Annotated[float, typer.Option(min=0.1, max=100)] = 5.0,
    include_failed: Annotated[
        bool, typer.Option(help="Also give jobs that failed for other reasons (refused, …) a new budget.")
    ] = False,
    limit: Annotated[int, typer.Option(min=1, max=10_000)] = 100,
    output: OutputOption = Output.TABLE,
    actor: Actor = None,
    data_dir: DataDir = DEFAULT_DATA_DIR,
) -> None:
    """Reconcile each dead letter with its job, then redrive it to its job type's queue, reset and redrive,
    discard, or leave it."""
    from tollgate.support.service import redrive_dead_letters

    options: dict[str, Any] = {
        "reason": reason,
        "dry_run": dry_run,
        "max_per_second": max_per_second,
        "include_failed": include_failed,
        "limit": limit,
        "job_type": job_type,
    }
    report = _in_stage(ops.RedriveDeadLetters, ops.Redriven, **options)
    if report is None:
        with _support(data_dir, queues=True, actor=actor) as deps:
            done = redrive_dead_letters(deps, **options)
        report = ops.Redriven(dry_run=dry_run, items=[ops.DeadLetterView.of(i) for i in done.items])
    if output is Output.JSON:
        _json({"dry_run": dry_run, "items": [i.model_dump(mode="json") for i in report.items]})
        return
    _table(
        "Dry run: nothing changed" if dry_run else "Redrive",
        ["job type", "message id", "job id", "job state", "decision", "done", "audit", "because"],
        [
            [
                i.job_type,
                i.message_id,
                i.job_id,
                i.job_state,
                i.decision,
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
    job_type: JobTypeOption = None,
    max_per_second: Annotated[int, typer.Option(min=1, max=500)] = 10,
    actor: Actor = None,
    data_dir: DataDir = DEFAULT_DATA_DIR,
) -> None:
    """Move every dead letter back to its job type's queue with SQS's own move task: no reconciliation; for
    upstream outages."""
    from tollgate.support.service import move_all_dead_letters

    started = _in_stage(
        ops.MoveAllDeadLetters,
        ops.MovesStarted,
        reason=reason,
        job_type=job_type,
        max_per_second=max_per_second,
    )
    if started is not None:
        moves = started.moves
    else:
        with _support(data_dir, queues=True, actor=actor) as deps:
            moves = [
                ops.MoveView.of(m) for m in move_all_dead_letters(deps, reason, max_per_second, job_type)
            ]
    for move in moves:
        _line(f"{move.job_type}: move task started: {move.task_handle} (audit #{move.audit_id})")


@deliveries_app.command("endpoints")
def deliveries_endpoints(
    tenant: Annotated[str, typer.Option(help="The tenant's name.")],
    output: OutputOption = Output.TABLE,
    data_dir: DataDir = DEFAULT_DATA_DIR,
) -> None:
    """A tenant's webhook endpoints, oldest first: the ids `deliveries list --endpoint` takes. Needs only
    the database."""
    from tollgate.delivery.endpoints import EndpointList
    from tollgate.support.service import list_tenant_endpoints

    listed = _in_stage(ops.ListEndpoints, EndpointList, tenant=tenant)
    if listed is not None:
        found = listed
    else:
        with _support(data_dir) as deps:
            found = list_tenant_endpoints(deps.db, tenant)
    if output is Output.JSON:
        _json(found.items)
        return
    _table(
        f"{len(found.items)} webhook endpoint(s) of {tenant}",
        ["endpoint id", "url", "enabled", "events", "created", "description"],
        [
            [
                e.endpoint_id,
                e.url,
                "yes" if e.enabled else f"no: {e.disabled_reason or 'disabled'}",
                " ".join(e.event_types),
                e.created_at,
                e.description,
            ]
            for e in found.items
        ],
    )


@deliveries_app.command("list")
def deliveries_list(
    tenant: Annotated[str, typer.Option(help="The tenant's name.")],
    endpoint: Annotated[UUID, typer.Option(help="The endpoint id (`tollgate deliveries endpoints`).")],
    limit: Annotated[int, typer.Option(min=1, max=100)] = 20,
    output: OutputOption = Output.TABLE,
    data_dir: DataDir = DEFAULT_DATA_DIR,
) -> None:
    """An endpoint's deliveries with their attempts, newest first. Needs only the database."""
    from tollgate.delivery.deliveries import DeliveryList
    from tollgate.support.service import list_tenant_deliveries

    listed = _in_stage(ops.ListDeliveries, DeliveryList, tenant=tenant, endpoint=endpoint, limit=limit)
    if listed is not None:
        found = listed
    else:
        with _support(data_dir) as deps:
            found = list_tenant_deliveries(deps.db, tenant, endpoint, limit)
    if output is Output.JSON:
        _json(found.items)
        return
    _table(
        f"{len(found.items)} deliveries",
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
    actor: Actor = None,
    data_dir: DataDir = DEFAULT_DATA_DIR,
) -> None:
    """Send one delivery again under the same webhook-id (audited). Needs the webhook dispatcher."""
    from tollgate.support.service import replay_delivery_audited

    replayed = _in_stage(
        ops.ReplayDelivery, ops.Audited, tenant=tenant, endpoint=endpoint, delivery=delivery, reason=reason
    )
    if replayed is not None:
        audit_id = replayed.audit_id
    else:
        with _support(data_dir, dispatcher=True, actor=actor) as deps:
            _, audit_id = replay_delivery_audited(deps, tenant, endpoint, delivery, reason)
    _line(f"delivery {delivery} replayed with the same webhook-id (audit #{audit_id})")
