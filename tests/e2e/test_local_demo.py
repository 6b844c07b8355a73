"""The README's main command, end to end: `tollgate local demo` as a user runs it, in a subprocess."""

import os
import re
import subprocess
import sys

import pytest

pytestmark = pytest.mark.e2e


def test_the_demo_runs_twice_in_a_row_and_exits_zero(fresh_database, tmp_path):
    env = {**os.environ, "DATABASE_URL": fresh_database()}
    for _ in range(2):
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "tollgate.cli",
                "local",
                "demo",
                "--jobs-per-tenant",
                "10",
                "--data-dir",
                str(tmp_path),
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        passed, total = re.search(r"(\d+)/(\d+) checks passed", result.stdout).groups()
        assert passed == total
        assert "jobs accepted" in result.stdout


def test_tenants_create_prints_the_key_once_on_stdout(fresh_database, tmp_path):
    env = {**os.environ, "DATABASE_URL": fresh_database()}
    command = [sys.executable, "-m", "tollgate.cli", "tenants", "create", "acme", "--data-dir", str(tmp_path)]
    first = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60, check=False)
    again = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60, check=False)

    assert first.returncode == 0, first.stderr
    # Only the key on stdout: API_KEY=$(tollgate tenants create acme) must capture exactly it.
    assert first.stdout.count("\n") == 1 and first.stdout.startswith("tg_")
    assert "tenant " in first.stderr
    assert again.returncode == 2
    assert "already exists" in again.stdout + again.stderr


def test_add_supplier_checks_the_iban_and_the_tenant(fresh_database, tmp_path):
    env = {**os.environ, "DATABASE_URL": fresh_database()}
    cli = [sys.executable, "-m", "tollgate.cli"]

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*cli, *args, "--data-dir", str(tmp_path)],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    assert run("tenants", "create", "acme").returncode == 0
    good = run(
        "tenants", "add-supplier", "acme", "Nordwind Logistik GmbH", "--iban", "DE89370400440532013000"
    )
    bad_iban = run(
        "tenants", "add-supplier", "acme", "Nordwind Logistik GmbH", "--iban", "DE00370400440532013000"
    )
    no_tenant = run("tenants", "add-supplier", "nobody", "Nordwind Logistik GmbH")

    assert good.returncode == 0, good.stderr
    assert bad_iban.returncode == 2 and "not a valid IBAN" in bad_iban.stdout
    assert no_tenant.returncode == 2 and "no tenant named" in no_tenant.stdout
