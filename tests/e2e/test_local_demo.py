"""The README's main command, end to end: `tollgate local demo` as a user runs it, in a subprocess.

The demo keeps to itself (its own folder, a database of its own that it drops), shows progress on the
terminal and its log lines and live feed in files, and prints what the README's excerpt of it says it prints.
With --keep (make demo KEEP=1) its data stays where `tollgate local up --data-dir` on its folder finds it.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from tollgate.settings import REPO_ROOT
from tollgate_dev.local.demo import TENANTS
from tollgate_dev.local.postgres import embedded_server

pytestmark = pytest.mark.e2e

EXCERPT_START = "<!-- demo-output:start -->"
EXCERPT_END = "<!-- demo-output:end -->"
ELISION = "…"
BARS = "━─╸╺"


def run_demo(cwd: Path, env: dict[str, str], *options: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tollgate.cli.main", "local", "demo", "--jobs-per-tenant", "10", *options],
        cwd=cwd,
        # 80 columns, as the README's excerpt was taken; the demo keeps its lines within that.
        env={**env, "COLUMNS": "80"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def readme_excerpt() -> list[str]:
    """The lines of the demo's output that the README shows, between its two markers."""
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    block = readme.split(EXCERPT_START, 1)[1].split(EXCERPT_END, 1)[0]
    lines = block.strip().splitlines()
    assert lines[0].startswith("```") and lines[-1] == "```", "the excerpt is one fenced block"
    return [line for line in lines[1:-1] if line.strip()]


def line_pattern(line: str) -> re.Pattern[str]:
    """An excerpt line as a pattern: numbers, padding and bar lengths change from run to run, words don't."""
    parts = []
    for token in re.finditer(rf"\d+(?:[.,]\d+)*|\s+|[{BARS}]+|.", line.strip()):
        text = token.group()
        if text[0].isdigit():
            parts.append(r"\d+(?:[.,]\d+)*")
        elif text.isspace():
            parts.append(r"\s*")
        elif text[0] in BARS:
            parts.append(f"[{BARS}]*")
        else:
            parts.append(re.escape(text))
    return re.compile("".join(parts))


def missing_from(output: str, excerpt: list[str]) -> list[str]:
    """Excerpt lines that do not appear in ``output`` in the excerpt's order. Output lines the excerpt leaves
    out are skipped (its elision line is only there for the reader)."""
    printed = [line.strip() for line in output.splitlines()]
    position, missing = 0, []
    for line in excerpt:
        if line.strip() == ELISION:
            continue
        pattern = line_pattern(line)
        found = next((i for i in range(position, len(printed)) if pattern.fullmatch(printed[i])), None)
        if found is None:
            missing.append(line)
        else:
            position = found + 1
    return missing


def test_line_patterns_allow_what_varies_and_nothing_else():
    pattern = line_pattern("       SUCCEEDED ━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━     270/300")

    assert pattern.fullmatch("SUCCEEDED ━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━╸    29/30")
    assert pattern.fullmatch("SUCCEEDED                                          0/30")
    assert not pattern.fullmatch("REVIEW_REQUIRED ━━━━                                      3/30")
    assert missing_from("a\nb 12 ms\nc", ["b 9 ms", ELISION, "c"]) == []
    assert missing_from("a\nb 12 ms\nc", ["c", "b 9 ms"]) == ["b 9 ms"]


def kept_tenants(data_dir: Path) -> dict[str, int]:
    """Each tenant in the database of the embedded server in ``data_dir`` (the one `tollgate local up
    --data-dir` serves), with its number of jobs; and no demo database of a run's own left on that server."""
    server = embedded_server(data_dir / "pgdata")
    try:
        with psycopg.connect(server.get_uri()) as conn:
            others = conn.execute(
                "SELECT datname FROM pg_database WHERE datname LIKE 'tollgate_demo%'"
            ).fetchall()
            # A run that kept nothing leaves the server's database as it was: not even migrated.
            migrated = conn.execute("SELECT to_regclass('tenants') IS NOT NULL").fetchone() == (True,)
            query = (
                "SELECT t.name, count(j.job_id) FROM tenants t"
                " LEFT JOIN extraction_jobs j USING (tenant_id) GROUP BY 1"
            )
            rows = conn.execute(query).fetchall() if migrated else []
    finally:
        server.cleanup()
    assert others == [], f"a demo left its database behind: {others}"
    return dict(rows)


def test_the_demo_keeps_to_its_own_folder_shows_progress_only_and_prints_the_readme_excerpt(tmp_path):
    # As `make demo` runs on a fresh machine: no DATABASE_URL, so an embedded server in the demo's folder.
    # The first run as `make demo`, the second as `make demo KEEP=1`.
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    demo = tmp_path / ".tollgate" / "demo"
    for run, options in enumerate([(), ("--keep",)]):
        result = run_demo(tmp_path, env, *options)

        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        passed, total = re.search(r"(\d+)/(\d+) checks passed", result.stdout).groups()
        assert passed == total
        assert "jobs accepted" in result.stdout
        # Progress only: every component's log lines went to the file the demo named.
        assert "job accepted" not in result.stdout + result.stderr
        assert not re.search(r"^\{", result.stdout, re.MULTILINE)
        assert result.stderr == ""
        log = demo / "demo.log"
        assert f"Logs: {log.relative_to(tmp_path)}" in result.stdout
        assert "job accepted" in log.read_text(encoding="utf-8")
        # The live feed went to its file, a line per state change; the terminal only counts its messages.
        feed = demo / "live-feed.log"
        assert f"The live feed is in {feed.relative_to(tmp_path)}." in result.stdout
        watched = re.search(r"live feed\s+(\d+) messages so far \((\S+)\)", result.stdout)
        feed_lines = feed.read_text(encoding="utf-8").splitlines()
        assert watched and feed_lines and all(line.startswith(watched.group(2)) for line in feed_lines)
        assert not any(
            re.search(r"(READY|RUNNING|SUCCEEDED)\s+v\d", line) for line in result.stdout.splitlines()
        )
        if run == 0:
            assert missing_from(result.stdout, readme_excerpt()) == [], result.stdout
            assert "To keep the data and explore it: make demo KEEP=1" in result.stdout
            # Dropped: nothing of this run in the server's database, and no database of its own left.
            assert kept_tenants(demo) == {}
        else:
            tenant = watched.group(2)
            suffix = tenant.rsplit("-", 1)[1]
            # Kept where `tollgate local up --data-dir .tollgate/demo` serves it, and the demo says so.
            assert "Done. The demo's data is kept. To explore it, serve it in one terminal:" in result.stdout
            assert "tollgate local up --data-dir .tollgate/demo" in result.stdout
            assert "tollgate reviews list --data-dir .tollgate/demo" in result.stdout
            accepted = int(re.search(r"(\d+) jobs accepted", result.stdout).group(1))
            kept = kept_tenants(demo)
            assert sorted(kept) == sorted(f"{base}-{suffix}" for base in TENANTS)
            assert sum(kept.values()) == accepted
    # Nothing next to the demo's folder, where `tollgate local up` keeps its own data.
    assert [p.name for p in (tmp_path / ".tollgate").iterdir()] == ["demo"]


def test_on_database_url_the_demo_runs_in_a_database_of_its_own_and_drops_it(fresh_database, tmp_path):
    url = fresh_database()
    result = run_demo(tmp_path, {**os.environ, "DATABASE_URL": url}, "--data-dir", str(tmp_path / "demo"))

    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "a database of its own on DATABASE_URL's server, dropped at the end" in result.stdout
    log = (tmp_path / "demo" / "demo.log").read_text(encoding="utf-8")
    name = re.search(r"demo database created\s+database=(\w+)", log).group(1)
    with psycopg.connect(url) as conn:
        leftover = conn.execute("SELECT count(*) FROM pg_database WHERE datname = %s", (name,)).fetchone()
        tables = conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'").fetchone()
    assert leftover == (0,), f"the demo left its database {name} behind"
    assert tables == (0,), "the demo wrote into DATABASE_URL's own database"


def test_tenants_create_prints_the_key_once_on_stdout(fresh_database, tmp_path):
    env = {**os.environ, "DATABASE_URL": fresh_database()}
    command = [
        sys.executable,
        "-m",
        "tollgate.cli.main",
        "tenants",
        "create",
        "acme",
        "--data-dir",
        str(tmp_path),
    ]
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
    cli = [sys.executable, "-m", "tollgate.cli.main"]

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
