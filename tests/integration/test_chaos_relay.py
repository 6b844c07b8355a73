"""The relay as a process of its own (the chaos run's relay): armed, it dies between publishing a batch and
marking it; the next relay publishes the batch again once the claim lapses, and the event is taken in once."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys

import boto3
import psycopg
import pytest

from tests.support import invoice_request
from tollgate.core.clock import SystemClock
from tollgate.events import EXTRACTION_REQUESTED
from tollgate.ingress.consumer import IngressDeps, ingest_once
from tollgate.outbox.relay import RelayDeps, relay_outbox
from tollgate.outbox.sqs import SqsFifoPublisher
from tollgate_dev.local.aws import create_job_type_queues, queue_urls

pytestmark = pytest.mark.integration


def outbox(url: str) -> tuple[object, int, bool]:
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT published_at, publish_attempts, claimed_until > now() FROM outbox_events"
        ).fetchone()
    assert row is not None
    return row[0], row[1], row[2]


def test_a_relay_killed_after_publishing_sends_again_and_the_event_is_taken_in_once(
    tenant, system_db, clean_db, local_aws
):
    tenant.client.submit(invoice_request(), "crash-relay")
    all_queues = create_job_type_queues(f"relay-crash-{secrets.token_hex(4)}")
    queues = all_queues["invoice_extraction"]
    env = {
        **os.environ,
        "DATABASE_URL": clean_db,
        "JOB_QUEUE_URLS": json.dumps(queue_urls(all_queues)),
        "RELAY_SWEEP_SECONDS": "0.05",
        "CRASHPOINTS": json.dumps(["relay_after_publish"]),
    }

    relay = subprocess.run(
        [sys.executable, "-m", "tollgate_dev.chaos.relay"],
        env=env,
        capture_output=True,
        timeout=60,
        check=False,
    )

    assert relay.returncode == 137, relay.stdout[-2000:] + relay.stderr[-2000:]
    published_at, attempts, still_claimed = outbox(clean_db)
    assert (published_at, attempts, still_claimed) == (None, 1, True), "sent, never marked"

    with psycopg.connect(clean_db) as conn:  # the dead relay's claim runs out
        conn.execute("UPDATE outbox_events SET claimed_until = now()")
    sqs = boto3.client("sqs")
    relay_outbox(
        RelayDeps(system_db, SystemClock(), routes={EXTRACTION_REQUESTED: SqsFifoPublisher(sqs, queues.url)})
    )
    taken = ingest_once(IngressDeps(system_db, sqs, queues.url, SystemClock(), wait_seconds=0))
    again = ingest_once(IngressDeps(system_db, sqs, queues.url, SystemClock(), wait_seconds=0))

    published_at, attempts, _ = outbox(clean_db)
    assert published_at is not None and attempts == 2
    assert taken.received + again.received >= 1
    with psycopg.connect(clean_db) as conn:
        assert conn.execute("SELECT count(*) FROM execution_inbox").fetchone() == (1,)
