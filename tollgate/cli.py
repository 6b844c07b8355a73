"""The ``tollgate`` command: local system, tenants, database migrations, the OpenAPI document and the event
schemas."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from pydantic import SecretStr
from rich.console import Console

from tollgate.settings import MIGRATIONS_DIR, REPO_ROOT, DatabaseSettings
from tollgate.support_cli import deliveries_app, dlq_app, jobs_app

app = typer.Typer(
    help="Tollgate: asynchronous, rate-limited LLM jobs for many tenants.", no_args_is_help=True
)
local_app = typer.Typer(help="Run the whole system on this machine.", no_args_is_help=True)
tenants_app = typer.Typer(help="Tenants and their API keys.", no_args_is_help=True)
db_app = typer.Typer(help="The database schema.", no_args_is_help=True)
events_app = typer.Typer(help="The events Tollgate publishes and their JSON Schemas.", no_args_is_help=True)
app.add_typer(local_app, name="local")
app.add_typer(tenants_app, name="tenants")
app.add_typer(db_app, name="db")
app.add_typer(events_app, name="events")
app.add_typer(jobs_app, name="jobs")
app.add_typer(dlq_app, name="dlq")
app.add_typer(deliveries_app, name="deliveries")

console = Console()
# What a script capturing stdout must not get mixed into its value (e.g. the API key of `tenants create`).
notes = Console(stderr=True)
DataDir = Annotated[Path, typer.Option(help="Where the embedded PostgreSQL keeps its data.")]
DEFAULT_DATA_DIR = Path(".tollgate")


def _database_url(data_dir: Path) -> str:
    """DATABASE_URL when set; otherwise the embedded server that `tollgate local up` also uses."""
    from tollgate.local.postgres import server_url

    url, _handle = server_url(data_dir.resolve() / "pgdata")
    return url


@local_app.command("up")
def local_up(
    port: Annotated[int, typer.Option(help="Port of the API on 127.0.0.1.")] = 8080,
    erp_port: Annotated[int, typer.Option(help="Port of the demo ERP webhook receiver on 127.0.0.1.")] = 8081,
    data_dir: DataDir = DEFAULT_DATA_DIR,
) -> None:
    """Run the system in the foreground until Ctrl-C."""
    from tollgate.local.foreground import run_in_foreground
    from tollgate.local.logs import use_readable_logs
    from tollgate.local.runtime import LocalStack

    use_readable_logs()
    stack = LocalStack(port=port, erp_port=erp_port, data_dir=data_dir)

    def ready() -> None:
        assert stack.erp is not None
        console.print(
            f"Tollgate is up: API at [bold]{stack.api_url}[/bold] (OpenAPI at {stack.api_url}/openapi.json)"
        )
        console.print(
            f"Demo ERP receiver at [bold]{stack.erp.url}[/bold]: register {stack.erp.url}/<any path> as a "
            "webhook endpoint and it verifies each delivery with that endpoint's secret."
        )
        console.print("Create a tenant with `tollgate tenants create NAME`. Ctrl-C stops everything.")

    exit_code = run_in_foreground(stack, ready, lambda note: console.print(f"Stopping: {note}"))
    if exit_code:
        raise typer.Exit(exit_code)


@local_app.command("demo")
def local_demo(
    jobs_per_tenant: Annotated[int, typer.Option(min=1, max=500)] = 100,
    data_dir: Annotated[
        Path,
        typer.Option(help="The demo's own folder: its embedded PostgreSQL (no DATABASE_URL) and its log."),
    ] = Path(".tollgate/demo"),
) -> None:
    """Start the system, drive it as tenants would, check every answer, stop. Exit 1 on any surprise."""
    from tollgate.local.demo import run_local_demo

    report = run_local_demo(jobs_per_tenant, data_dir, console)
    if not report.ok:
        raise typer.Exit(1)


@local_app.command("chaos")
def local_chaos(
    seed: Annotated[
        int, typer.Option(help="Draws the invoices, the fault plan and the provider's faults.")
    ] = 1,
    jobs: Annotated[
        int, typer.Option(min=10, max=2000, help="Invoices submitted while faults are injected.")
    ] = 300,
    time_limit: Annotated[
        float,
        typer.Option(min=30, help="Seconds the whole run may take; what has not settled by then fails."),
    ] = 480.0,
    data_dir: Annotated[
        Path, typer.Option(help="The run's embedded PostgreSQL (unless DATABASE_URL is set) and its logs.")
    ] = Path(".tollgate/chaos"),
) -> None:
    """Inject faults under traffic, then reconcile the ledger. Exit 1 if any promise broke."""
    from tollgate.chaos.scenario import ChaosConfig, run_chaos

    report = run_chaos(ChaosConfig(seed=seed, jobs=jobs, time_limit=time_limit, data_dir=data_dir), console)
    if not report.ok:
        raise typer.Exit(1)


@tenants_app.command("create")
def tenants_create(name: str, data_dir: DataDir = DEFAULT_DATA_DIR) -> None:
    """Create a tenant and print its API key (shown this once, never stored)."""
    from tollgate.auth import create_tenant
    from tollgate.clock import new_id
    from tollgate.db import build_database
    from tollgate.db.migrations import apply_migrations
    from tollgate.errors import TollgateError

    url = _database_url(data_dir)
    apply_migrations(url, MIGRATIONS_DIR)
    db = build_database(DatabaseSettings(database_url=SecretStr(url), database_role="tollgate_system"))
    try:
        tenant = create_tenant(db, name, new_id)
    except TollgateError as error:
        console.print(f"[red]{error.detail}[/red]")
        raise typer.Exit(2) from None
    finally:
        db.close()
    notes.print(f"tenant {tenant.name} ({tenant.tenant_id})", highlight=False)
    # The key alone on stdout, so scripts can capture it: API_KEY=$(tollgate tenants create acme)
    print(tenant.api_key)


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
    from tollgate.clock import new_id
    from tollgate.db import build_database
    from tollgate.errors import TollgateError
    from tollgate.suppliers import add_supplier, find_tenant

    url = _database_url(data_dir)
    db = build_database(DatabaseSettings(database_url=SecretStr(url), database_role="tollgate_system"))
    try:
        add_supplier(db, find_tenant(db, tenant), supplier, iban, new_id)
    except TollgateError as error:
        console.print(f"[red]{error.detail}[/red]")
        raise typer.Exit(2) from None
    finally:
        db.close()
    console.print(f"supplier {supplier!r} added to {tenant}")


@db_app.command("migrate")
def db_migrate(data_dir: DataDir = DEFAULT_DATA_DIR) -> None:
    """Apply pending migrations (DATABASE_URL, or the embedded server)."""
    from tollgate.db.migrations import apply_migrations

    applied = apply_migrations(_database_url(data_dir), MIGRATIONS_DIR)
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
    output_dir: Annotated[Path, typer.Option(help="Folder of the schema files.")] = REPO_ROOT
    / "events"
    / "schemas",
    check: Annotated[bool, typer.Option(help="Fail if the folder differs from the export.")] = False,
) -> None:
    """Write one JSON Schema file per event payload and per webhook body, from the event models."""
    from tollgate.events import schema_drift, write_schemas

    if check:
        drift = schema_drift(output_dir)
        if drift:
            console.print(f"event schemas out of date ({', '.join(drift)}): run `make schemas`")
            raise typer.Exit(1)
        return
    for path in write_schemas(output_dir):
        console.print(f"wrote {path}")


@app.command("docs")
def docs(check: Annotated[bool, typer.Option(help="Fail if README.md is out of date.")] = False) -> None:
    """Regenerate README.md's configuration reference from the settings models."""
    from tollgate.docs import render_readme

    readme_path = REPO_ROOT / "README.md"
    current = readme_path.read_text(encoding="utf-8")
    rendered = render_readme(current)
    if check:
        if rendered != current:
            console.print("README.md's configuration reference is out of date: run `make docs`")
            raise typer.Exit(1)
        return
    readme_path.write_text(rendered, encoding="utf-8")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
