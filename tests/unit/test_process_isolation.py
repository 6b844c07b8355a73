"""The suite's own isolation check catches what it exists to catch: a test that leaves an environment
variable changed, or a non-daemon thread running, fails; one that puts things back passes."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from tollgate.settings import REPO_ROOT

# A suite of its own, in a folder of its own, with the project's fixtures as its conftest.
CONFTEST = """
import tests.conftest
from tests.conftest import leaves_the_process_as_it_found_it  # noqa: F401

tests.conftest.THREAD_EXIT_SECONDS = 0.2  # the probe thread never ends by itself: no need to wait for it
"""
TESTS = """
import os
import threading


def test_leaks_a_variable():
    os.environ["TOLLGATE_LEAK_PROBE"] = "left behind"


def test_changes_and_restores(monkeypatch):
    monkeypatch.setenv("TOLLGATE_LEAK_PROBE", "put back by monkeypatch")


def test_leaves_a_thread():
    stop = threading.Event()
    threading.Thread(target=stop.wait, name="probe-thread", daemon=False).start()
    globals()["STOP"] = stop  # the next test ends it, so that the probe suite itself can exit


def test_ends_the_thread_it_was_left():
    globals()["STOP"].set()
"""


def run_suite(folder: Path) -> subprocess.CompletedProcess[str]:
    (folder / "conftest.py").write_text(CONFTEST)
    (folder / "test_probe.py").write_text(textwrap.dedent(TESTS))
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:xdist",
            "-q",
            "-rA",
            str(folder),
        ],
        cwd=folder,
        env={"PATH": "/usr/bin:/bin", "HOME": str(folder), "PYTHONPATH": str(REPO_ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_the_isolation_check_fails_tests_that_leave_state_and_passes_those_that_restore_it(tmp_path):
    result = run_suite(tmp_path)
    out = result.stdout

    assert result.returncode == 1, out
    assert "ERROR test_probe.py::test_leaks_a_variable" in out
    assert "did not restore them: ['TOLLGATE_LEAK_PROBE']" in out
    assert "PASSED test_probe.py::test_changes_and_restores" in out
    assert "ERROR test_probe.py::test_leaves_a_thread" in out
    assert "left these non-daemon threads running: ['probe-thread']" in out
    assert "PASSED test_probe.py::test_ends_the_thread_it_was_left" in out
