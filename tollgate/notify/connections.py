"""Where WebSocket connections live: one DynamoDB item per connection (a TTL ends forgotten ones), found by
tenant through an index. Besides who it is, an item keeps what the connection asked for (its filters) and how
far its feed has gone (``last_seq``), and a short lease: the one sender that may post to it at a time, so its
messages leave in sequence order whoever delivers them (the subscribe's replay, or the notifier). Replays are
counted here too, per connection on its item and per tenant on an item of the tenant's own, in fixed windows:
one conditional write each, whatever the tenant's connections or events."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol
from uuid import UUID

from botocore.exceptions import BotoCoreError, ClientError

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

# The table's schema, which the Notifications stack builds from these names.
CONNECTION_ID = "connection_id"
TENANT_ID = "tenant_id"
BY_TENANT_INDEX = "by_tenant"
TTL_ATTRIBUTE = "expires_at"
# A tenant's replay counter is an item of the table keyed apart from any connection id (API Gateway's have no
# '#'). It has no tenant_id attribute, so the by_tenant index, which counts connections, never holds it.
TENANT_REPLAYS_PREFIX = "tenant-replays#"


class ConnectionStoreUnavailable(RuntimeError):
    """The connections table did not answer."""


@dataclass(frozen=True)
class Connection:
    connection_id: str
    tenant_id: UUID
    key_id: UUID
    connected_at: float  # epoch seconds
    key_checked_at: float  # when its API key was last found active
    subscribed: bool = False
    last_seq: int = 0  # the last sequence number its feed has passed (sent, or filtered out)
    job_ids: frozenset[str] = field(default_factory=frozenset)
    job_types: frozenset[str] = field(default_factory=frozenset)

    def wants(self, job_id: str, job_type: str) -> bool:
        return (not self.job_ids or job_id in self.job_ids) and (
            not self.job_types or job_type in self.job_types
        )


class ConnectionStore(Protocol):
    def put(self, connection: Connection, expires_at: int) -> None: ...

    def get(self, connection_id: str) -> Connection | None: ...

    def delete(self, connection_id: str) -> None: ...

    def count_for_tenant(self, tenant_id: UUID, limit: int) -> int:
        """The tenant's connections, counted up to ``limit`` (the cap): the cost stays bounded."""
        ...

    def for_tenant(self, tenant_id: UUID) -> Iterator[Connection]: ...

    def subscribe(
        self,
        connection_id: str,
        last_seq: int,
        job_ids: frozenset[str],
        job_types: frozenset[str],
        expires_at: int,
    ) -> bool:
        """Turns the feed on from ``last_seq`` with these filters; False when the connection is gone."""
        ...

    def take_lease(self, connection_id: str, owner: str, until_ms: int, now_ms: int) -> Connection | None:
        """The connection as it is now, leased to ``owner`` until ``until_ms``; None when another sender holds
        an unexpired lease, or the connection is gone or not subscribed."""
        ...

    def advance(self, connection_id: str, owner: str, from_seq: int, to_seq: int) -> bool:
        """Moves the feed from ``from_seq`` to ``to_seq``, only while ``owner`` holds the lease and nothing
        else moved it (a new subscribe); False otherwise."""
        ...

    def release(self, connection_id: str, owner: str) -> None: ...

    def count_replay(self, connection_id: str, window_start: int, limit: int) -> bool:
        """Counts one replay of the connection in the allowance window that began at ``window_start`` (epoch
        seconds); False, counting nothing, when it made ``limit`` in that window already, or is gone."""
        ...

    def count_tenant_replay(self, tenant_id: UUID, window_start: int, limit: int, expires_at: int) -> bool:
        """The same for all of the tenant's connections together, on an item of its own that the TTL removes
        at ``expires_at`` (after its window)."""
        ...

    def mark_key_checked(self, connection_id: str, at: float) -> None: ...

    def key_check_due(self, before: float, limit: int) -> list[Connection]:
        """Connections whose key was last checked before ``before``, at most ``limit`` of them."""
        ...


class InMemoryConnections:
    """The same rules in one process: unit tests, and the local system's WebSocket server."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: dict[
            str, tuple[Connection, int, str | None, int]
        ] = {}  # connection, expiry, owner, until
        self._replays: dict[str, tuple[int, int]] = {}  # counter's id: its window's start, replays in it

    def put(self, connection: Connection, expires_at: int) -> None:
        with self._lock:
            self._items[connection.connection_id] = (connection, expires_at, None, 0)
            self._replays.pop(connection.connection_id, None)

    def get(self, connection_id: str) -> Connection | None:
        with self._lock:
            item = self._items.get(connection_id)
        return None if item is None else item[0]

    def delete(self, connection_id: str) -> None:
        with self._lock:
            self._items.pop(connection_id, None)
            self._replays.pop(connection_id, None)

    def count_for_tenant(self, tenant_id: UUID, limit: int) -> int:
        return min(limit, sum(1 for c in self._snapshot() if c.tenant_id == tenant_id))

    def for_tenant(self, tenant_id: UUID) -> Iterator[Connection]:
        return iter([c for c in self._snapshot() if c.tenant_id == tenant_id])

    def subscribe(
        self,
        connection_id: str,
        last_seq: int,
        job_ids: frozenset[str],
        job_types: frozenset[str],
        expires_at: int,
    ) -> bool:
        with self._lock:
            item = self._items.get(connection_id)
            if item is None:
                return False
            connection = replace(
                item[0], subscribed=True, last_seq=last_seq, job_ids=job_ids, job_types=job_types
            )
            self._items[connection_id] = (connection, expires_at, item[2], item[3])
        return True

    def take_lease(self, connection_id: str, owner: str, until_ms: int, now_ms: int) -> Connection | None:
        with self._lock:
            item = self._items.get(connection_id)
            if item is None or not item[0].subscribed:
                return None
            if item[2] is not None and item[2] != owner and item[3] > now_ms:
                return None
            self._items[connection_id] = (item[0], item[1], owner, until_ms)
            return item[0]

    def advance(self, connection_id: str, owner: str, from_seq: int, to_seq: int) -> bool:
        with self._lock:
            item = self._items.get(connection_id)
            if item is None or item[2] != owner or item[0].last_seq != from_seq:
                return False
            self._items[connection_id] = (replace(item[0], last_seq=to_seq), item[1], item[2], item[3])
        return True

    def release(self, connection_id: str, owner: str) -> None:
        with self._lock:
            item = self._items.get(connection_id)
            if item is not None and item[2] == owner:
                self._items[connection_id] = (item[0], item[1], None, 0)

    def count_replay(self, connection_id: str, window_start: int, limit: int) -> bool:
        with self._lock:
            return connection_id in self._items and self._count(connection_id, window_start, limit)

    def count_tenant_replay(self, tenant_id: UUID, window_start: int, limit: int, expires_at: int) -> bool:
        with self._lock:
            return self._count(f"{TENANT_REPLAYS_PREFIX}{tenant_id}", window_start, limit)

    def _count(self, counter: str, window_start: int, limit: int) -> bool:
        started, replays = self._replays.get(counter, (window_start, 0))
        if started > window_start:
            return False  # a later window began already: this caller's clock is behind, as DynamoDB's rule
        if started < window_start:
            replays = 0
        if replays >= limit:
            return False
        self._replays[counter] = (window_start, replays + 1)
        return True

    def mark_key_checked(self, connection_id: str, at: float) -> None:
        with self._lock:
            item = self._items.get(connection_id)
            if item is not None:
                self._items[connection_id] = (replace(item[0], key_checked_at=at), *item[1:])

    def key_check_due(self, before: float, limit: int) -> list[Connection]:
        return [c for c in self._snapshot() if c.key_checked_at < before][:limit]

    def _snapshot(self) -> list[Connection]:
        with self._lock:
            return [item[0] for item in self._items.values()]


class DynamoDbConnections:
    """The connections table. Every call raises ConnectionStoreUnavailable when the table does not answer."""

    def __init__(self, client: DynamoDBClient, table: str) -> None:
        self._client = client
        self._table = table

    def put(self, connection: Connection, expires_at: int) -> None:
        item = {
            "connection_id": {"S": connection.connection_id},
            "tenant_id": {"S": str(connection.tenant_id)},
            "key_id": {"S": str(connection.key_id)},
            "connected_at": {"N": repr(connection.connected_at)},
            "key_checked_at": {"N": repr(connection.key_checked_at)},
            "subscribed": {"BOOL": connection.subscribed},
            "last_seq": {"N": str(connection.last_seq)},
            "job_ids": {"L": [{"S": j} for j in sorted(connection.job_ids)]},
            "job_types": {"L": [{"S": t} for t in sorted(connection.job_types)]},
            TTL_ATTRIBUTE: {"N": str(expires_at)},
        }
        self._call("put_item", TableName=self._table, Item=item)

    def get(self, connection_id: str) -> Connection | None:
        answer = self._call("get_item", TableName=self._table, Key=_key(connection_id), ConsistentRead=True)
        item = answer.get("Item")
        return None if item is None else _connection(item)

    def delete(self, connection_id: str) -> None:
        self._call("delete_item", TableName=self._table, Key=_key(connection_id))

    def count_for_tenant(self, tenant_id: UUID, limit: int) -> int:
        answer = self._call(
            "query",
            TableName=self._table,
            IndexName=BY_TENANT_INDEX,
            KeyConditionExpression="tenant_id = :t",
            ExpressionAttributeValues={":t": {"S": str(tenant_id)}},
            Select="COUNT",
            Limit=limit,
        )
        return min(int(answer.get("Count", 0)), limit)

    def for_tenant(self, tenant_id: UUID) -> Iterator[Connection]:
        start: dict[str, Any] | None = None
        while True:
            extra = {"ExclusiveStartKey": start} if start else {}
            answer = self._call(
                "query",
                TableName=self._table,
                IndexName=BY_TENANT_INDEX,
                KeyConditionExpression="tenant_id = :t",
                ExpressionAttributeValues={":t": {"S": str(tenant_id)}},
                **extra,
            )
            for item in answer.get("Items", []):
                yield _connection(item)
            start = answer.get("LastEvaluatedKey")
            if not start:
                return

    def subscribe(
        self,
        connection_id: str,
        last_seq: int,
        job_ids: frozenset[str],
        job_types: frozenset[str],
        expires_at: int,
    ) -> bool:
        return self._conditional(
            "update_item",
            TableName=self._table,
            Key=_key(connection_id),
            UpdateExpression="SET subscribed = :yes, last_seq = :seq, job_ids = :ids, job_types = :types, "
            f"{TTL_ATTRIBUTE} = :expires",
            ConditionExpression="attribute_exists(connection_id)",
            ExpressionAttributeValues={
                ":yes": {"BOOL": True},
                ":seq": {"N": str(last_seq)},
                ":ids": {"L": [{"S": j} for j in sorted(job_ids)]},
                ":types": {"L": [{"S": t} for t in sorted(job_types)]},
                ":expires": {"N": str(expires_at)},
            },
        )

    def take_lease(self, connection_id: str, owner: str, until_ms: int, now_ms: int) -> Connection | None:
        try:
            answer = self._call(
                "update_item",
                TableName=self._table,
                Key=_key(connection_id),
                UpdateExpression="SET lease_owner = :me, lease_until = :until",
                ConditionExpression="attribute_exists(connection_id) AND subscribed = :yes AND "
                "(attribute_not_exists(lease_until) OR lease_until < :now OR lease_owner = :me)",
                ExpressionAttributeValues={
                    ":me": {"S": owner},
                    ":until": {"N": str(until_ms)},
                    ":now": {"N": str(now_ms)},
                    ":yes": {"BOOL": True},
                },
                ReturnValues="ALL_NEW",
            )
        except _Refused:
            return None
        return _connection(answer["Attributes"])

    def advance(self, connection_id: str, owner: str, from_seq: int, to_seq: int) -> bool:
        return self._conditional(
            "update_item",
            TableName=self._table,
            Key=_key(connection_id),
            UpdateExpression="SET last_seq = :to",
            ConditionExpression="lease_owner = :me AND last_seq = :from",
            ExpressionAttributeValues={
                ":me": {"S": owner},
                ":from": {"N": str(from_seq)},
                ":to": {"N": str(to_seq)},
            },
        )

    def release(self, connection_id: str, owner: str) -> None:
        self._conditional(
            "update_item",
            TableName=self._table,
            Key=_key(connection_id),
            UpdateExpression="REMOVE lease_owner, lease_until",
            ConditionExpression="lease_owner = :me",
            ExpressionAttributeValues={":me": {"S": owner}},
        )

    def count_replay(self, connection_id: str, window_start: int, limit: int) -> bool:
        return self._count_in_window(connection_id, window_start, limit)

    def count_tenant_replay(self, tenant_id: UUID, window_start: int, limit: int, expires_at: int) -> bool:
        return self._count_in_window(f"{TENANT_REPLAYS_PREFIX}{tenant_id}", window_start, limit, expires_at)

    def _count_in_window(
        self, item_id: str, window_start: int, limit: int, expires_at: int | None = None
    ) -> bool:
        """One more replay in the window under way while under the limit, or the first of a new window; each a
        conditional write. Both refused: the window is full, or another subscribe began it between the two,
        which one more try of the first tells apart. A window older than the one stored is refused (a clock
        behind), never allowed to start the count again."""
        window = {":w": {"N": str(window_start)}}
        one_more = {
            "UpdateExpression": "ADD replays :one",
            "ConditionExpression": "replay_window = :w AND replays < :limit",
            "ExpressionAttributeValues": {**window, ":one": {"N": "1"}, ":limit": {"N": str(limit)}},
        }
        new_window = "attribute_not_exists(replay_window) OR replay_window < :w"
        if expires_at is None:  # a connection's count lives on its item, and only while it exists
            first = {
                "UpdateExpression": "SET replay_window = :w, replays = :one",
                "ConditionExpression": f"attribute_exists(connection_id) AND ({new_window})",
                "ExpressionAttributeValues": {**window, ":one": {"N": "1"}},
            }
        else:  # a tenant's item is made by its first replay and left to the TTL after its window
            first = {
                "UpdateExpression": f"SET replay_window = :w, replays = :one, {TTL_ATTRIBUTE} = :expires",
                "ConditionExpression": new_window,
                "ExpressionAttributeValues": {
                    **window,
                    ":one": {"N": "1"},
                    ":expires": {"N": str(expires_at)},
                },
            }
        return any(
            self._conditional("update_item", TableName=self._table, Key=_key(item_id), **attempt)
            for attempt in (one_more, first, one_more)
        )

    def mark_key_checked(self, connection_id: str, at: float) -> None:
        self._conditional(
            "update_item",
            TableName=self._table,
            Key=_key(connection_id),
            UpdateExpression="SET key_checked_at = :at",
            ConditionExpression="attribute_exists(connection_id)",
            ExpressionAttributeValues={":at": {"N": repr(at)}},
        )

    def key_check_due(self, before: float, limit: int) -> list[Connection]:
        # A scan: its cost grows with the connections, which are capped per tenant; the sweep runs once a
        # minute and reads at most a page of what is due.
        found: list[Connection] = []
        start: dict[str, Any] | None = None
        while len(found) < limit:
            extra = {"ExclusiveStartKey": start} if start else {}
            answer = self._call(
                "scan",
                TableName=self._table,
                FilterExpression="key_checked_at < :before",
                ExpressionAttributeValues={":before": {"N": repr(before)}},
                **extra,
            )
            found.extend(_connection(item) for item in answer.get("Items", []))
            start = answer.get("LastEvaluatedKey")
            if not start:
                break
        return found[:limit]

    def _conditional(self, operation: str, **kwargs: Any) -> bool:
        try:
            self._call(operation, **kwargs)
        except _Refused:
            return False
        return True

    def _call(self, operation: str, **kwargs: Any) -> Any:
        try:
            return getattr(self._client, operation)(**kwargs)
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException":
                raise _Refused from None
            raise ConnectionStoreUnavailable(f"{operation}: {error}") from None
        except BotoCoreError as error:
            raise ConnectionStoreUnavailable(f"{operation}: {error}") from None


class _Refused(Exception):
    """A conditional write whose condition did not hold: a normal answer, not a failure."""


def _key(connection_id: str) -> dict[str, Any]:
    return {"connection_id": {"S": connection_id}}


def _connection(item: dict[str, Any]) -> Connection:
    return Connection(
        connection_id=item["connection_id"]["S"],
        tenant_id=UUID(item["tenant_id"]["S"]),
        key_id=UUID(item["key_id"]["S"]),
        connected_at=float(item["connected_at"]["N"]),
        key_checked_at=float(item["key_checked_at"]["N"]),
        subscribed=bool(item.get("subscribed", {}).get("BOOL", False)),
        last_seq=int(item.get("last_seq", {}).get("N", "0")),
        job_ids=frozenset(v["S"] for v in item.get("job_ids", {}).get("L", [])),
        job_types=frozenset(v["S"] for v in item.get("job_types", {}).get("L", [])),
    )
