"""Crash points armed by tokens: the next process to meet the point takes a token and dies as a kill -9
would; each token is taken by exactly one of the processes racing for it, and a point without a token is
inert."""

import subprocess
import sys

from tollgate_dev.faults import AFTER_PROVIDER_RESPONSE, BEFORE_SQS_DELETE, CRASH_STATUS, TAKEN, token_name

MEETS_THE_POINT = """
import sys
from pathlib import Path
from tollgate.core import checkpoints
from tollgate_dev import faults
faults.arm(frozenset(), Path(sys.argv[1]))
checkpoints.reached(sys.argv[2])
"""


def meet(tokens, point: str, processes: int) -> list[subprocess.Popen[bytes]]:
    command = [sys.executable, "-c", MEETS_THE_POINT, str(tokens), point]
    started = [subprocess.Popen(command) for _ in range(processes)]
    for process in started:
        process.wait(timeout=60)
    return started


def test_of_processes_racing_for_one_token_exactly_one_dies_and_its_name_is_on_the_token(tmp_path):
    (tmp_path / TAKEN).mkdir()
    token = token_name(BEFORE_SQS_DELETE, 1)
    (tmp_path / token).touch()

    processes = meet(tmp_path, BEFORE_SQS_DELETE, 4)

    died = [p for p in processes if p.returncode == CRASH_STATUS]
    assert len(died) == 1
    assert all(p.returncode == 0 for p in processes if p not in died)
    assert [f.name for f in (tmp_path / TAKEN).iterdir()] == [f"{token}@{died[0].pid}"]
    assert not (tmp_path / token).exists()


def test_a_token_for_another_point_or_no_folder_leaves_the_process_alive(tmp_path):
    (tmp_path / TAKEN).mkdir()
    (tmp_path / token_name(AFTER_PROVIDER_RESPONSE, 1)).touch()

    [other_point] = meet(tmp_path, BEFORE_SQS_DELETE, 1)
    [no_folder] = meet(tmp_path / "removed", BEFORE_SQS_DELETE, 1)

    assert (other_point.returncode, no_folder.returncode) == (0, 0)
    assert (tmp_path / token_name(AFTER_PROVIDER_RESPONSE, 1)).exists()
