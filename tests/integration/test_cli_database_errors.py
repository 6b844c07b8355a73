"""A command pointed at a database that is not Tollgate's says so in one line, not a traceback: the first thing
a newcomer with DATABASE_URL set to a fresh server sees."""

import os
import subprocess
import sys


def test_a_database_without_the_schema_is_named_with_the_command_that_makes_it(fresh_database) -> None:
    env = {**os.environ, "DATABASE_URL": fresh_database(), "COLUMNS": "100"}

    for command in (["tenants", "list"], ["jobs", "list"], ["reviews", "list"]):
        result = subprocess.run(
            [sys.executable, "-m", "tollgate.cli.main", *command],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

        assert result.returncode == 1, (command, result.stdout, result.stderr)
        assert result.stderr.startswith("error: the database has no Tollgate schema"), result.stderr
        assert "`tollgate db migrate`" in result.stderr
        assert "Traceback" not in result.stderr
