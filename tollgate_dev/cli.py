"""The development package's commands, added to ``tollgate`` through the ``tollgate.cli`` entry point:
``local up|demo|chaos`` run the whole system on this machine, ``docs`` regenerates the README's configuration
reference; and where neither the environment nor a running ``local up`` names a database, every command uses
the embedded PostgreSQL (tollgate.cli.connect). Loaded only when a command needs it, so importing it is
cheap: the local system's modules are imported by the commands that run it."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from rich.console import Console

from tollgate.cli import main as cli

if TYPE_CHECKING:
    from tollgate_dev.local.ports import PortsUnavailable

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


# Each port of `local up`: its option and its environment variable (for a walkthrough or a script that moves
# them), by the name LocalStack and its port checks give it.
PORT_OPTIONS = {
    "port": ("--port", "TOLLGATE_PORT"),
    "erp_port": ("--erp-port", "TOLLGATE_ERP_PORT"),
    "ops_port": ("--ops-port", "TOLLGATE_OPS_PORT"),
    "ws_port": ("--ws-port", "TOLLGATE_WS_PORT"),
}


def _port_option(name: str, what: str) -> Any:
    option, envvar = PORT_OPTIONS[name]
    return typer.Option(
        option, envvar=envvar, min=0, max=65535, help=f"Port of {what} on 127.0.0.1 (0: any free one)."
    )


def _say_ports_unavailable(error: PortsUnavailable) -> NoReturn:
    """One line per port, naming it and what moves it; exit code 2, as for any refused input."""
    for problem in error.problems:
        option, envvar = PORT_OPTIONS[problem.name]
        if problem.clashes_with is not None:
            what = f"is also given to {PORT_OPTIONS[problem.clashes_with][0]}"
        else:
            what = f"{problem.reason} on 127.0.0.1"
        if error.started:
            what += " (taken while Tollgate was starting; what had started is stopped)"
        console.print(
            f"port {problem.port} ({option}) {what}; choose another with {option} or {envvar}",
            highlight=False,
            soft_wrap=True,
            markup=False,
        )
    raise typer.Exit(2)


@local_app.command("up")
def local_up(
    port: Annotated[int, _port_option("port", "the API")] = 8080,
    erp_port: Annotated[int, _port_option("erp_port", "the demo ERP webhook receiver")] = 8081,
    ops_port: Annotated[int, _port_option("ops_port", "the operations function's URL stand-in")] = 8082,
    ws_port: Annotated[int, _port_option("ws_port", "the live notifications' WebSocket server")] = 8083,
    data_dir: DataDir = DEFAULT_DATA_DIR,
) -> None:
    """Run the system in the foreground until Ctrl-C. Once everything listens, it prints one NAME=URL line
    per address (api_url, erp_url, ops_url, websocket_url) for scripts, then what each one is for."""
    from tollgate_dev.local.ports import PortsUnavailable, check_ports

    ports = {"port": port, "erp_port": erp_port, "ops_port": ops_port, "ws_port": ws_port}
    # First of all, before the system's modules are imported (seconds), PostgreSQL starts and the migrations
    # run (half a minute): a taken port is one line, and nothing started.
    if problems := check_ports(ports):
        _say_ports_unavailable(PortsUnavailable(problems, started=False))

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
        assert stack.ops is not None
        # Stable lines for scripts (`sed -n 's/^api_url=//p'`), never wrapped, named as the discovery file
        # (local.json in the data folder) names them.
        for name, url in (
            ("api_url", stack.api_url),
            ("erp_url", stack.erp.url),
            ("ops_url", stack.ops.url),
            ("websocket_url", stack.websocket_url),
        ):
            console.print(f"{name}={url}", highlight=False, soft_wrap=True, markup=False)
        console.print(
            f"Tollgate is up: API at [bold]{stack.api_url}[/bold] (OpenAPI at {stack.api_url}/openapi.json)"
        )
        console.print(
            f"Demo ERP receiver at [bold]{stack.erp.url}[/bold]: register {stack.erp.url}/<any path> as a "
            "webhook endpoint and it verifies each delivery with that endpoint's secret."
        )
        console.print(
            f"Operations function at [bold]{stack.ops.url}[/bold]: `tollgate --ops-url {stack.ops.url} "
            "tenants create NAME` runs a command the way `--stage` does against a deployed stage (signed "
            "with AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing AWS_REGION=eu-west-1)."
        )
        console.print(
            f"Live notifications at [bold]{stack.websocket_url}[/bold]: connect with the header "
            '`Authorization: Bearer <key>`, send {"action": "subscribe", "cursor": null} and each job '
            "state change follows (README: Live notifications)."
        )
        console.print("Create a tenant with `tollgate tenants create NAME`. Ctrl-C stops everything.")

    try:
        exit_code = run_in_foreground(stack, ready, lambda note: console.print(f"Stopping: {note}"))
    except PortsUnavailable as error:  # taken after the check; run_in_foreground stopped what had started
        _say_ports_unavailable(error)
    if exit_code:
        raise typer.Exit(exit_code)


# The variables `tollgate local env` sets, and the discovery file's fact each one takes.
LOCAL_ADDRESSES = {
    "TOLLGATE_API_URL": "api_url",
    "TOLLGATE_ERP_URL": "erp_url",
    "TOLLGATE_FEED_URL": "websocket_url",
}


@local_app.command("env")
def local_env(data_dir: DataDir = DEFAULT_DATA_DIR) -> None:
    """Print the running local system's addresses as shell variables: `eval "$(tollgate local env)"`."""
    import json
    import shlex

    from tollgate.support.configuration import DISCOVERY_FILE

    path = data_dir.resolve() / DISCOVERY_FILE
    try:
        facts = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        typer.echo(f"the local system is not running (no {path}): `tollgate local up` starts it", err=True)
        raise typer.Exit(1) from None
    for variable, fact in LOCAL_ADDRESSES.items():
        if facts.get(fact):
            typer.echo(f"export {variable}={shlex.quote(str(facts[fact]))}")


@local_app.command("demo")
def local_demo(
    jobs_per_tenant: Annotated[int, typer.Option(min=1, max=500)] = 100,
    data_dir: Annotated[
        Path,
        typer.Option(
            help="The demo's own folder: its embedded PostgreSQL (no DATABASE_URL), its log, its live feed."
        ),
    ] = Path(".tollgate/demo"),
    keep: Annotated[
        bool,
        typer.Option(
            "--keep",
            help="Keep the demo's data (in the database `tollgate local up --data-dir` on the same folder "
            "serves; on DATABASE_URL's server, a database of its own) and say how to explore it.",
        ),
    ] = False,
) -> None:
    """Start the system, drive it as tenants would, check every answer, stop. Exit 1 on any surprise."""
    from tollgate_dev.local.demo import run_local_demo

    report = run_local_demo(jobs_per_tenant, data_dir, console, keep=keep)
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
