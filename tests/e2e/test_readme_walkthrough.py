"""README.md's walkthrough, run as written: every command of its console blocks, in order, in one bash, against
a running local system, each checked against the state and status the README shows for it.

The shell is a reader's: it starts in a folder laid out as a checkout (`.venv`, `examples`, and `.tollgate`
where the running system writes its addresses), with none of this process's settings, so the commands find
the system the way the README says they do.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.walkthrough import commands, report, run, shell_environment
from tollgate.settings import REPO_ROOT

pytestmark = pytest.mark.e2e


def test_the_readme_walkthrough_runs_as_written(local_stack, tmp_path: Path) -> None:
    steps = commands((REPO_ROOT / "README.md").read_text(encoding="utf-8"))
    assert len(steps) >= 10, "the walkthrough lost its commands"
    data = tmp_path / "system"
    data.mkdir()
    local_stack(data_dir=data)
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    (checkout / ".venv").symlink_to(Path(sys.executable).parent.parent)
    (checkout / "examples").symlink_to(REPO_ROOT / "examples")
    (checkout / ".tollgate").symlink_to(data)

    outcomes = run(steps, checkout, shell_environment(), timeout=600)

    problems = report(steps, outcomes)
    assert not problems, "\n\n".join(problems)
    assert len(outcomes) == len(steps)
