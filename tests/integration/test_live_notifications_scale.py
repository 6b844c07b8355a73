"""Live notifications at the volume the issue names, on the local system (real PostgreSQL, moto, sockets on
127.0.0.1): 1,000 jobs finishing while 50 clients listen; every client gets every one of those state changes,
once, in order, within the clients' time limit, and the time it took is printed. The limit is a bound for a
loaded machine; how long delivery takes is a figure of bench.live_notifications, not an assertion here. A file
of its own, so that no other local system runs in its process meanwhile; the clients run in a process of
their own (tollgate_dev.live_load)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.integration.test_live_notifications import (
    WAIT_SECONDS,
    _start,
    events_of,
    latest_seq,
    new_tenant,
    submit,
)
from tollgate_dev.local.runtime import LocalStack

pytestmark = pytest.mark.integration

# Every message reaches every client within this, or the clients report a time-out: quiet, the whole delivery
# took 35 s; beside the rest of the suite on a loaded 2-core machine, up to 240 s.
DELIVERY_LIMIT_SECONDS = 600.0


@pytest.fixture(scope="module")
def idle(fresh_database, local_aws, tmp_path_factory) -> Iterator[LocalStack]:
    """No workers: jobs end by their tenant's cancel, so the test measures delivery, not execution."""
    stack = _start(
        fresh_database, local_aws, tmp_path_factory.mktemp("scale"), workers=0, max_connections_per_tenant=60
    )
    yield stack
    stack.stop()


def test_a_thousand_jobs_finishing_while_fifty_clients_listen_reach_every_client(idle):
    """The clients run in a process of their own (tollgate_dev.live_load, one asyncio loop), as clients do:
    the local system's server and notifier are not slowed by fifty client threads in their interpreter."""
    jobs_count, clients = 1_000, 50
    acme = new_tenant(idle, "acme")
    assert idle.system_db is not None
    # The jobs wait READY (no workers) before the clients connect; then all of them finish while the clients
    # listen, each by its tenant's cancel: a thousand state changes for each of fifty clients.
    jobs = submit(acme, jobs_count, seed=51)
    before = latest_seq(idle.system_db, acme.tenant_id)
    listening = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tollgate_dev.live_load",
            idle.websocket_url,
            "--clients",
            str(clients),
            "--expect",
            str(jobs_count),
            "--timeout",
            str(DELIVERY_LIMIT_SECONDS),
        ],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "TOLLGATE_API_KEY": acme.api_key},
    )
    try:
        assert listening.stdout is not None
        assert listening.stdout.readline().strip() == "ready", "the clients were never all subscribed"
        started = time.monotonic()

        def cancel(job_id: str) -> None:
            answer = acme.client.request("POST", f"/extraction-jobs/{job_id}/cancel")
            assert answer.status in {200, 202}, answer.json

        with ThreadPoolExecutor(max_workers=4) as pool:
            list(pool.map(cancel, jobs))
        finished = time.monotonic()
        out, _ = listening.communicate(timeout=DELIVERY_LIMIT_SECONDS + WAIT_SECONDS)
        delivered = time.monotonic()
    finally:
        if listening.poll() is None:
            listening.kill()
            listening.wait()

    expected = events_of(idle.system_db, acme.tenant_id, after=before)
    assert len(expected) == jobs_count and {state for _, _, state, _ in expected} == {"CANCELLED"}
    results = json.loads(out)["clients"]
    assert [r.get("error") for r in results if "error" in r] == []
    assert all(r["in_order"] and r["last"] == expected[-1][0] for r in results), (
        "gap-free, in order, to the end"
    )
    messages = sum(r["count"] for r in results)
    print(
        f"\nlive notifications: {jobs_count} jobs, {clients} clients, {len(expected)} state changes, "
        f"{messages} messages delivered; the jobs finished {finished - started:.1f} s after the first cancel, "
        f"the last message reached every client {delivered - finished:.1f} s later "
        f"({delivered - started:.1f} s in all)"
    )
    assert messages == clients * len(expected)
