"""Live notification use cases: connect, disconnect, subscribe with a cursor, deliver a tenant's new events to
its connections, and close connections whose API key was revoked.

Delivery reads the tenant's event sequence from PostgreSQL (``job_state_events``: gap-free per tenant, written
in the transaction that changed the job) after each connection's ``last_seq``, so a notifier message lost,
repeated or out of order changes nothing but when a message goes out. One sender at a time per connection
(a lease on its item) sends in sequence order and moves ``last_seq`` after each page, so a job's older
state_version never follows a newer one. A sender that finds the lease taken leaves the work to its holder,
which looks for newer events once more after it lets go: nothing committed before that look is left behind.

A subscribe that replays is counted against the connection's allowance and then the tenant's (in that order,
so a connection past its own does not use up its tenant's), kept with the connections: one client sending
subscribes from cursor 0 in a loop gets a few replays a window, not one per message.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from aws_lambda_powertools import Logger

from tollgate.core.clock import Clock
from tollgate.db import Database
from tollgate.notify.connections import Connection, ConnectionStore
from tollgate.notify.messages import (
    BadMessage,
    ErrorMessage,
    Resync,
    StateChanged,
    Subscribed,
    TooManyReplays,
    parse_client_message,
)
from tollgate.notify.sender import Sender
from tollgate.outbox.notifications import TenantNews

logger = Logger(service="tollgate-notify", child=True)

# Events read per page of a catch-up; the feed's position moves after each page.
PAGE = 200
# How long one sender may hold a connection before another may take it over (it died).
LEASE_SECONDS = 30.0
# Catch-ups one delivery makes for a connection when events keep coming while it sends, and pages per
# catch-up: a connection further behind gets the rest from the next delivery (each change brings one).
ROUNDS = 5
PAGES_PER_ROUND = 10


@dataclass(frozen=True)
class ReplayAllowance:
    """Subscribes that replay, per connection and per tenant (all its connections together), in fixed windows
    of ``seconds``; a replay sends at most ``replay_max_events`` events."""

    per_connection: int
    per_tenant: int
    seconds: int


@dataclass(frozen=True)
class NotifyDeps:
    db: Database
    connections: ConnectionStore
    sender: Sender
    clock: Clock
    replay_max_events: int
    replay_max_hours: float
    max_connections_per_tenant: int
    connection_ttl_seconds: int
    key_check_seconds: int
    replay_allowance: ReplayAllowance
    # Names this process as a lease holder; each delivery adds its own suffix.
    owner: str = "notify"
    new_owner: Callable[[], str] = lambda: uuid.uuid4().hex


class TooManyConnections(Exception):
    """The tenant holds its cap of connections already: this one is refused."""


def connect(deps: NotifyDeps, connection_id: str, tenant_id: UUID, key_id: UUID) -> None:
    """Records a connection the authorizer admitted; TooManyConnections past the tenant's cap. The cap is
    counted, not reserved: connections arriving together may pass it by a few."""
    held = deps.connections.count_for_tenant(tenant_id, deps.max_connections_per_tenant)
    if held >= deps.max_connections_per_tenant:
        raise TooManyConnections(f"a tenant may hold {deps.max_connections_per_tenant} connections at once")
    now = deps.clock.now().timestamp()
    deps.connections.put(
        Connection(connection_id, tenant_id, key_id, connected_at=now, key_checked_at=now),
        _expiry(deps),
    )


def disconnect(deps: NotifyDeps, connection_id: str) -> None:
    deps.connections.delete(connection_id)


def subscribe(deps: NotifyDeps, connection_id: str, raw: str | bytes | None) -> None:
    """Turns the connection's feed on after the client's cursor and replays what it missed from PostgreSQL; a
    cursor older than the replay window, or further behind than ``replay_max_events``, gets a resync and the
    feed goes on from the latest event. A message that is not a valid subscribe gets an error message."""
    connection = deps.connections.get(connection_id)
    if connection is None:
        deps.sender.close(connection_id)  # forgotten (expired, or its key was revoked): the client reconnects
        return
    try:
        request = parse_client_message(raw)
    except BadMessage as error:
        _post(deps, connection_id, error.reply.encode())
        return
    latest, oldest, next_at = _window(
        deps, connection.tenant_id, -1 if request.cursor is None else request.cursor
    )
    start = latest if request.cursor is None else request.cursor
    if request.cursor is not None and request.cursor > latest:
        reply = ErrorMessage(
            status=400, title="Bad cursor", detail=f"the cursor is past the tenant's latest event ({latest})"
        )
        _post(deps, connection_id, reply.encode())
        return
    resync = None
    too_old = next_at is not None and next_at < deps.clock.now() - timedelta(hours=deps.replay_max_hours)
    if start < oldest - 1 or (start < latest and too_old):
        resync = Resync(latest=latest, reason="cursor_too_old")
    elif latest - start > deps.replay_max_events:
        resync = Resync(latest=latest, reason="too_far_behind")
    if resync is not None:
        start = latest
        if not _post(deps, connection_id, resync.encode()):
            return
    elif start < latest:
        refused = _refuse_replay(deps, connection)
        if refused is not None:
            _post(deps, connection_id, refused.encode())  # an earlier subscribe's feed goes on as it was
            return
    if not _post(deps, connection_id, Subscribed(cursor=start, latest=latest).encode()):
        return
    deps.connections.subscribe(
        connection_id,
        start,
        frozenset(str(j) for j in request.job_ids),
        frozenset(request.job_types),
        _expiry(deps),
    )
    catch_up(deps, connection_id)


def _refuse_replay(deps: NotifyDeps, connection: Connection) -> TooManyReplays | None:
    """Counts a replay against the connection's allowance, then its tenant's; the error to send when one of
    them is used up for this window (nothing counted on the tenant's then)."""
    allowance = deps.replay_allowance
    now = deps.clock.now().timestamp()
    window_start = int(now // allowance.seconds) * allowance.seconds
    retry_after = max(1, math.ceil(window_start + allowance.seconds - now))
    if not deps.connections.count_replay(connection.connection_id, window_start, allowance.per_connection):
        who = f"a connection may replay {allowance.per_connection} times"
    elif not deps.connections.count_tenant_replay(
        connection.tenant_id, window_start, allowance.per_tenant, window_start + 2 * allowance.seconds
    ):
        who = f"a tenant's connections may replay {allowance.per_tenant} times together"
    else:
        return None
    return TooManyReplays(
        detail=f"{who} every {allowance.seconds} s: subscribe again in {retry_after} s; nothing changed, and "
        "a feed this connection had goes on live",
        retry_after=retry_after,
    )


def notify_tenants(deps: NotifyDeps, latest: Mapping[UUID, int]) -> int:
    """Delivers each tenant's events up to (at least) its given sequence number to its subscribed connections;
    the messages sent. Keys not checked for ``key_check_seconds`` are checked on the way."""
    sent = 0
    now = deps.clock.now().timestamp()
    pages = EventPages(deps.db)  # a tenant's connections are mostly at one position: one read serves them all
    for tenant_id, up_to in latest.items():
        for connection in deps.connections.for_tenant(tenant_id):
            if not connection.subscribed or connection.last_seq >= up_to:
                continue
            if now - connection.key_checked_at > deps.key_check_seconds and not _key_still_active(
                deps, connection, now
            ):
                continue
            sent += catch_up(deps, connection.connection_id, pages)
    return sent


class EventPages:
    """Pages of tenants' events read during one delivery, by (tenant, position). A page read once may be
    short of what committed since; a connection that reaches its end reads on from the database (its
    catch-up looks for newer events before it stops), so sharing pages never skips an event."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._pages: dict[tuple[UUID, int], list[dict[str, Any]]] = {}

    def after(self, tenant_id: UUID, position: int, *, fresh: bool = False) -> list[dict[str, Any]]:
        key = (tenant_id, position)
        if fresh or key not in self._pages:
            with self._db.transaction() as conn:
                self._pages[key] = conn.execute(
                    self._db.q.job_state_events_after,
                    {"tenant_id": tenant_id, "after_seq": position, "limit": PAGE},
                ).fetchall()
        return self._pages[key]


def catch_up(deps: NotifyDeps, connection_id: str, pages: EventPages | None = None) -> int:
    """Sends the connection everything after its ``last_seq`` that its filters want, in sequence order, as
    its one sender for now; the messages sent. Returns 0 at once when another sender holds it. A subscribed
    connection is never told to resync for lagging behind the live feed (a burst of changes is sent in
    full); only a gap left by retention, while it lagged, ends in a resync."""
    owner = f"{deps.owner}:{deps.new_owner()}"
    pages = pages or EventPages(deps.db)
    sent = 0
    for round_ in range(ROUNDS):
        now = deps.clock.now()
        until = now + timedelta(seconds=LEASE_SECONDS)
        connection = deps.connections.take_lease(
            connection_id, owner, int(until.timestamp() * 1000), int(now.timestamp() * 1000)
        )
        if connection is None:
            return sent
        try:
            sent_now, position = _send_pages(deps, connection, owner, pages, fresh=round_ > 0)
            sent += sent_now
        finally:
            deps.connections.release(connection_id, owner)
        if position is None:
            return sent  # the connection is gone, or a new subscribe moved its feed
        latest, _, _ = _window(deps, connection.tenant_id)
        if latest <= position:
            return sent
        # Events committed while this sender held the lease, after its last read: their notifier saw the lease
        # taken and left them here.
    return sent


def _send_pages(
    deps: NotifyDeps, connection: Connection, owner: str, pages: EventPages, *, fresh: bool
) -> tuple[int, int | None]:
    """(messages sent, the feed's position after them); position None when the feed may not go on here."""
    position = connection.last_seq
    sent = 0
    for _ in range(PAGES_PER_ROUND):
        # A page another connection read a moment ago serves this one too: a full page is whole, and a short
        # one ends the round, after which the catch-up looks for newer events itself (``fresh``).
        rows = pages.after(connection.tenant_id, position, fresh=fresh)
        if not rows:
            return sent, position
        if rows[0]["seq"] != position + 1:
            # The next events were removed by retention while the connection lagged.
            latest, _, _ = _window(deps, connection.tenant_id)
            return sent, _resync(deps, connection, owner, position, latest)
        for row in rows:
            if connection.wants(str(row["job_id"]), row["job_type"]):
                message = StateChanged(
                    sequence=row["seq"],
                    job_id=row["job_id"],
                    job_type=row["job_type"],
                    state=row["state"],
                    state_version=row["state_version"],
                    occurred_at=row["occurred_at"],
                )
                if not _post(deps, connection.connection_id, message.encode()):
                    return sent, None
                sent += 1
        if not deps.connections.advance(connection.connection_id, owner, position, rows[-1]["seq"]):
            return sent, None
        position = rows[-1]["seq"]
        if len(rows) < PAGE:
            return sent, position
    return sent, position


def _resync(deps: NotifyDeps, connection: Connection, owner: str, position: int, latest: int) -> int | None:
    """Tells the client to fetch a fresh snapshot and moves its feed to the latest event."""
    if not _post(deps, connection.connection_id, Resync(latest=latest, reason="cursor_too_old").encode()):
        return None
    if not deps.connections.advance(connection.connection_id, owner, position, latest):
        return None
    return latest


def close_revoked(deps: NotifyDeps, *, limit: int = 500) -> int:
    """Closes the connections whose API key was revoked (or deleted), checking each key at most once per
    ``key_check_seconds``; the connections closed. Run every minute or so: a revoked key's connections end
    within that time."""
    now = deps.clock.now().timestamp()
    closed = 0
    verdicts: dict[UUID, bool] = {}
    for connection in deps.connections.key_check_due(now - deps.key_check_seconds, limit):
        active = verdicts.get(connection.key_id)
        if active is None:
            active = verdicts[connection.key_id] = _key_active(deps, connection.key_id)
        if active:
            deps.connections.mark_key_checked(connection.connection_id, now)
        else:
            _close(deps, connection)
            closed += 1
    return closed


def _key_still_active(deps: NotifyDeps, connection: Connection, now: float) -> bool:
    if _key_active(deps, connection.key_id):
        deps.connections.mark_key_checked(connection.connection_id, now)
        return True
    _close(deps, connection)
    return False


def _key_active(deps: NotifyDeps, key_id: UUID) -> bool:
    with deps.db.transaction() as conn:
        return conn.execute(deps.db.q.api_key_active, {"key_id": key_id}).fetchone() is not None


def _close(deps: NotifyDeps, connection: Connection) -> None:
    logger.info(
        "closing a connection whose API key was revoked",
        extra={"connection_id": connection.connection_id, "tenant_id": str(connection.tenant_id)},
    )
    deps.sender.close(connection.connection_id)
    deps.connections.delete(connection.connection_id)


def _post(deps: NotifyDeps, connection_id: str, body: bytes) -> bool:
    """Posts one message; a connection found gone is forgotten at once (False)."""
    if deps.sender.post(connection_id, body):
        return True
    deps.connections.delete(connection_id)
    return False


def _window(deps: NotifyDeps, tenant_id: UUID, cursor: int = -1) -> tuple[int, int, datetime | None]:
    """(latest, oldest kept, when the event after ``cursor`` happened) of the tenant's sequence."""
    with deps.db.transaction() as conn:
        row = conn.execute(
            deps.db.q.tenant_event_window, {"tenant_id": tenant_id, "after_seq": cursor}
        ).fetchone()
    if row is None:
        return 0, 1, None
    return int(row["latest"]), int(row["oldest"]), row["next_at"]


def _expiry(deps: NotifyDeps) -> int:
    return int(deps.clock.now().timestamp()) + deps.connection_ttl_seconds


def parse_notifications(bodies: list[str]) -> dict[UUID, int]:
    """The highest sequence number per tenant among notifier queue messages (``TenantNews``, one per tenant
    and relay batch)."""
    latest: dict[UUID, int] = {}
    for body in bodies:
        news = TenantNews.model_validate_json(body)
        latest[news.tenant_id] = max(latest.get(news.tenant_id, 0), news.sequence)
    return latest
