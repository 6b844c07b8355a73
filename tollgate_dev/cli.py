"""The development package's commands, added to ``tollgate`` through the ``tollgate.cli`` entry point:
``local up|demo|chaos`` run the whole system on this machine, ``docs`` regenerates the README's configuration
reference; and where neither the environment nor a running ``local up`` names a database, every command uses
the embedded PostgreSQL (tollgate.cli.connect). Loaded only when a command needs it, so importing it is
cheap: the local system's modules are imported by the commands that run it."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from tollgate.cli import main as cli

local_app = typer.Typer(help="Run the whole system on this machine.", no_args_is_help=True)
console = Console()
DataDir = cli.DataDir
DEFAULT_DATA_DIR = cli.DEFAULT_DATA_DIR


def register(app: typer.Typer) -> None:
    app.add_typer(local_app, name="local")
    app.command("docs")(docs)
    cli.database_fallbacks.append(embedded_database_url)


def embedded_database_url(data_dir: Path) -> str:
    """The embedded server that `tollgate local up` also uses, kept in ``data_dir``, migrated as `local up`
    migrates it. Started for this command when it is not running, and stopped when the command ends."""
    from tollgate.db.migrations import apply_migrations
    from tollgate.settings import MIGRATIONS_DIR
    from tollgate_dev.local.postgres import server_url

    url, _handle = server_url(data_dir.resolve() / "pgdata")
    apply_migrations(url, MIGRATIONS_DIR)
    return url


@local_app.command("up")
def local_up(
    port: Annotated[int, typer.Option(help="Port of the API on 127.0.0.1.")] = 8080,
    erp_port: Annotated[int, typer.Option(help="Port of the demo ERP webhook receiver on 127.0.0.1.")] = 8081,
    ops_port: Annotated[
        int, typer.Option(help="Port of the operations function's URL stand-in on 127.0.0.1.")
    ] = 8082,
    ws_port: Annotated[
        int, typer.Option(help="Port of the live notifications' WebSocket server on 127.0.0.1.")
    ] = 8083,
    data_dir: DataDir = DEFAULT_DATA_DIR,
) -> None:
    """Run the system in the foreground until Ctrl-C."""
    from tollgate_dev.local.foreground import run_in_foreground
    from tollgate_dev.local.logs import use_readable_logs
    from tollgate_dev.local.runtime import LocalStack

    use_readable_logs()
    stack = LocalStack(
        port=port,
        erp_port=erp_port,
        ops_port=ops_port,
        ws_port=ws_port,
        data_dir=data_dir,
        # Stable names, as the README gives them (tollgate-local-results, tollgate-invoice-extraction.fifo).
        resource_prefix="tollgate",
    )

    def ready() -> None:
        assert stack.erp is not None
        console.print(
            f"Tollgate is up: API at [bold]{stack.api_url}[/bold] (OpenAPI at {stack.api_url}/openapi.json)"
        )
        console.print(
            f"Demo ERP receiver at [bold]{stack.erp.url}[/bold]: register {stack.erp.url}/<any path> as a "
            "webhook endpoint and it verifies each delivery with that endpoint's secret."
        )
        if stack.ops is not None:
            console.print(
                f"Operations function at [bold]{stack.ops.url}[/bold]: `tollgate --ops-url {stack.ops.url} "
                "tenants create NAME` runs a command the way `--stage` does against a deployed stage (signed "
                "with AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing AWS_REGION=eu-west-1)."
            )
        if stack.websocket is not None:
            console.print(
                f"Live notifications at [bold]{stack.websocket_url}[/bold]: connect with the header "
                '`Authorization: Bearer <key>`, send {"action": "subscribe", "cursor": null} and each job '
                "state change follows (README: Live notifications)."
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
    from tollgate_dev.local.demo import run_local_demo

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
    from tollgate_dev.chaos.scenario import ChaosConfig, run_chaos

    report = run_chaos(ChaosConfig(seed=seed, jobs=jobs, time_limit=time_limit, data_dir=data_dir), console)
    if not report.ok:
        raise typer.Exit(1)


def docs(check: Annotated[bool, typer.Option(help="Fail if README.md is out of date.")] = False) -> None:
    """Regenerate README.md's configuration reference from the settings models."""
    from tollgate.settings import REPO_ROOT
    from tollgate_dev.docs import render_readme

    readme_path = REPO_ROOT / "README.md"
    current = readme_path.read_text(encoding="utf-8")
    rendered = render_readme(current)
    if check:
        if rendered != current:
            console.print("README.md's configuration reference is out of date: run `make docs`")
            raise typer.Exit(1)
        return
    readme_path.write_text(rendered, encoding="utf-8")
