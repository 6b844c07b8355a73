"""The ``tollgate`` command: tenants, database migrations, the OpenAPI document, the event schemas and the
support commands.

Other packages add commands through the ``tollgate.cli`` entry point group: the development package adds
``local up|demo|chaos`` and ``docs``, and says where the database is when neither the environment nor a
running ``local up`` does. This module imports none of them by name, and loads them only for a command or a
help page that needs them.

Every command finds its database the same way (``tollgate.cli.connect``). What a command needs is imported
when it runs: ``tollgate --help`` imports neither psycopg, boto3 nor pydantic.
"""

from __future__ import annotations

import sys
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, TypeVar

import typer

from tollgate.cli.connect import database_fallbacks, plugin_loader, system_database
from tollgate.cli.options import DEFAULT_DATA_DIR, DataDir, Output, OutputOption
from tollgate.cli.remote import Target, choose, command, remote
from tollgate.cli.remote import target as remote_stage_chosen
from tollgate.cli.reviews import reviews_app
from tollgate.cli.support import _json, _table, deliveries_app, dlq_app, jobs_app
from tollgate.cli.tenant import register as register_tenant_commands

if TYPE_CHECKING:
    from pydantic import BaseModel

__all__ = ["DEFAULT_DATA_DIR", "DataDir", "app", "database_fallbacks", "main"]

app = typer.Typer(
    help="Tollgate: asynchronous, rate-limited LLM jobs for many tenants.", no_args_is_help=True
)
tenants_app = typer.Typer(help="Tenants and their API keys.", no_args_is_help=True)
db_app = typer.Typer(help="The database schema.", no_args_is_help=True)
events_app = typer.Typer(help="The events Tollgate publishes and their JSON Schemas.", no_args_is_help=True)
app.add_typer(tenants_app, name="tenants")
app.add_typer(db_app, name="db")
app.add_typer(events_app, name="events")
app.add_typer(jobs_app, name="jobs")
app.add_typer(dlq_app, name="dlq")
app.add_typer(deliveries_app, name="deliveries")
app.add_typer(reviews_app, name="reviews")
register_tenant_commands(app, jobs_app)

R = TypeVar("R", bound="BaseModel")


class _Console:
    """A rich console made at each use: rich is imported only by a command that prints through it, and the
    width and stream are the current ones."""

    def __init__(self, *, stderr: bool = False) -> None:
        self._stderr = stderr

    def print(self, *args: Any, **kwargs: Any) -> None:
        from rich.console import Console

        Console(stderr=self._stderr).print(*args, **kwargs)


console = _Console()
# What a script capturing stdout must not get mixed into its value (e.g. the API key of `tenants create`).
notes = _Console(stderr=True)


@app.callback()
def choose_stage(
    stage: Annotated[
        str | None,
        typer.Option(
            "--stage",
            envvar="TOLLGATE_STAGE",
            help="Run tenants, keys, jobs, dlq, deliveries, reviews and usage commands in this deployed "
            "stage, through its operations function (signed with your AWS credentials), instead of against "
            "the local system.",
        ),
    ] = None,
    ops_url: Annotated[
        str | None,
        typer.Option(
            "--ops-url",
            envvar="TOLLGATE_OPS_URL",
            help="The operations function's URL, instead of looking it up from the stage's Ops stack.",
        ),
    ] = None,
) -> None:
    """Tollgate: asynchronous, rate-limited LLM jobs for many tenants."""
    choose(Target(stage, ops_url) if stage or ops_url else None)


def _in_stage(model: type[BaseModel], result: type[R], **fields: Any) -> R | None:
    """In stage mode, the command's result from the stage's operations function (a refusal printed as the
    local command prints it, exit code 2); None in local mode."""
    from tollgate.core.errors import TollgateError

    ops = remote()
    if ops is None:
        return None
    try:
        return ops.call(command(model, **fields), result)
    except TollgateError as error:
        console.print(f"[red]{error.detail}[/red]")
        raise typer.Exit(2) from None


def _refused(error: Any) -> NoReturn:
    console.print(f"[red]{error.detail}[/red]")
    raise typer.Exit(2) from None


def _system_db(data_dir: Path, *, migrate: bool = False) -> Any:
    """The database as tollgate_system, found as every command finds it; not configured is exit code 2.
    ``migrate`` first applies pending migrations to a database given by URL (the first tenant of a new
    database); a deployed stage's are applied on deploy."""
    from tollgate.core.errors import TollgateError

    if migrate:
        from tollgate.db.migrations import apply_migrations
        from tollgate.settings import MIGRATIONS_DIR

        url = _database_url(data_dir, None)
        if url is not None:
            apply_migrations(url, MIGRATIONS_DIR)
    try:
        return system_database(data_dir)
    except TollgateError as error:
        notes.print(f"[red]{error.detail}[/red]")
        raise typer.Exit(2) from None


def _database_url(data_dir: Path, needed_by: str | None) -> str | None:
    """The database's URL, for what needs one rather than a pool (migrations); None when only a secret
    names it, which is an error (exit code 2) for a command ``needed_by`` that cannot do without."""
    from tollgate.cli.connect import command_settings
    from tollgate.core.errors import TollgateError
    from tollgate.settings import SupportDatabaseSettings

    try:
        settings, _aws = command_settings(SupportDatabaseSettings, data_dir)
    except TollgateError as error:
        notes.print(f"[red]{error.detail}[/red]")
        raise typer.Exit(2) from None
    if settings.database_url is not None:
        return settings.database_url.get_secret_value()
    if needed_by is not None:
        notes.print(
            f"[red]{needed_by} needs DATABASE_URL (a deployed stage applies migrations on deploy)[/red]"
        )
        raise typer.Exit(2)
    return None


PLUGIN_GROUP = "tollgate.cli"

ScopeOption = Annotated[
    list[str] | None,
    typer.Option(
        "--scope",
        help="A scope the key holds (repeat it): jobs:write, jobs:read, review, webhooks:admin, ops:read. "
        "Without it, every scope.",
    ),
]


@tenants_app.command("create")
def tenants_create(name: str, scope: ScopeOption = None, data_dir: DataDir = DEFAULT_DATA_DIR) -> None:
    """Create a tenant and print its API key (shown this once, never stored).

    With USAGE_PLAN_ID (the stage's ApiStack output UsagePlanId) the tenant also gets its API Gateway key on
    that usage plan, which a stage that enforces usage plans needs. With --stage, the stage's operations
    function does both (its stack sets USAGE_PLAN_ID)."""
    from tollgate.ops import models as ops

    created = _in_stage(ops.CreateTenant, ops.TenantCreated, name=name, scopes=scope)
    if created is not None:
        notes.print(f"tenant {created.name} ({created.tenant_id})", highlight=False)
        print(created.api_key)
        return
    from tollgate.core.clock import new_id
    from tollgate.core.errors import TollgateError
    from tollgate.settings import TenantProvisioningSettings
    from tollgate.tenants.keys import ALL_SCOPES, create_tenant, parse_scopes
    from tollgate.wiring import build_usage_plan

    usage_plan = build_usage_plan(TenantProvisioningSettings())
    db = _system_db(data_dir, migrate=True)
    try:
        scopes = parse_scopes(scope) if scope else ALL_SCOPES
        tenant = create_tenant(db, name, new_id, scopes=scopes, usage_plan=usage_plan)
    except TollgateError as error:
        console.print(f"[red]{error.detail}[/red]")
        raise typer.Exit(2) from None
    finally:
        db.close()
    notes.print(f"tenant {tenant.name} ({tenant.tenant_id})", highlight=False)
    if tenant.usage_key_id is None:
        notes.print(
            "no USAGE_PLAN_ID: the tenant has no usage-plan key (right locally; a deployed stage that "
            "enforces usage plans answers it 403 until `tollgate tenants sync-usage-keys` runs with "
            "USAGE_PLAN_ID)",
            highlight=False,
        )
    # The key alone on stdout, so scripts can capture it: API_KEY=$(tollgate tenants create acme)
    print(tenant.api_key)


@tenants_app.command("list")
def tenants_list(
    limit: Annotated[int, typer.Option(min=1, max=1000)] = 100,
    output: OutputOption = Output.TABLE,
    data_dir: DataDir = DEFAULT_DATA_DIR,
) -> None:
    """Every tenant by name: its id, when it was made, its live keys and webhook endpoints, and the
    retention and monthly budget it has of its own."""
    from tollgate.cli.lazy import Deferred

    ops = Deferred("tollgate.ops.models")  # imported only in stage mode
    listed = _in_stage(ops.ListTenants, ops.TenantList, limit=limit)
    if listed is None:
        from tollgate.tenants.listing import TenantList, list_tenants

        db = _system_db(data_dir)
        try:
            listed = TenantList(tenants=list_tenants(db, limit))
        finally:
            db.close()
    if output is Output.JSON:
        _json(listed.tenants)
        return
    _table(
        f"{len(listed.tenants)} tenant(s)",
        ["name", "tenant id", "created", "live keys", "webhook endpoints", "retention days", "budget USD"],
        [
            [
                t.name,
                t.tenant_id,
                t.created_at,
                t.live_keys,
                t.webhook_endpoints,
                t.retention_days or "default",
                t.monthly_budget_usd if t.monthly_budget_usd is not None else "none",
            ]
            for t in listed.tenants
        ],
    )


@tenants_app.command("sync-usage-keys")
def tenants_sync_usage_keys(data_dir: DataDir = DEFAULT_DATA_DIR) -> None:
    """Give every tenant without one its API Gateway key on the usage plan USAGE_PLAN_ID names (tenants made
    before usage-plan keys, or without USAGE_PLAN_ID). Safe to run again."""
    from tollgate.ops import models as ops
    from tollgate.settings import TenantProvisioningSettings
    from tollgate.tenants.usage_keys import sync_usage_keys
    from tollgate.wiring import build_usage_plan

    synced_there = _in_stage(ops.SyncUsageKeys, ops.UsageKeysSynced)
    if synced_there is not None:
        console.print(f"{len(synced_there.tenants)} tenant(s) got a usage-plan key", highlight=False)
        return
    settings = TenantProvisioningSettings()
    if settings.usage_plan_id is None:
        notes.print("[red]USAGE_PLAN_ID is not set: it is the stage's ApiStack output UsagePlanId[/red]")
        raise typer.Exit(2)
    db = _system_db(data_dir)
    try:
        synced = sync_usage_keys(db, build_usage_plan(settings))
    finally:
        db.close()
    console.print(f"{len(synced)} tenant(s) got a usage-plan key", highlight=False)


@tenants_app.command("add-supplier")
def tenants_add_supplier(
    tenant: Annotated[str, typer.Argument(help="The tenant's name.")],
    supplier: Annotated[str, typer.Argument(help="The supplier's legal name as it appears on invoices.")],
    iban: Annotated[
        str | None, typer.Option(help="The supplier's IBAN on file (checked on invoices).")
    ] = None,
    data_dir: DataDir = DEFAULT_DATA_DIR,
) -> None:
    """Add a supplier to a tenant's master data; invoices from unknown suppliers go to review."""
    from tollgate.ops import models as ops

    if _in_stage(ops.AddSupplier, ops.Audited, tenant=tenant, supplier=supplier, iban=iban):
        console.print(f"supplier {supplier!r} added to {tenant}")
        return
    from tollgate.core.clock import new_id
    from tollgate.core.errors import TollgateError
    from tollgate.tenants.suppliers import add_supplier, find_tenant

    db = _system_db(data_dir)
    try:
        add_supplier(db, find_tenant(db, tenant), supplier, iban, new_id)
    except TollgateError as error:
        console.print(f"[red]{error.detail}[/red]")
        raise typer.Exit(2) from None
    finally:
        db.close()
    console.print(f"supplier {supplier!r} added to {tenant}")


class IbanPolicy(StrEnum):
    ACCEPT = "accept"
    REVIEW = "review"


@tenants_app.command("unverified-ibans")
def tenants_unverified_ibans(
    tenant: Annotated[str, typer.Argument(help="The tenant's name.")],
    policy: Annotated[
        IbanPolicy,
        typer.Argument(help="review (the default): such an invoice waits for a person; accept: it passes."),
    ],
    data_dir: DataDir = DEFAULT_DATA_DIR,
) -> None:
    """Whether an invoice may carry an IBAN to the ERP when its supplier has none on file (so it cannot be
    checked against master data): review sends it to a person (iban_unverified), accept lets it pass."""
    from tollgate.core.errors import TollgateError
    from tollgate.ops import models as ops
    from tollgate.tenants.suppliers import find_tenant, set_accept_unverified_iban

    accept = policy is IbanPolicy.ACCEPT
    said = f"{tenant}: IBANs of suppliers without one on file " + ("pass" if accept else "go to review")
    if _in_stage(ops.SetUnverifiedIbans, ops.Audited, tenant=tenant, accept=accept):
        console.print(said)
        return
    db = _system_db(data_dir)
    try:
        set_accept_unverified_iban(db, find_tenant(db, tenant), accept)
    except TollgateError as error:
        console.print(f"[red]{error.detail}[/red]")
        raise typer.Exit(2) from None
    finally:
        db.close()
    console.print(said)


@tenants_app.command("set-retention")
def tenants_set_retention(
    tenant: Annotated[str, typer.Argument(help="The tenant's name.")],
    days: Annotated[
        str, typer.Argument(help="Days to keep finished jobs (1 to 3650), or 'default' for the deployment's.")
    ],
    data_dir: DataDir = DEFAULT_DATA_DIR,
) -> None:
    """Set how long a tenant's finished jobs, results, deliveries and idempotency keys are kept; after it, a
    job is archived to S3 and deleted, and a replay of its Idempotency-Key is a new job."""
    from tollgate.core.errors import TollgateError
    from tollgate.ops import models as ops
    from tollgate.tenants.retention import set_tenant_retention
    from tollgate.tenants.suppliers import find_tenant

    if days != "default" and not days.isdigit():
        console.print("[red]DAYS is a whole number of days or 'default'[/red]")
        raise typer.Exit(2)
    if _in_stage(ops.SetRetention, ops.Audited, tenant=tenant, days=None if days == "default" else int(days)):
        _say_retention(tenant, days)
        return
    db = _system_db(data_dir)
    try:
        set_tenant_retention(db, find_tenant(db, tenant), None if days == "default" else int(days))
    except TollgateError as error:
        console.print(f"[red]{error.detail}[/red]")
        raise typer.Exit(2) from None
    finally:
        db.close()
    _say_retention(tenant, days)


def _say_retention(tenant: str, days: str) -> None:
    console.print(
        f"{tenant} keeps finished jobs for {days} days"
        if days != "default"
        else f"{tenant} keeps finished jobs for the deployment's default retention"
    )


@tenants_app.command("budget")
def tenants_budget(
    tenant: Annotated[str, typer.Argument(help="The tenant's name.")],
    monthly_usd: Annotated[
        str, typer.Option("--monthly-usd", help="USD per UTC month (e.g. 250.00), or 'none' to remove it.")
    ],
    data_dir: DataDir = DEFAULT_DATA_DIR,
) -> None:
    """Set a tenant's monthly spend budget: admission refuses a job (429 spend-budget-exhausted) whose
    estimated cost would pass it, workers start no call that would, and 80% and 100% are announced once each
    per month (tenant.spend_threshold.v1)."""
    from decimal import Decimal, InvalidOperation

    from tollgate.core.errors import TollgateError
    from tollgate.tenants.suppliers import find_tenant
    from tollgate.usage.service import set_monthly_budget

    budget: Decimal | None = None
    if monthly_usd != "none":
        try:
            budget = Decimal(monthly_usd)
        except InvalidOperation:
            budget = Decimal(-1)
        if not budget.is_finite() or budget < 0 or budget >= Decimal(10) ** 8:
            console.print("[red]--monthly-usd is an amount in USD from 0 to 99999999, or 'none'[/red]")
            raise typer.Exit(2)
    from tollgate.ops import models as ops

    if _in_stage(ops.SetBudget, ops.Audited, tenant=tenant, monthly_usd=budget):
        console.print(
            f"{tenant} has a monthly budget of {budget} USD"
            if budget is not None
            else f"{tenant} has no budget"
        )
        return
    db = _system_db(data_dir)
    try:
        set_monthly_budget(db, find_tenant(db, tenant), budget)
    except TollgateError as error:
        console.print(f"[red]{error.detail}[/red]")
        raise typer.Exit(2) from None
    finally:
        db.close()
    console.print(
        f"{tenant} has a monthly budget of {budget} USD" if budget is not None else f"{tenant} has no budget"
    )


@app.command("usage")
def usage(
    tenant: Annotated[str | None, typer.Option(help="One tenant's name; every tenant when left out.")] = None,
    from_day: Annotated[str | None, typer.Option("--from", help="First UTC day (YYYY-MM-DD).")] = None,
    to_day: Annotated[
        str | None, typer.Option("--to", help="Last UTC day, inclusive; default today.")
    ] = None,
    group_by: Annotated[
        str, typer.Option("--group-by", help="Comma list of day, job_type, model.")
    ] = "job_type",
    output: OutputOption = Output.TABLE,
    data_dir: DataDir = DEFAULT_DATA_DIR,
) -> None:
    """Usage and cost per tenant (and type, day or model) from the aggregates, with cost per completed job."""
    from tollgate.cli.usage import show_usage
    from tollgate.core.clock import SystemClock
    from tollgate.core.errors import TollgateError
    from tollgate.tenants.suppliers import find_tenant
    from tollgate.usage.service import UsageReport, get_usage, parse_usage_query, utc_today

    ops = remote()
    if ops is not None:
        from tollgate.ops.models import GetUsage

        try:
            request = command(GetUsage, tenant=tenant, from_day=from_day, to_day=to_day, group_by=group_by)
            remote_report = ops.call(request, UsageReport)
        except TollgateError as error:
            _usage_refused(error)
        show_usage(remote_report, as_json=output is Output.JSON)
        return
    db = _system_db(data_dir)
    try:
        query = parse_usage_query(from_day, to_day, group_by, today=utc_today(SystemClock().now()))
        if tenant is None:
            report = get_usage(db, None, query)
        else:
            # One tenant's report, in its own scope (as the API reads it), labelled with its name.
            tenant_id = find_tenant(db, tenant)
            report = get_usage(db, tenant_id, query)
            report = report.model_copy(
                update={
                    "rows": [r.model_copy(update={"tenant": tenant}) for r in report.rows],
                    "total": report.total.model_copy(update={"tenant": tenant}),
                }
            )
    except TollgateError as error:
        _usage_refused(error)
    finally:
        db.close()
    show_usage(report, as_json=output is Output.JSON)


def _usage_refused(error: Any) -> NoReturn:
    details = "; ".join(str(e.get("msg")) for e in error.extensions.get("errors", []))
    console.print(f"[red]{error.detail}{': ' + details if details else ''}[/red]")
    raise typer.Exit(2) from None


keys_app = typer.Typer(help="A tenant's API keys: create, list, revoke.", no_args_is_help=True)
tenants_app.add_typer(keys_app, name="keys")


@keys_app.command("create")
def keys_create(
    tenant: Annotated[str, typer.Argument(help="The tenant's name.")],
    scope: ScopeOption = None,
    data_dir: DataDir = DEFAULT_DATA_DIR,
) -> None:
    """Create another API key for a tenant and print it (shown this once, never stored)."""
    from tollgate.ops import models as ops

    created = _in_stage(ops.CreateKey, ops.KeyCreated, tenant=tenant, scopes=scope)
    if created is not None:
        held = " ".join(sorted(created.scopes))
        notes.print(f"key {created.key_id} ({created.key_prefix}…) with {held}", highlight=False)
        print(created.api_key)
        return
    from tollgate.core.clock import new_id
    from tollgate.core.errors import TollgateError
    from tollgate.tenants.keys import ALL_SCOPES, create_key, parse_scopes
    from tollgate.tenants.suppliers import find_tenant

    db = _system_db(data_dir)
    try:
        scopes = parse_scopes(scope) if scope else ALL_SCOPES
        key = create_key(db, find_tenant(db, tenant), new_id, scopes=scopes)
    except TollgateError as error:
        console.print(f"[red]{error.detail}[/red]")
        raise typer.Exit(2) from None
    finally:
        db.close()
    notes.print(f"key {key.key_id} ({key.key_prefix}…) with {' '.join(sorted(key.scopes))}", highlight=False)
    print(key.api_key)


@keys_app.command("list")
def keys_list(
    tenant: Annotated[str, typer.Argument(help="The tenant's name.")],
    output: OutputOption = Output.TABLE,
    data_dir: DataDir = DEFAULT_DATA_DIR,
) -> None:
    """A tenant's keys, newest first: id, prefix, scopes, created, revoked."""
    from tollgate.cli.lazy import Deferred

    ops = Deferred("tollgate.ops.models")  # imported only in stage mode
    listed = _in_stage(ops.ListKeys, ops.KeyList, tenant=tenant)
    if listed is None:
        from tollgate.core.errors import TollgateError
        from tollgate.tenants.keys import list_keys
        from tollgate.tenants.listing import KeyList
        from tollgate.tenants.suppliers import find_tenant

        db = _system_db(data_dir)
        try:
            listed = KeyList.model_validate({"keys": list_keys(db, find_tenant(db, tenant))})
        except TollgateError as error:
            _refused(error)
        finally:
            db.close()
    if output is Output.JSON:
        _json(listed.keys)
        return
    _print_keys([key.model_dump() for key in listed.keys])


def _print_keys(keys: list[dict[str, Any]]) -> None:
    for key in keys:
        revoked = f"revoked {key['revoked_at']:%Y-%m-%d %H:%M}" if key["revoked_at"] else "live"
        scopes = " ".join(sorted(key["scopes"]))
        created = f"created {key['created_at']:%Y-%m-%d}"
        print(f"{key['key_id']}  {key['key_prefix']}…  {scopes}  {created}  {revoked}")


@keys_app.command("revoke")
def keys_revoke(
    tenant: Annotated[str, typer.Argument(help="The tenant's name.")],
    key_id: Annotated[str, typer.Argument(help="The key's id (from `tollgate tenants keys list`).")],
    data_dir: DataDir = DEFAULT_DATA_DIR,
) -> None:
    """Revoke a key. It stops resolving at once, but an authorizer that resolved it shortly before keeps
    admitting it until its key cache (API_KEY_CACHE_TTL_SECONDS) expires; a deployed stage's API Gateway
    also caches the authorizer's answer (the stage's authorizer_cache_ttl_seconds)."""
    from uuid import UUID

    from tollgate.core.clock import SystemClock
    from tollgate.core.errors import TollgateError
    from tollgate.ops import models as ops
    from tollgate.tenants.keys import revoke_key
    from tollgate.tenants.suppliers import find_tenant

    try:
        key = UUID(key_id)
    except ValueError:
        console.print(f"[red]{key_id!r} is not a key id[/red]")
        raise typer.Exit(2) from None
    if _in_stage(ops.RevokeKey, ops.Audited, tenant=tenant, key_id=key):
        console.print(f"key {key} of {tenant} revoked", highlight=False)
        notes.print(
            "It may still be admitted until the stage's caches expire: the authorizer's key cache "
            "(api_key_cache_ttl_seconds in the stage's authorizer settings) and API Gateway's cache of the "
            "authorizer's answer (authorizer_cache_ttl_seconds).",
            highlight=False,
        )
        return
    db = _system_db(data_dir)
    try:
        revoke_key(db, SystemClock(), find_tenant(db, tenant), key)
    except TollgateError as error:
        _refused(error)
    finally:
        db.close()
    console.print(f"key {key} of {tenant} revoked", highlight=False)
    notes.print(_still_admitted(), highlight=False)


def _still_admitted() -> str:
    """How long a revoked key may still work, from the setting the authorizer's key cache takes its
    lifetime from (read from this environment, as `tollgate local up` and the authorizer read it)."""
    from tollgate.settings import KeyCacheSettings

    seconds = KeyCacheSettings().api_key_cache_ttl_seconds
    return (
        f"It keeps working for up to {seconds} s more where an authorizer resolved it just before: its key "
        f"cache lives API_KEY_CACHE_TTL_SECONDS={seconds} s. A deployed stage's API Gateway also caches the "
        "authorizer's answer (the stage's authorizer_cache_ttl_seconds)."
    )


@db_app.command("migrate")
def db_migrate(data_dir: DataDir = DEFAULT_DATA_DIR) -> None:
    """Apply pending migrations (DATABASE_URL, or the embedded server)."""
    if remote_stage_chosen():
        console.print(
            "[red]a deployed stage applies its migrations on deploy (the Data stack's migrate "
            "function); `db migrate` runs against DATABASE_URL or the embedded server only[/red]"
        )
        raise typer.Exit(2)
    from tollgate.db.migrations import apply_migrations
    from tollgate.settings import MIGRATIONS_DIR

    url = _database_url(data_dir, "db migrate")
    assert url is not None
    applied = apply_migrations(url, MIGRATIONS_DIR)
    names = ", ".join(f"{m.version:04d}_{m.name}" for m in applied) or "nothing to apply"
    console.print(f"migrations: {names}")


@app.command("openapi")
def openapi(
    output: Annotated[Path | None, typer.Option(help="File to write; stdout when absent.")] = None,
) -> None:
    """Write the API's OpenAPI document."""
    from tollgate.api.app import export_openapi

    document = export_openapi()
    if output is None:
        sys.stdout.write(document)
    else:
        output.write_text(document, encoding="utf-8")


@events_app.command("schemas")
def events_schemas(
    output_dir: Annotated[
        Path | None, typer.Option(help="Folder of the schema files; default the repository's events/schemas.")
    ] = None,
    check: Annotated[bool, typer.Option(help="Fail if the folder differs from the export.")] = False,
) -> None:
    """Write one JSON Schema file per event payload and per webhook body, from the event models."""
    from tollgate.events import schema_drift, write_schemas
    from tollgate.settings import REPO_ROOT

    if output_dir is None:
        output_dir = REPO_ROOT / "events" / "schemas"

    if check:
        drift = schema_drift(output_dir)
        if drift:
            console.print(f"event schemas out of date ({', '.join(drift)}): run `make schemas`")
            raise typer.Exit(1)
        return
    for path in write_schemas(output_dir):
        console.print(f"wrote {path}")


def load_plugins() -> None:
    """Lets each installed ``tollgate.cli`` entry point add its commands (once per process)."""
    if getattr(app, "_plugins_loaded", False):
        return
    app._plugins_loaded = True  # type: ignore[attr-defined]
    from importlib.metadata import entry_points

    for entry_point in entry_points(group=PLUGIN_GROUP):
        entry_point.load()(app)


# Options of `tollgate` itself that take a value, so the command's name is found after them.
_ROOT_OPTIONS_WITH_VALUES = ("--stage", "--ops-url")


def _command_name(args: list[str]) -> str | None:
    """The first word of the command line that names a command, skipping the root options."""
    skip = False
    for arg in args:
        if skip:
            skip = False
        elif arg in _ROOT_OPTIONS_WITH_VALUES:
            skip = True
        elif not arg.startswith("-"):
            return arg
    return None


def _builtin_commands() -> set[str]:
    groups = {group.name for group in app.registered_groups if group.name}
    return groups | {c.name or c.callback.__name__ for c in app.registered_commands if c.callback}


def main() -> None:
    # A plugin is loaded for a command of its own, or for a help page that lists every command; a built-in
    # command loads one only if it asks for the database a plugin offers (tollgate.cli.connect).
    name = _command_name(sys.argv[1:])
    if name is None or name not in _builtin_commands():
        load_plugins()
    else:
        plugin_loader.append(load_plugins)
    try:
        app()
    except Exception as error:
        said = _database_problem(error)
        if said is None:
            raise
        typer.echo(f"error: {said}", err=True)
        sys.exit(1)


def _database_problem(error: Exception) -> str | None:
    """One line for a database that is not there or not Tollgate's, instead of a traceback; None for anything
    else (a bug, which keeps its traceback)."""
    psycopg = sys.modules.get("psycopg")
    if psycopg is None:
        return None
    if isinstance(error, psycopg.errors.UndefinedTable):
        return (
            f"the database has no Tollgate schema ({str(error).splitlines()[0]}): run `tollgate db migrate` "
            "against it, or point DATABASE_URL at the right one"
        )
    if isinstance(error, psycopg.OperationalError):
        return f"cannot use the database: {str(error).strip().splitlines()[0]}"
    return None


if __name__ == "__main__":
    main()
