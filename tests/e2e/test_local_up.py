"""`tollgate local up` in the foreground: serves the API, and Ctrl-C stops everything it started."""

import os
import re
import signal
import subprocess
import sys
import threading

import psutil
import pytest

from tollgate.local.client import ApiClient

pytestmark = pytest.mark.e2e


def _wait_for_line(process: subprocess.Popen, pattern: str, timeout: float) -> str:
    """Reads stdout lines until one matches; a reader thread keeps the wait bounded without sleeping."""
    found: list[str] = []
    done = threading.Event()

    def read() -> None:
        for line in process.stdout:
            if re.search(pattern, line):
                found.append(line)
                done.set()
                return
        done.set()

    threading.Thread(target=read, daemon=True).start()
    assert done.wait(timeout), f"no line matching {pattern!r} within {timeout}s"
    assert found, "the process ended before printing the expected line"
    return found[0]


def test_local_up_on_embedded_postgres_serves_and_stops_cleanly_on_ctrl_c(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    process = subprocess.Popen(
        [
            *(sys.executable, "-m", "tollgate.cli", "local", "up"),
            *("--port", "0", "--erp-port", "0", "--data-dir", str(tmp_path)),
        ],
        env={**env, "COLUMNS": "200"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        line = _wait_for_line(process, r"API at http://127\.0\.0\.1:\d+", timeout=120)
        url = re.search(r"http://127\.0\.0\.1:\d+", line).group(0)
        line = _wait_for_line(process, r"Demo ERP receiver at http://127\.0\.0\.1:\d+", timeout=10)
        erp_url = re.search(r"http://127\.0\.0\.1:\d+", line).group(0)
        started = {p.pid for p in psutil.Process(process.pid).children(recursive=True)}
        embedded = [
            p for p in psutil.process_iter(["cmdline"]) if str(tmp_path) in " ".join(p.info["cmdline"] or [])
        ]

        response = ApiClient(url).request("GET", "/openapi.json", auth=False)
        assert response.status == 200
        unsigned = ApiClient(erp_url).request("POST", "/acme", json_body={}, auth=False)
        assert (unsigned.status, unsigned.json) == (400, {"error": "missing_headers"})

        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=60) == 0
    finally:
        if process.poll() is None:
            process.kill()
    assert embedded, "the embedded PostgreSQL server should have been running"
    still_running = [p.pid for p in embedded if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert still_running == [], "Ctrl-C left the embedded PostgreSQL server running"
    assert not [pid for pid in started if psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie"]
