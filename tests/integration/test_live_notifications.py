"""Live notifications on the local system (issue 19): the WebSocket server on 127.0.0.1, the relay's
notifications queue on moto SQS, the notifier, the use cases, real PostgreSQL, and the README's client
(tollgate_dev.live_feed) on real sockets. Jobs move through the local workers and the simulated provider, or
by a tenant's cancel."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

import psycopg
import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import ClientConnection, connect

from tollgate.core.clock import SystemClock, new_id
from tollgate.core.job_states import FINISHED_STATES
from tollgate.db import Database
from tollgate.tenants.keys import Scope, create_key, create_tenant, revoke_key
from tollgate.tenants.suppliers import add_supplier
from tollgate_dev.live_feed import LiveFeed
from tollgate_dev.local.aws import LocalAws
from tollgate_dev.local.client import ApiClient
from tollgate_dev.local.runtime import LocalStack
from tollgate_dev.samples import CLEAN, SUPPLIERS, generate_invoices, request_body
from tollgate_dev.simulator.server import Latency, SimulatorConfig

pytestmark = pytest.mark.integration

# Bounds on waits for real I/O on a loaded machine: they run out only when a test is failing.
WAIT_SECONDS = 120.0
KEY_CHECK_SECONDS = 2
FINISHED = {state.value for state in FINISHED_STATES}
# A fast provider with no quotas, and budgets that do not hold the workers back: the subject is delivery.
FAST_PROVIDER = SimulatorConfig(requests_per_minute=None, tokens_per_minute=None, latency=Latency(0.0))
WIDE_BUDGET = {
    "provider_requests_per_minute": 100_000,
    "provider_tokens_per_minute": 10**9,
    "provider_max_in_flight": 64,
    "execution_slots": 8,
    "tenant_max_in_flight": 64,
}


def _start(
    fresh_database: Callable[[], str], local_aws: LocalAws, data_dir: Any, workers: int = 2, **overrides: Any
) -> LocalStack:
    from tollgate.db.migrations import apply_migrations
    from tollgate.settings import MIGRATIONS_DIR

    url = fresh_database()
    apply_migrations(url, MIGRATIONS_DIR)
    stack = LocalStack(
        port=0,
        data_dir=data_dir,
        database_url=url,
        aws=local_aws,
        workers=workers,
        simulator_config=FAST_PROVIDER,
        worker_overrides=WIDE_BUDGET,
        notification_overrides={"key_check_seconds": KEY_CHECK_SECONDS, **overrides},
    )
    try:
        return stack.start()
    except BaseException:
        stack.stop()
        raise


@pytest.fixture(scope="module")
def live(fresh_database, local_aws, tmp_path_factory) -> Iterator[LocalStack]:
    """The whole local system, its notifications with the stage's defaults (a cap above the scale test's 50)."""
    stack = _start(fresh_database, local_aws, tmp_path_factory.mktemp("live"), max_connections_per_tenant=60)
    yield stack
    stack.stop()


@pytest.fixture(scope="module")
def narrow(fresh_database, local_aws, tmp_path_factory) -> Iterator[LocalStack]:
    """No workers (jobs wait READY until cancelled), a replay of at most 5 events, 2 connections a tenant."""
    stack = _start(
        fresh_database,
        local_aws,
        tmp_path_factory.mktemp("narrow"),
        workers=0,
        replay_max_events=5,
        max_connections_per_tenant=2,
    )
    yield stack
    stack.stop()


@dataclass
class Tenant:
    tenant_id: UUID
    api_key: str
    client: ApiClient


def new_tenant(stack: LocalStack, name: str) -> Tenant:
    assert stack.system_db is not None
    created = create_tenant(stack.system_db, f"{name}-{new_id().hex[:6]}", new_id)
    for supplier in SUPPLIERS:
        add_supplier(stack.system_db, created.tenant_id, supplier.name, supplier.iban, new_id)
    return Tenant(created.tenant_id, created.api_key, ApiClient(stack.api_url, created.api_key))


def submit(tenant: Tenant, count: int, seed: int = 1, threads: int = 8) -> list[str]:
    """Clean sample invoices (each passes validation: READY, RUNNING, SUCCEEDED); the job ids."""
    invoices = generate_invoices(count, seed=seed, kinds=[CLEAN])

    def one(number: int) -> str:
        answer = tenant.client.submit(request_body(invoices[number]), f"live-{seed}-{number}")
        assert answer.status == 202, answer.json
        return str(answer.json["job_id"])

    with ThreadPoolExecutor(max_workers=threads) as pool:
        return list(pool.map(one, range(count)))


def events_of(db: Database, tenant_id: UUID, after: int = 0) -> list[tuple[int, str, str, int]]:
    """The tenant's event sequence as PostgreSQL holds it: (sequence, job id, state, state_version)."""
    with db.transaction() as conn:
        rows = conn.execute(
            "SELECT seq, job_id, state, state_version FROM job_state_events"
            " WHERE tenant_id = %s AND seq > %s ORDER BY seq",
            (tenant_id, after),
        ).fetchall()
    return [(r["seq"], str(r["job_id"]), r["state"], r["state_version"]) for r in rows]


def latest_seq(db: Database, tenant_id: UUID) -> int:
    with db.transaction() as conn:
        row = conn.execute(
            "SELECT last_seq FROM tenant_event_sequences WHERE tenant_id = %s", (tenant_id,)
        ).fetchone()
    return int(row["last_seq"]) if row else 0


def all_finished(db: Database, job_ids: list[str]) -> Callable[[], bool]:
    def check() -> bool:
        with db.transaction() as conn:
            rows = conn.execute(
                "SELECT state FROM extraction_jobs WHERE job_id = ANY(%s)", ([UUID(j) for j in job_ids],)
            ).fetchall()
        return len(rows) == len(job_ids) and all(r["state"] in FINISHED for r in rows)

    return check


@dataclass
class Recorder:
    """What one client received, every message as it came off the wire, in order."""

    messages: list[dict[str, Any]] = field(default_factory=list)
    changed: threading.Condition = field(default_factory=threading.Condition)
    error: BaseException | None = None

    def add(self, message: dict[str, Any]) -> None:
        with self.changed:
            self.messages.append(message)
            self.changed.notify_all()

    def wait_for(self, predicate: Callable[[list[dict[str, Any]]], bool], what: str) -> None:
        with self.changed:
            if not self.changed.wait_for(
                lambda: self.error is not None or predicate(self.messages), WAIT_SECONDS
            ):
                raise AssertionError(f"{what} (waited {WAIT_SECONDS:.0f} s); got {self.messages[-3:]}")
        if self.error is not None:
            raise AssertionError(f"the client failed: {self.error!r}")

    def changes(self) -> list[tuple[int, str, str, int]]:
        return [
            (m["sequence"], m["job_id"], m["state"], m["state_version"])
            for m in self.messages
            if m["type"] == "job.state_changed"
        ]

    def last_sequence(self) -> int:
        changes = self.changes()
        return changes[-1][0] if changes else 0


class Follower:
    """The README's client in a thread, recording what it yields."""

    def __init__(self, url: str, api_key: str, **options: Any) -> None:
        self.feed = LiveFeed(url, api_key, reconnect_wait=0, **options)
        self.record = Recorder()
        self.connections = 0
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Follower:
        self._thread.start()
        if not self.feed.subscribed.wait(WAIT_SECONDS):
            raise AssertionError("the client was never subscribed")
        return self

    def _run(self) -> None:
        try:
            for message in self.feed:
                self.record.add(message)
        except BaseException as error:
            with self.record.changed:
                self.record.error = error
                self.record.changed.notify_all()

    def stop(self) -> None:
        self.feed.close()
        self._thread.join(WAIT_SECONDS)


@pytest.fixture
def followers() -> Iterator[Callable[..., Follower]]:
    started: list[Follower] = []

    def follow(url: str, api_key: str, **options: Any) -> Follower:
        started.append(Follower(url, api_key, **options).start())
        return started[-1]

    yield follow
    for follower in started:
        follower.stop()


def raw_connect(stack: LocalStack, api_key: str | None) -> connect:
    """A handshake with ``api_key``; use it as ``with raw_connect(...) as connection``, which closes it."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key is not None else {}
    return connect(stack.websocket_url, additional_headers=headers, compression=None, open_timeout=30)


def receive(connection: ClientConnection) -> dict[str, Any]:
    return json.loads(connection.recv(timeout=WAIT_SECONDS))


def assert_in_order(changes: list[tuple[int, str, str, int]]) -> None:
    """Sequence strictly increasing; per job, state_version strictly increasing."""
    sequences = [c[0] for c in changes]
    assert sequences == sorted(set(sequences)), "a sequence number went back or came twice"
    versions: dict[str, int] = {}
    for _, job_id, _, version in changes:
        assert version > versions.get(job_id, 0), f"job {job_id}: state_version {version} after a newer one"
        versions[job_id] = version


def test_a_subscriber_sees_every_state_change_of_its_jobs_in_order_and_none_of_another_tenants(
    live, followers
):
    acme, other = new_tenant(live, "acme"), new_tenant(live, "other")
    watching = followers(live.websocket_url, acme.api_key)

    jobs = submit(acme, 8, seed=11)
    others = submit(other, 8, seed=12)
    assert live.system_db is not None
    assert live.wait_for(all_finished(live.system_db, jobs + others), WAIT_SECONDS)
    latest = latest_seq(live.system_db, acme.tenant_id)
    watching.record.wait_for(lambda _: watching.record.last_sequence() >= latest, "acme's last event")

    got = watching.record.changes()
    assert got == events_of(live.system_db, acme.tenant_id), "exactly the tenant's events, gap-free, in order"
    assert_in_order(got)
    assert {job_id for _, job_id, _, _ in got} == set(jobs), "none of the other tenant's jobs"
    finals = {job_id: state for _, job_id, state, _ in got}
    assert set(finals.values()) <= FINISHED and len(finals) == len(jobs), "every job seen reaching its end"
    assert all(m["type"] == "job.state_changed" for m in watching.record.messages), "no resync, no error"


def test_a_filtered_subscriber_gets_only_its_jobs_and_its_cursor_still_resumes(live, followers):
    acme = new_tenant(live, "acme")
    jobs = submit(acme, 4, seed=13)
    assert live.system_db is not None
    assert live.wait_for(all_finished(live.system_db, jobs), WAIT_SECONDS)
    wanted = jobs[1]

    watching = followers(live.websocket_url, acme.api_key, cursor=0, job_ids=[wanted])
    expected = [e for e in events_of(live.system_db, acme.tenant_id) if e[1] == wanted]
    watching.record.wait_for(lambda _: len(watching.record.changes()) >= len(expected), "the job's events")

    assert watching.record.changes() == expected, "the replay from cursor 0 narrowed to the one job"


def test_a_client_that_drops_and_reconnects_with_its_cursor_misses_nothing_and_sees_nothing_twice(
    live, followers
):
    acme = new_tenant(live, "acme")
    assert live.system_db is not None
    first = followers(live.websocket_url, acme.api_key)
    start = first.feed.cursor
    jobs = submit(acme, 10, seed=21)
    first.record.wait_for(lambda m: len(m) >= 5, "a few live messages")

    # The network drops under the client: the README's client reconnects at once from its last sequence.
    dropped_at = first.record.last_sequence()
    assert first.feed.connection is not None
    first.feed.connection.socket.shutdown(socket.SHUT_RDWR)
    first.record.wait_for(lambda _: first.record.last_sequence() > dropped_at + 3, "messages after the drop")

    # Then the client goes away for a while and comes back later with the cursor it kept.
    first.stop()
    kept = first.feed.cursor
    assert live.wait_for(all_finished(live.system_db, jobs), WAIT_SECONDS)
    more = submit(acme, 3, seed=22)
    assert live.wait_for(all_finished(live.system_db, more), WAIT_SECONDS)
    assert latest_seq(live.system_db, acme.tenant_id) > (kept or 0), "events happened while it was away"
    second = followers(live.websocket_url, acme.api_key, cursor=kept)
    latest = latest_seq(live.system_db, acme.tenant_id)
    second.record.wait_for(lambda _: second.record.last_sequence() >= latest, "the replay up to the latest")

    seen = first.record.changes() + second.record.changes()
    assert seen == events_of(live.system_db, acme.tenant_id, after=start or 0), (
        "nothing missed, nothing twice"
    )
    assert_in_order(seen)


def test_a_too_old_cursor_gets_resync_and_the_feed_goes_on_from_the_latest(narrow, followers):
    acme = new_tenant(narrow, "acme")
    assert narrow.system_db is not None
    jobs = submit(acme, 8, seed=31)  # events 1..8 (READY); nothing runs them here

    # Further behind than the 5 events a subscribe replays here:
    behind = followers(narrow.websocket_url, acme.api_key, cursor=0)
    behind.record.wait_for(lambda m: len(m) >= 1, "an answer")
    assert behind.record.messages[0] == {"type": "resync", "latest": 8, "reason": "too_far_behind"}
    behind.stop()

    # Older than the replay window: the first four events happened two days ago (the window is 24 h).
    with psycopg.connect(narrow.database_url) as conn:
        conn.execute(
            "UPDATE job_state_events SET occurred_at = occurred_at - interval '48 hours'"
            " WHERE tenant_id = %s AND seq <= 4",
            (acme.tenant_id,),
        )
    stale = followers(narrow.websocket_url, acme.api_key, cursor=3)
    stale.record.wait_for(lambda m: len(m) >= 1, "an answer")
    assert stale.record.messages[0] == {"type": "resync", "latest": 8, "reason": "cursor_too_old"}
    assert stale.feed.cursor == 8

    cancelled = acme.client.request("POST", f"/extraction-jobs/{jobs[0]}/cancel")
    assert cancelled.status in {200, 202}, cancelled.json
    stale.record.wait_for(lambda _: stale.record.last_sequence() >= 9, "the next live event")
    assert stale.record.changes() == [(9, jobs[0], "CANCELLED", 2)], "from the latest on, nothing replayed"


def test_a_revoked_keys_connection_is_closed_within_the_key_check_time(live):
    acme = new_tenant(live, "acme")
    assert live.system_db is not None
    key = create_key(live.system_db, acme.tenant_id, new_id, scopes=frozenset({Scope.JOBS_READ}))
    with raw_connect(live, key.api_key) as connection:
        connection.send(json.dumps({"action": "subscribe"}))
        assert receive(connection)["type"] == "subscribed"

        revoke_key(live.system_db, SystemClock(), acme.tenant_id, key.key_id)
        revoked_at = time.monotonic()
        with pytest.raises(ConnectionClosed) as closed:
            connection.recv(timeout=WAIT_SECONDS)
        took = time.monotonic() - revoked_at

    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008
    # Checked every KEY_CHECK_SECONDS by a sweep that runs each second (the deployed bound is
    # key_check_seconds plus the sweep's schedule); a little slack for a loaded machine.
    assert took <= KEY_CHECK_SECONDS + 1.0 + 2.0, f"closed {took:.1f} s after the revocation"


def test_the_handshake_needs_a_key_allowed_to_read_jobs(live):
    acme = new_tenant(live, "acme")
    assert live.system_db is not None
    writer = create_key(live.system_db, acme.tenant_id, new_id, scopes=frozenset({Scope.JOBS_WRITE}))

    for api_key in (None, "tg_not-a-real-key", writer.api_key):
        with pytest.raises(InvalidStatus) as refused, raw_connect(live, api_key):
            pass
        assert refused.value.response.status_code == 401, api_key


def test_bad_messages_get_an_error_and_change_nothing(narrow):
    acme = new_tenant(narrow, "acme")
    assert narrow.system_db is not None
    submit(acme, 2, seed=41)
    with raw_connect(narrow, acme.api_key) as connection:
        bad = [
            "not json",
            json.dumps({"action": "unsubscribe"}),
            json.dumps(["subscribe"]),
            json.dumps({"action": "subscribe", "cursor": "1"}),
            json.dumps({"action": "subscribe", "cursor": -1}),
            json.dumps({"action": "subscribe", "cursor": 999}),
            json.dumps({"action": "subscribe", "job_ids": ["not-a-uuid"]}),
            json.dumps({"action": "subscribe", "extra": True}),
        ]
        for message in bad:
            connection.send(message)
            answer = receive(connection)
            assert answer["type"] == "error" and answer["status"] == 400, (message, answer)
        assert narrow.notify is not None
        assert all(not c.subscribed for c in narrow.notify.connections.for_tenant(acme.tenant_id))

        connection.send(json.dumps({"action": "subscribe", "cursor": 2}))
        assert receive(connection) == {"type": "subscribed", "cursor": 2, "latest": 2}


def test_the_tenants_connection_cap_refuses_the_next_connection(narrow):
    acme = new_tenant(narrow, "acme")
    with ExitStack() as held:
        for _ in range(2):
            held.enter_context(raw_connect(narrow, acme.api_key))
        with pytest.raises(InvalidStatus) as refused, raw_connect(narrow, acme.api_key):
            pass
        assert refused.value.response.status_code == 429
        with raw_connect(narrow, new_tenant(narrow, "other").api_key):  # another tenant's own cap
            pass
