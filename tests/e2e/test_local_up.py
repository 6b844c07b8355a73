"""`tollgate local up` in the foreground: serves the API, and Ctrl-C stops everything it started, also when it
comes while the system is still starting. A port it cannot have is one line naming it, before anything starts
(or, taken while it starts, after stopping what had started), never a traceback."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tollgate_dev.local.client import ApiClient

pytestmark = pytest.mark.e2e

# Generous bounds for a loaded 2-core machine; a healthy start takes seconds and a stop about ten.
START_SECONDS = 180
STOP_SECONDS = 120


class Output:
    """Reads the child's output to its end on a thread of its own, so the child never blocks on a full pipe,
    and lets the test wait for a line that matches."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.lines: list[str] = []
        self._changed = threading.Condition()
        self._ended = False
        self._thread = threading.Thread(target=self._read, args=(process,), daemon=True)
        self._thread.start()

    def _read(self, process: subprocess.Popen[str]) -> None:
        assert process.stdout is not None
        for line in process.stdout:
            with self._changed:
                self.lines.append(line)
                self._changed.notify_all()
        with self._changed:
            self._ended = True
            self._changed.notify_all()

    def wait_for(self, pattern: str, timeout: float) -> str:
        def found() -> str | None:
            return next((line for line in self.lines if re.search(pattern, line)), None)

        with self._changed:
            self._changed.wait_for(lambda: found() is not None or self._ended, timeout)
            line = found()
        assert line is not None, f"no line matching {pattern!r} within {timeout}s; output:\n{self.text()}"
        return line

    def text(self) -> str:
        return "".join(self.lines[-60:])

    def close(self) -> None:
        self._thread.join(STOP_SECONDS)


@pytest.fixture
def local_up(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], Output]]:
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    process = subprocess.Popen(
        [
            *(sys.executable, "-m", "tollgate.cli.main", "local", "up"),
            *("--port", "0", "--erp-port", "0", "--ops-port", "0", "--ws-port", "0"),
            *("--data-dir", str(tmp_path)),
        ],
        env={**env, "COLUMNS": "200"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    output = Output(process)
    try:
        yield process, output
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        output.close()


def embedded_servers(data_dir: Path) -> list[psutil.Process]:
    """The PostgreSQL processes serving a data folder under ``data_dir`` (not `local up` itself, whose
    command line names the folder too)."""
    found = []
    for process in psutil.process_iter(["name", "cmdline"]):
        try:
            if process.info["name"] == "postgres" and str(data_dir) in " ".join(
                process.info["cmdline"] or []
            ):
                found.append(process)
        except psutil.Error:
            continue
    return found


def alive(processes: list[psutil.Process]) -> list[int]:
    left = []
    for process in processes:
        try:
            if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                left.append(process.pid)
        except psutil.NoSuchProcess:
            continue
    return left


def test_local_up_on_embedded_postgres_serves_and_stops_cleanly_on_ctrl_c(local_up, tmp_path):
    process, output = local_up
    line = output.wait_for(r"API at http://127\.0\.0\.1:\d+", timeout=START_SECONDS)
    url = re.search(r"http://127\.0\.0\.1:\d+", line).group(0)
    line = output.wait_for(r"Demo ERP receiver at http://127\.0\.0\.1:\d+", timeout=30)
    erp_url = re.search(r"http://127\.0\.0\.1:\d+", line).group(0)
    line = output.wait_for(r"Operations function at http://127\.0\.0\.1:\d+/", timeout=30)
    ops_url = re.search(r"http://127\.0\.0\.1:\d+/", line).group(0)
    started = psutil.Process(process.pid).children(recursive=True)
    embedded = embedded_servers(tmp_path)
    assert embedded, "the embedded PostgreSQL server should have been running"

    response = ApiClient(url).request("GET", "/openapi.json", auth=False)
    assert response.status == 200
    unsigned = ApiClient(erp_url).request("POST", "/acme", json_body={}, auth=False)
    assert (unsigned.status, unsigned.json) == (400, {"error": "missing_headers"})
    unsigned_command = ApiClient(ops_url).request("POST", "/", json_body={"command": "keys.list"}, auth=False)
    assert unsigned_command.status == 403, "the operations URL runs nothing unsigned"

    process.send_signal(signal.SIGINT)
    try:
        code = process.wait(timeout=STOP_SECONDS)
    except subprocess.TimeoutExpired:
        pytest.fail(f"local up still running {STOP_SECONDS}s after Ctrl-C; output:\n{output.text()}")
    assert code == 0, output.text()
    assert alive(embedded) == [], "Ctrl-C left the embedded PostgreSQL server running"
    assert alive(started) == [], "Ctrl-C left processes that local up started"


def test_ctrl_c_while_local_up_is_still_starting_stops_what_had_started(local_up, tmp_path):
    process, output = local_up
    # The embedded server starts first, long before the API is up: interrupt the start right there.
    deadline = time.monotonic() + START_SECONDS
    while not (embedded := embedded_servers(tmp_path)):
        assert process.poll() is None, output.text()
        assert time.monotonic() < deadline, "the embedded PostgreSQL server never started"
        time.sleep(0.05)  # polling the process table: there is no event to wait on

    process.send_signal(signal.SIGINT)
    try:
        code = process.wait(timeout=STOP_SECONDS)
    except subprocess.TimeoutExpired:
        pytest.fail(f"local up still running {STOP_SECONDS}s after Ctrl-C; output:\n{output.text()}")
    assert code in (0, 130), output.text()
    assert "Tollgate is up" not in output.text()
    # The server may have been stopped by the process itself or, when the signal came before its handle
    # existed, at interpreter exit; either way nothing of this run is left.
    assert alive(embedded) == [], "Ctrl-C during start left the embedded PostgreSQL server running"


def listening_socket(port: int = 0) -> socket.socket:
    """Something else listening on 127.0.0.1 (on any free port by default)."""
    taken = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    taken.bind(("127.0.0.1", port))
    taken.listen()
    return taken


def free_ports(count: int) -> list[int]:
    """Ports free just now (each held until all are picked, so they differ)."""
    held = [listening_socket() for _ in range(count)]
    ports = [s.getsockname()[1] for s in held]
    for s in held:
        s.close()
    return ports


@pytest.mark.parametrize(
    ("option", "envvar"), [("--port", None), ("--ws-port", "TOLLGATE_WS_PORT")], ids=["option", "envvar"]
)
def test_a_taken_port_is_one_line_naming_it_and_nothing_starts(tmp_path, option, envvar):
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    ports = dict(zip(("--port", "--erp-port", "--ops-port", "--ws-port"), free_ports(4), strict=True))
    data_dir = tmp_path / "data"
    with listening_socket() as taken:
        busy = taken.getsockname()[1]
        if envvar:  # given the way a walkthrough moves a port, in the environment
            del ports[option]
            env[envvar] = str(busy)
        else:
            ports[option] = busy
        command = [sys.executable, "-m", "tollgate.cli.main", "local", "up", "--data-dir", str(data_dir)]
        started = time.monotonic()
        result = subprocess.run(
            [*command, *(str(part) for pair in ports.items() for part in pair)],
            env={**env, "COLUMNS": "80"},
            capture_output=True,
            text=True,
            timeout=START_SECONDS,
            check=False,
        )
        took = time.monotonic() - started

    moved_by = envvar or f"TOLLGATE_{option.removeprefix('--').replace('-', '_').upper()}"
    expected = f"port {busy} ({option}) is in use on 127.0.0.1; choose another with {option} or {moved_by}"
    assert (result.returncode, result.stdout.splitlines(), result.stderr) == (2, [expected], "")
    # Nothing started: no embedded PostgreSQL, not even its folder. Before the check, PostgreSQL and the
    # migrations took half a minute on their own; now only the command's imports come first.
    assert not data_dir.exists()
    assert embedded_servers(tmp_path) == []
    assert took < 30, f"took {took:.1f}s to say a port is taken"


def test_a_port_taken_while_local_up_starts_is_one_line_after_stopping_what_had_started(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    api, erp, ops, ws = free_ports(4)
    process = subprocess.Popen(
        [
            *(sys.executable, "-m", "tollgate.cli.main", "local", "up", "--data-dir", str(tmp_path)),
            *("--port", str(api), "--erp-port", str(erp), "--ops-port", str(ops), "--ws-port", str(ws)),
        ],
        env={**env, "COLUMNS": "80"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    output = Output(process)
    try:
        # The ports were free when checked; the WebSocket server binds last, long after PostgreSQL starts
        # and the migrations run: take its port right when PostgreSQL is up.
        deadline = time.monotonic() + START_SECONDS
        while not (embedded := embedded_servers(tmp_path)):
            assert process.poll() is None, output.text()
            assert time.monotonic() < deadline, "the embedded PostgreSQL server never started"
            time.sleep(0.05)  # polling the process table: there is no event to wait on
        with listening_socket(ws):
            code = process.wait(timeout=START_SECONDS + STOP_SECONDS)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        output.close()

    lines = [line.rstrip("\n") for line in output.lines]
    assert code == 2, output.text()
    assert lines[-1] == (
        f"port {ws} (--ws-port) is in use on 127.0.0.1 (taken while Tollgate was starting; what had started "
        "is stopped); choose another with --ws-port or TOLLGATE_WS_PORT"
    ), output.text()
    assert not any("Traceback" in line for line in lines), output.text()
    assert alive(embedded) == [], "the failed start left the embedded PostgreSQL server running"
