"""`tollgate local chaos`, short: every kind of fault injected while 40 invoices flow, then the ledger check
holds, as a user runs it (in a subprocess, on its own database of DATABASE_URL's server or the embedded one).
"""

import os
import re
import subprocess
import sys

import pytest

pytestmark = pytest.mark.e2e

FAULTS = (
    "worker killed right after the provider answered",
    "worker killed between the inbox commit and the SQS delete",
    "relay killed between publishing a batch and marking it",
    "worker killed mid-download of a provider batch",
    "worker killed between creating a batch and recording it",
    "AWS endpoint (moto) unreachable",
    "PostgreSQL restarted",
    "provider 429 storm",
    "provider timeouts",
    "malformed JSON from the model",
    "wrong-schema output from the model",
    "provider batch lines failed with a 500",
    "ERP webhook receiver down",
)


def test_a_short_chaos_run_injects_every_fault_and_keeps_every_promise(fresh_database, tmp_path):
    env = {**os.environ, "DATABASE_URL": fresh_database(), "COLUMNS": "200"}
    command = [sys.executable, "-m", "tollgate.cli.main", "local", "chaos", "--seed", "7", "--jobs", "40"]
    # The limit only bounds a run that does not settle, or a fault whose event never comes; a healthy run
    # ends in about 45 s on two cores, quiet or busy.
    command += ["--time-limit", "240", "--data-dir", str(tmp_path)]

    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=400, check=False)

    output = result.stdout + result.stderr[-3000:]
    assert result.returncode == 0, output[-6000:]
    assert "all invariants held" in result.stdout
    assert "BROKEN" not in result.stdout
    for fault in FAULTS:
        [row] = [line for line in result.stdout.splitlines() if fault in line and line.startswith("│")]
        injected = re.split(r"\s*│\s*", row)[5]
        assert int(injected) >= 1, row
    assert re.search(r"jobs: 40\b", result.stdout)
