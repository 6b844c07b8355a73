"""Issue 31 on the whole local system: a tenant tries Tollgate from the shell. `tollgate submit` shows the
API's problem for a bad file and exits 2; `submit --wait` follows an invoice to SUCCEEDED and prints its
result; `tollgate jobs show` prints the job's timeline (state changes, the attempt's model, tokens and cost,
the webhook delivery and its attempt), the same through the operations function; `tollgate jobs watch` prints
a job's changes and ends when it is finished, resumes after a dropped connection, and stops cleanly on
Ctrl-C. Every command runs as another process on this machine would run it."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from tollgate.client.watch import JobWatch
from tollgate.core.clock import new_id
from tollgate.settings import REPO_ROOT
from tollgate.tenants.keys import create_tenant
from tollgate.tenants.suppliers import add_supplier
from tollgate_dev.local.client import ApiClient
from tollgate_dev.local.runtime import LocalStack
from tollgate_dev.simulator.server import Latency, SimulatorConfig

pytestmark = pytest.mark.e2e

PATIENCE_SECONDS = 120  # a bound for a loaded 2-core machine: a passing run waits far less
INVOICE = REPO_ROOT / "examples" / "invoice-2026-001.json"
# The supplier examples/invoice-2026-001.json comes from, as README's walk-through adds it.
SUPPLIER, IBAN = "Nordwind Logistik GmbH", "DE89370400440532013000"
# The local operations function's credentials. botocore takes the region from AWS_DEFAULT_REGION: with
# AWS_REGION alone (as `local up` prints it) the CLI says there is no region.
LOCAL_OPERATOR = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "eu-west-1",
}


@pytest.fixture(scope="module")
def stack(fresh_database, tmp_path_factory) -> Iterator[LocalStack]:
    """One local system for the module's stories (each uses a tenant of its own), with a provider that
    answers at once and no quotas."""
    from tollgate.db.migrations import apply_migrations

    url = fresh_database()
    apply_migrations(url, REPO_ROOT / "migrations")
    local = LocalStack(
        port=0,
        data_dir=tmp_path_factory.mktemp("tenant-cli"),
        database_url=url,
        simulator_config=SimulatorConfig(
            requests_per_minute=None, tokens_per_minute=None, latency=Latency(0.0)
        ),
    )
    try:
        local.start()
        yield local
    finally:
        local.stop()
    assert local.undeclared_calls == []


def tenant(stack: LocalStack, name: str) -> tuple[str, str]:
    """A tenant that knows the example invoice's supplier: (tenant id, API key)."""
    assert stack.system_db is not None
    created = create_tenant(stack.system_db, f"{name}-{new_id().hex[:6]}", new_id)
    add_supplier(stack.system_db, created.tenant_id, SUPPLIER, IBAN, new_id)
    return str(created.tenant_id), created.api_key


def environment(stack: LocalStack, api_key: str, **extra: str) -> dict[str, str]:
    """What a tenant's shell holds: the API, the feed and the key; nothing about AWS or the database."""
    kept = {
        k: v
        for k, v in os.environ.items()
        if k not in {"JOB_QUEUE_URLS", "JOB_DLQ_URLS", "DATABASE_URL", "MOTO_PORT", "TOLLGATE_STAGE"}
        and not k.startswith(("AWS_", "TOLLGATE_"))
    }
    return {
        **kept,
        "COLUMNS": "200",
        "PYTHONUNBUFFERED": "1",
        "TOLLGATE_API_URL": stack.api_url,
        "TOLLGATE_FEED_URL": stack.websocket_url,
        "TOLLGATE_API_KEY": api_key,
        **extra,
    }


def tollgate(stack: LocalStack, api_key: str, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tollgate.cli.main", *args],
        env=environment(stack, api_key, **extra),
        capture_output=True,
        text=True,
        timeout=PATIENCE_SECONDS,
        check=False,
    )


def jobs_of(stack: LocalStack, tenant_id: str) -> int:
    with psycopg.connect(stack.database_url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM extraction_jobs WHERE tenant_id = %s", (tenant_id,)
        ).fetchone()
    assert row is not None
    return int(row[0])


def events_of(stack: LocalStack, job_id: str) -> list[tuple[int, str, int]]:
    """The job's changes as PostgreSQL holds them: (sequence, state, state_version)."""
    with psycopg.connect(stack.database_url) as conn:
        rows = conn.execute(
            "SELECT seq, state, state_version FROM job_state_events WHERE job_id = %s ORDER BY seq", (job_id,)
        ).fetchall()
    return [(r[0], r[1], r[2]) for r in rows]


def delivered(stack: LocalStack, job_id: str) -> bool:
    with psycopg.connect(stack.database_url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM webhook_deliveries d JOIN webhook_delivery_attempts a USING (delivery_id)"
            " WHERE d.job_id = %s AND d.state = 'DELIVERED'",
            (job_id,),
        ).fetchone()
    return row is not None and row[0] > 0


def submitted_job(output: str) -> str:
    line = next(line for line in output.splitlines() if line.startswith("job "))
    return line.split()[1]


def test_a_bad_file_gets_the_apis_problem_printed_and_exit_code_2(stack, tmp_path):
    tenant_id, key = tenant(stack, "bad-file")
    bad = tmp_path / "bad.json"
    # A document with no pages, a priority past 9 and an unknown option: the API names each one.
    bad.write_text(json.dumps({"document": {"pages": []}, "priority": 12, "options": {"colour": "red"}}))

    refused = tollgate(stack, key, "submit", str(bad), "--type", "invoice_extraction")

    assert refused.returncode == 2, refused.stderr
    assert "Traceback" not in refused.stderr
    assert "HTTP 422" in refused.stderr, "the problem's title and status"
    assert "body.priority" in refused.stderr and "less than or equal to 9" in refused.stderr, (
        "each error's location and message"
    )
    assert "body.document.InlineDocument.pages: List should have at least 1 item" in refused.stderr
    assert refused.stdout == "", "nothing was accepted, so nothing to print"
    assert jobs_of(stack, tenant_id) == 0

    not_json = tmp_path / "not.json"
    not_json.write_text("pages: one")
    unreadable = tollgate(stack, key, "submit", str(not_json))
    assert unreadable.returncode == 2 and "not JSON" in unreadable.stderr
    assert "Traceback" not in unreadable.stderr

    no_api = tollgate(stack, key, "submit", str(INVOICE), "--api", "http://127.0.0.1:9")
    assert no_api.returncode == 1 and "cannot reach the API" in no_api.stderr
    assert "Traceback" not in no_api.stderr


def test_submit_wait_follows_the_invoice_to_succeeded_and_jobs_show_prints_its_timeline(stack):
    _, key = tenant(stack, "acme")
    client = ApiClient(stack.api_url, key)
    assert stack.erp is not None
    registered = client.request("POST", "/webhook-endpoints", json_body={"url": f"{stack.erp.url}/acme"})
    assert registered.status == 201, registered.json

    done = tollgate(stack, key, "submit", str(INVOICE), "--type", "invoice_extraction", "--wait")

    assert done.returncode == 0, done.stdout + done.stderr
    job_id = submitted_job(done.stdout)
    assert f"{stack.api_url}/extraction-jobs/{job_id}" in done.stdout, "the Location"
    states = [line.split()[1] for line in done.stdout.splitlines() if line.startswith("state ")]
    assert states[0] == "READY" and states[-1] == "SUCCEEDED", done.stdout
    assert '"total": "119.00"' in done.stdout, "the result"

    # The same file as a bare document, wrapped by --type; JSON for a script.
    document = json.loads(INVOICE.read_text())["document"]
    as_json = subprocess.run(
        [sys.executable, "-m", "tollgate.cli.main", "submit", "/dev/stdin", "--wait", "--output", "json"],
        input=json.dumps(document),
        env=environment(stack, key),
        capture_output=True,
        text=True,
        timeout=PATIENCE_SECONDS,
        check=False,
    )
    assert as_json.returncode == 0, as_json.stderr
    answer = json.loads(as_json.stdout)
    assert answer["job"]["state"] == "SUCCEEDED" and answer["result"]["result"]["total"] == "119.00"

    # The webhook reached the demo ERP; then support looks at the job through the local system's database.
    assert stack.wait_for(lambda: delivered(stack, job_id), timeout=PATIENCE_SECONDS), "no delivery"
    shown = tollgate(stack, key, "jobs", "show", job_id, "--data-dir", str(stack.data_dir))

    assert shown.returncode == 0, shown.stderr
    timeline = shown.stdout[shown.stdout.index("\ntimeline") :].splitlines()[2:]
    kinds = [line.split()[2] for line in timeline]
    assert kinds == ["state", "state", "attempt", "state", "webhook", "webhook"], shown.stdout
    assert [line.split()[3] for line in timeline if line.split()[2] == "state"] == [
        "READY",
        "RUNNING",
        "SUCCEEDED",
    ]
    (attempt,) = (line for line in timeline if line.split()[2] == "attempt")
    assert "#1 ok at " in attempt and ": model " in attempt and " tokens " in attempt, attempt
    assert " in / " in attempt and " USD" in attempt, attempt
    webhook = [line for line in timeline if line.split()[2] == "webhook"]
    assert "extraction.completed.v1 to " + f"{stack.erp.url}/acme" in webhook[0], shown.stdout
    assert "DELIVERED" in webhook[0]
    assert "attempt 1: HTTP 200" in webhook[1]

    as_detail = tollgate(
        stack, key, "jobs", "show", job_id, "--output", "json", "--data-dir", str(stack.data_dir)
    )
    detail = json.loads(as_detail.stdout)["timeline"]
    assert [c["state"] for c in detail["state_changes"]] == ["READY", "RUNNING", "SUCCEEDED"]
    assert detail["missing_versions"] == [] and detail["escalations"] == []
    (delivery,) = detail["deliveries"]
    assert delivery["state"] == "DELIVERED" and [a["status"] for a in delivery["attempts"]] == [200]

    # Through the operations function, as `--stage` runs it: the same page.
    assert stack.ops is not None
    remote = tollgate(stack, key, "--ops-url", stack.ops.url, "jobs", "show", job_id, **LOCAL_OPERATOR)
    assert remote.returncode == 0, remote.stderr
    assert remote.stdout == shown.stdout


def test_jobs_watch_prints_a_jobs_changes_and_ends_when_it_is_finished(stack):
    _, key = tenant(stack, "watcher")
    client = ApiClient(stack.api_url, key)
    body = json.loads(INVOICE.read_text())
    job_id = client.submit(body, "watch-1").json["job_id"]

    # From the tenant's first change on: the replay, then live ones if it is still running, then the end.
    watched = tollgate(stack, key, "jobs", "watch", job_id, "--cursor", "0")

    assert watched.returncode == 0, watched.stderr
    printed = [
        (int(line.split()[0][1:]), line.split()[4], int(line.split()[6].rstrip(")")))
        for line in watched.stdout.splitlines()
    ]
    assert printed == events_of(stack, job_id), watched.stdout
    assert printed[-1][1] == "SUCCEEDED"

    # A job already finished: its state now, and done.
    again = tollgate(stack, key, "jobs", "watch", job_id)
    assert again.returncode == 0, again.stderr
    (line,) = again.stdout.splitlines()
    assert line.startswith("now ") and job_id in line and "SUCCEEDED" in line

    unknown = tollgate(stack, key, "jobs", "watch", str(new_id()))
    assert unknown.returncode == 2 and "HTTP 404" in unknown.stderr


def test_a_watch_resumes_after_a_dropped_connection_and_misses_nothing(stack):
    tenant_id, key = tenant(stack, "dropper")
    client = ApiClient(stack.api_url, key)
    body = json.loads(INVOICE.read_text())
    seen: list[dict[str, Any]] = []
    notes: list[str] = []
    arrived = threading.Condition()

    def collect(message: dict[str, Any]) -> None:
        with arrived:
            seen.append(message)
            arrived.notify_all()

    def has(job_id: str, state: str) -> bool:
        return any(m["job_id"] == job_id and m["state"] == state for m in seen)

    watch = JobWatch(stack.websocket_url, key, collect, cursor=0, reconnect_wait=0.05, on_note=notes.append)
    runner = threading.Thread(target=watch.run, name="watch")
    runner.start()
    try:
        first = client.submit(body, "drop-1").json["job_id"]
        with arrived:
            assert arrived.wait_for(lambda: has(first, "SUCCEEDED"), PATIENCE_SECONDS)
        assert watch.connection is not None
        watch.connection.socket.shutdown(socket.SHUT_RDWR)  # the network drops under the watch
        second = client.submit(body, "drop-2").json["job_id"]
        with arrived:
            assert arrived.wait_for(lambda: has(second, "SUCCEEDED"), PATIENCE_SECONDS)
    finally:
        watch.close()
        runner.join(PATIENCE_SECONDS)
    assert not runner.is_alive()

    assert any("connection lost" in note for note in notes)
    got = [(m["sequence"], m["job_id"], m["state"]) for m in seen]
    expected = sorted(
        [(s, first, state) for s, state, _ in events_of(stack, first)]
        + [(s, second, state) for s, state, _ in events_of(stack, second)]
    )
    assert got == expected, "every change once, in order, across the drop"
    assert jobs_of(stack, tenant_id) == 2


def test_ctrl_c_stops_a_watch_cleanly_with_the_cursor_to_resume_from(stack):
    _, key = tenant(stack, "ctrl-c")
    ApiClient(stack.api_url, key).submit(json.loads(INVOICE.read_text()), "ctrl-c-1")
    watching = subprocess.Popen(
        [sys.executable, "-m", "tollgate.cli.main", "jobs", "watch", "--cursor", "0"],
        env=environment(stack, key),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert watching.stdout is not None
        first = watching.stdout.readline()  # the tenant's first change: the watch is connected
        assert first.startswith("#1 "), first
        watching.send_signal(signal.SIGINT)
        _, err = watching.communicate(timeout=PATIENCE_SECONDS)
    finally:
        if watching.poll() is None:
            watching.kill()
            watching.communicate()
    assert watching.returncode == 130, err
    assert "Traceback" not in err
    assert "tollgate jobs watch --cursor " in err
