"""The wheel as an operator installs it, outside a checkout: its `tollgate db migrate` finds the migrations
the wheel carries and applies them to an empty database."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import psycopg
import pytest

from tollgate.settings import REPO_ROOT

pytestmark = pytest.mark.e2e

UV = Path(sys.executable).parent / "uv"


def run(*command: str | Path, cwd: Path, env: dict[str, str] | None = None) -> str:
    result = subprocess.run(
        [str(part) for part in command],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, f"{command} failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def test_the_installed_console_script_migrates_a_scratch_database_outside_a_checkout(
    fresh_database, tmp_path
):
    dist, venv, elsewhere = tmp_path / "dist", tmp_path / "venv", tmp_path / "elsewhere"
    elsewhere.mkdir()
    run(UV, "build", "--wheel", "--offline", "--quiet", "--out-dir", dist, REPO_ROOT, cwd=REPO_ROOT)
    [wheel] = dist.glob("tollgate-*.whl")
    run(UV, "venv", "--quiet", "--python", sys.executable, venv, cwd=tmp_path)
    python = venv / "bin" / "python"
    run(UV, "pip", "install", "--quiet", "--offline", "--no-deps", "--python", python, wheel, cwd=tmp_path)
    # The wheel is the only copy of tollgate in the new environment; its dependencies are borrowed from the
    # project's environment (a path entry, which does not bring that environment's editable install along),
    # so the test needs no package index.
    new_site = run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])", cwd=tmp_path)
    Path(new_site.strip(), "project-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))},
        "DATABASE_URL": fresh_database(),
    }
    where = run(python, "-c", "import tollgate; print(tollgate.__file__)", cwd=elsewhere, env=env)
    assert Path(where.strip()).is_relative_to(venv), where

    output = run(venv / "bin" / "tollgate", "db", "migrate", cwd=elsewhere, env=env)

    shipped = sorted(path.stem for path in (REPO_ROOT / "migrations").glob("*.sql"))
    assert shipped and " ".join(output.split()) == "migrations: " + ", ".join(shipped)
    with psycopg.connect(env["DATABASE_URL"]) as conn:
        applied = conn.execute("SELECT count(*) FROM schema_migrations").fetchone()[0]
        assert conn.execute("SELECT to_regclass('extraction_jobs')").fetchone()[0] == "extraction_jobs"
    assert applied == len(shipped)
