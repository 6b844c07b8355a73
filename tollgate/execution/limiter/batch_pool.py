"""The Batch API's own budget: prompt tokens enqueued per model across every batch not yet ended, shared by
all workers and kept apart from the immediate pool (base.py). A batch holds its tokens from before its
upload until it ends; a holder that never gives them back (a crashed batcher) is forgotten at its expiry.

Kept in DynamoDB as one item per provider pool and model (``batch#<pool>#<model>``, in the limiter's table):
the holders as a map (holder -> tokens and expiry, in epoch milliseconds so conditions compare exact
integers) and their running total, which is what one conditional UpdateItem tests a grant against. Every
write that changes a holder conditions on that holder as it was read, so the total stays the sum of the
holders whatever writes interleave; expired holders a write sees go in the same write, under the same kind
of condition. A holder takes ~80 bytes of the item's 400 KB, so a pool holds thousands of batches at once.
The in-memory pool has the same rules for unit tests and local runs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from tollgate.core.clock import Clock
from tollgate.execution.limiter.base import Denied, LimiterUnavailable
from tollgate.execution.limiter.dynamodb import (
    KEY,
    POOL_ITEM_TTL_SECONDS,
    TTL_ATTRIBUTE,
    ConditionFailed,
    call_budget_table,
)

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

HOLDERS = "holders"
ENQUEUED = "enqueued"
TOKENS = "tokens"
EXPIRES = "expires_ms"
# A holding outlives no pool item: every write moves the item's TTL a week on, so a holding may last a
# little less than that (the day of slack covers workers' clocks disagreeing).
MAX_HOLD = timedelta(seconds=POOL_ITEM_TTL_SECONDS) - timedelta(days=1)
# Nobody can say when another worker's batch ends, so a denied batcher asks again after at most this long.
ENQUEUE_POLL_SECONDS = 30.0
CONTENTION_WAIT_SECONDS = 0.05
# Conditional-write rounds per call; each failed round returns the item as it is, so more rarely help.
MAX_ROUNDS = 8
# Bounds the expression's size; a write that needs more room reclaims the rest first.
MAX_RECLAIMED_PER_WRITE = 16


@dataclass(frozen=True)
class Enqueue:
    pool: str  # the provider pool (LimiterSettings.provider_pool) ...
    model: str  # ... and the model: the limit is per model
    holder: str  # the batch's own id, so that asking again after a crash finds the same holding
    tokens: int  # prompt tokens the batch enqueues
    expires_at: datetime  # after it a holder that never released (a crashed batcher) is forgotten

    def __post_init__(self) -> None:
        if self.tokens < 1:
            raise ValueError("a batch enqueues at least one token")


@dataclass(frozen=True)
class Enqueued:
    pool: str
    model: str
    holder: str
    tokens: int  # 0: the holding is not held any more (released, or expired and forgotten)


class BatchPool(Protocol):
    def try_enqueue(self, request: Enqueue) -> Enqueued | Denied:
        """Holds ``request.tokens`` of the model's pool for ``request.holder`` if they fit under its limit,
        in one atomic write that also drops the expired holders it saw. Asking again for a holder already
        held returns that holding as it is and counts nothing twice. Denied reasons: "enqueued" (other
        batches fill the pool; ask again after ``wait_seconds``), "exceeds_limit" (more than the whole
        limit: never, ``wait_seconds`` is infinite; split the batch), "contention". Raises
        LimiterUnavailable when the pool's store cannot be reached: no holding, no upload."""
        ...

    def resize(self, held: Enqueued, tokens: int) -> Enqueued:
        """The holding as it stands after making it ``tokens``: a shrink always, a growth only within the
        limit (otherwise it comes back unchanged, so compare its tokens); tokens 0 if it is not held any
        more. Raises LimiterUnavailable when the store cannot be reached."""
        ...

    def release(self, pool: str, model: str, holder: str) -> None:
        """Gives the holding back; idempotent, an unknown holder is a no-op. Raises LimiterUnavailable when
        the store cannot be reached: a holding left behind blocks its tokens until it expires, so the
        caller releases again on its next pass."""
        ...

    def room(self, pool: str, model: str) -> int:
        """Tokens that could be enqueued for the model now."""
        ...

    def limit(self, model: str) -> int:
        """The model's whole limit: no one batch can enqueue more."""
        ...


@dataclass(frozen=True)
class Holding:
    tokens: int
    expires_ms: int


@dataclass(frozen=True)
class PoolState:
    """One pool+model item as read: ``enqueued`` is the holders' running total (expired ones included)."""

    holders: Mapping[str, Holding] = field(default_factory=dict)
    enqueued: int = 0

    @classmethod
    def from_item(cls, item: Mapping[str, Any] | None) -> PoolState:
        if not item:
            return cls()
        holders = {
            holder: Holding(int(entry["M"][TOKENS]["N"]), int(entry["M"][EXPIRES]["N"]))
            for holder, entry in item.get(HOLDERS, {}).get("M", {}).items()
        }
        return cls(holders, int(item.get(ENQUEUED, {}).get("N", "0")))

    def live(self, holder: str, now_ms: int) -> Holding | None:
        held = self.holders.get(holder)
        return held if held is not None and held.expires_ms > now_ms else None

    def expired(self, now_ms: int) -> list[str]:
        return sorted(h for h, held in self.holders.items() if held.expires_ms <= now_ms)

    def live_tokens(self, now_ms: int) -> int:
        return sum(held.tokens for held in self.holders.values() if held.expires_ms > now_ms)

    def wait_for(self, tokens: int, limit: int, now_ms: int) -> float:
        """Seconds until the holdings' expiries alone would make room for ``tokens``; a release may come
        sooner, so never longer than one poll."""
        over = self.live_tokens(now_ms) + tokens - limit
        if over <= 0:
            return 0.0
        by_expiry = sorted(
            (h for h in self.holders.values() if h.expires_ms > now_ms), key=lambda h: h.expires_ms
        )
        for held in by_expiry:
            over -= held.tokens
            if over <= 0:
                return min((held.expires_ms - now_ms) / 1000, ENQUEUE_POLL_SECONDS)
        return ENQUEUE_POLL_SECONDS


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def epoch_ms(moment: datetime) -> int:
    """Whole milliseconds, computed exactly: conditions compare the integers written before."""
    return (moment - EPOCH) // timedelta(milliseconds=1)


class Limits:
    """The enqueued-token limit per model: one default, and overrides for the models that differ."""

    def __init__(self, default: int, by_model: Mapping[str, int] | None = None) -> None:
        self._default = default
        self._by_model = dict(by_model or {})
        if default < 1 or any(limit < 1 for limit in self._by_model.values()):
            raise ValueError("every model's batch pool must hold at least one token")

    def __call__(self, model: str) -> int:
        return self._by_model.get(model, self._default)


def _check_enqueue(request: Enqueue, now: datetime) -> None:
    if request.expires_at <= now:
        raise ValueError("a holding must expire after it is made")
    if request.expires_at - now > MAX_HOLD:
        raise ValueError(
            f"a holding lasts at most {MAX_HOLD}: the pool's item may go a week after its last use"
        )


def _check_resize(tokens: int) -> None:
    if tokens < 1:
        raise ValueError("a holding keeps at least one token; release it instead")


# -- in memory -----------------------------------------------------------------------------------------


class InMemoryBatchPool:
    """The batch pool of one process, with the DynamoDB pool's rules; for unit tests and local runs."""

    def __init__(self, clock: Clock, limits: Limits) -> None:
        self._clock = clock
        self._limits = limits
        self._lock = threading.Lock()
        self._pools: dict[tuple[str, str], dict[str, Holding]] = {}

    def _holders(self, pool: str, model: str, now_ms: int) -> dict[str, Holding]:
        holders = self._pools.setdefault((pool, model), {})
        for holder in [h for h, held in holders.items() if held.expires_ms <= now_ms]:
            del holders[holder]
        return holders

    def try_enqueue(self, request: Enqueue) -> Enqueued | Denied:
        now = self._clock.now()
        _check_enqueue(request, now)
        limit, now_ms = self._limits(request.model), epoch_ms(now)
        with self._lock:
            holders = self._holders(request.pool, request.model, now_ms)
            held = holders.get(request.holder)
            if held is not None:
                return Enqueued(request.pool, request.model, request.holder, held.tokens)
            if request.tokens > limit:
                return Denied(math.inf, "exceeds_limit")
            state = PoolState(dict(holders), sum(h.tokens for h in holders.values()))
            if state.enqueued + request.tokens > limit:
                return Denied(state.wait_for(request.tokens, limit, now_ms), "enqueued")
            holders[request.holder] = Holding(request.tokens, epoch_ms(request.expires_at))
            return Enqueued(request.pool, request.model, request.holder, request.tokens)

    def resize(self, held: Enqueued, tokens: int) -> Enqueued:
        _check_resize(tokens)
        limit, now_ms = self._limits(held.model), epoch_ms(self._clock.now())
        with self._lock:
            holders = self._holders(held.pool, held.model, now_ms)
            current = holders.get(held.holder)
            if current is None:
                return dataclasses.replace(held, tokens=0)
            others = sum(h.tokens for h in holders.values()) - current.tokens
            if tokens > current.tokens and others + tokens > limit:
                return dataclasses.replace(held, tokens=current.tokens)
            holders[held.holder] = Holding(tokens, current.expires_ms)
            return dataclasses.replace(held, tokens=tokens)

    def release(self, pool: str, model: str, holder: str) -> None:
        with self._lock:
            self._holders(pool, model, epoch_ms(self._clock.now())).pop(holder, None)

    def room(self, pool: str, model: str) -> int:
        with self._lock:
            holders = self._holders(pool, model, epoch_ms(self._clock.now()))
            return max(0, self._limits(model) - sum(h.tokens for h in holders.values()))

    def limit(self, model: str) -> int:
        return self._limits(model)


# -- DynamoDB ------------------------------------------------------------------------------------------


def _n(value: int) -> dict[str, str]:
    return {"N": str(value)}


@dataclass
class _Write:
    """One UpdateItem changing holders of a pool item: each change conditioned on the holder as read."""

    state: PoolState
    now_ms: int
    sets: list[str] = field(default_factory=list)
    removes: list[str] = field(default_factory=list)
    conditions: list[str] = field(default_factory=list)
    names: dict[str, str] = field(default_factory=dict)
    values: dict[str, Any] = field(default_factory=dict)
    delta: int = 0  # what the running total changes by
    reclaim_only: bool = False  # drops expired holders and nothing else: the call goes on after it

    def name(self, attribute: str) -> str:
        for placeholder, existing in self.names.items():
            if existing == attribute:
                return placeholder
        placeholder = f"#n{len(self.names)}"
        self.names[placeholder] = attribute
        return placeholder

    def value(self, value: dict[str, Any]) -> str:
        placeholder = f":v{len(self.values)}"
        self.values[placeholder] = value
        return placeholder

    def path(self, holder: str) -> str:
        return f"{self.name(HOLDERS)}.{self.name(holder)}"

    def _as_read(self, holder: str) -> None:
        """The write holds only if ``holder`` is still exactly what was read (or still absent)."""
        path, held = self.path(holder), self.state.holders.get(holder)
        if held is None:
            self.conditions.append(f"attribute_not_exists({path})")
            return
        self.conditions.append(f"{path}.{self.name(TOKENS)} = {self.value(_n(held.tokens))}")
        self.conditions.append(f"{path}.{self.name(EXPIRES)} = {self.value(_n(held.expires_ms))}")
        self.delta -= held.tokens

    def reclaim_expired(self, keep: str | None = None) -> int:
        """Removes up to MAX_RECLAIMED_PER_WRITE expired holders (``keep``, written by the caller, aside);
        returns how many expired ones are left for a later write."""
        expired = [h for h in self.state.expired(self.now_ms) if h != keep]
        for holder in expired[:MAX_RECLAIMED_PER_WRITE]:
            self._as_read(holder)
            self.removes.append(self.path(holder))
        return max(0, len(expired) - MAX_RECLAIMED_PER_WRITE)

    def put(self, holder: str, holding: Holding) -> None:
        self._as_read(holder)
        entry = {"M": {TOKENS: _n(holding.tokens), EXPIRES: _n(holding.expires_ms)}}
        self.sets.append(f"{self.path(holder)} = {self.value(entry)}")
        self.delta += holding.tokens

    def remove(self, holder: str) -> None:
        self._as_read(holder)
        self.removes.append(self.path(holder))

    def within(self, limit: int) -> bool:
        """Conditions the write on the total staying within ``limit``; False if, as read, it would not."""
        # DynamoDB conditions cannot add, so the sum is moved to the value side: total <= limit - delta.
        self.conditions.append(f"{self.name(ENQUEUED)} <= {self.value(_n(limit - self.delta))}")
        return self.state.enqueued + self.delta <= limit

    def request(self) -> dict[str, Any]:
        sets = list(self.sets)
        total = self.name(ENQUEUED)
        if self.delta:
            sets.append(f"{total} = {total} + {self.value(_n(self.delta))}")
        now_s = self.now_ms // 1000
        # Only a pool nobody writes to for a week loses its item; no holding outlives that (MAX_HOLD).
        sets.append(f"{self.name(TTL_ATTRIBUTE)} = {self.value(_n(now_s + POOL_ITEM_TTL_SECONDS))}")
        clauses = ["SET " + ", ".join(sets)]
        if self.removes:
            clauses.append("REMOVE " + ", ".join(self.removes))
        return {
            "UpdateExpression": " ".join(clauses),
            # A write never makes a half item: a missing one is made whole first.
            "ConditionExpression": " AND ".join([f"attribute_exists({self.name(KEY)})", *self.conditions]),
            "ExpressionAttributeNames": self.names,
            "ExpressionAttributeValues": self.values,
        }


class DynamoDbBatchPool:
    """The BatchPool port on the limiter's table (``create_limiter_table``); safe to share between threads.

    Every call starts from a strongly consistent read: a batch is enqueued every few minutes per worker, so a
    read costs nothing that matters, and every answer given without a write (already held, no room, not
    held) comes from the item as it is.
    """

    def __init__(self, client: DynamoDBClient, table: str, clock: Clock, limits: Limits) -> None:
        self._client = client
        self._table = table
        self._clock = clock
        self._limits = limits

    @staticmethod
    def key(pool: str, model: str) -> str:
        return f"batch#{pool}#{model}"

    def try_enqueue(self, request: Enqueue) -> Enqueued | Denied:
        now = self._clock.now()
        _check_enqueue(request, now)
        limit, now_ms = self._limits(request.model), epoch_ms(now)
        holding = Holding(request.tokens, epoch_ms(request.expires_at))

        def plan(state: PoolState) -> _Write | Enqueued | Denied:
            held = state.live(request.holder, now_ms)
            if held is not None:
                return Enqueued(request.pool, request.model, request.holder, held.tokens)
            if request.tokens > limit:
                return Denied(math.inf, "exceeds_limit")
            write = _Write(state, now_ms)
            left = write.reclaim_expired(keep=request.holder)
            write.put(request.holder, holding)  # replacing this holder's own expired holding, if any
            if write.within(limit):
                return write
            if left:
                return self._reclaim_only(state, now_ms)  # the room may be in expired holders not yet reached
            return Denied(state.wait_for(request.tokens, limit, now_ms), "enqueued")

        result = self._write_planned(self.key(request.pool, request.model), plan, make_missing=True)
        if result is None:
            return Denied(CONTENTION_WAIT_SECONDS, "contention")
        if isinstance(result, PoolState):
            return Enqueued(request.pool, request.model, request.holder, request.tokens)
        return result

    def resize(self, held: Enqueued, tokens: int) -> Enqueued:
        _check_resize(tokens)
        limit, now_ms = self._limits(held.model), epoch_ms(self._clock.now())

        def plan(state: PoolState) -> _Write | Enqueued:
            current = state.live(held.holder, now_ms)
            if current is None:
                return dataclasses.replace(held, tokens=0)
            if current.tokens == tokens:
                return dataclasses.replace(held, tokens=tokens)
            write = _Write(state, now_ms)
            left = write.reclaim_expired()
            write.put(held.holder, Holding(tokens, current.expires_ms))
            if tokens < current.tokens or write.within(limit):
                return write
            if left:
                return self._reclaim_only(state, now_ms)
            return dataclasses.replace(held, tokens=current.tokens)

        result = self._write_planned(self.key(held.pool, held.model), plan)
        if isinstance(result, Enqueued):
            return result
        if isinstance(result, PoolState):
            return dataclasses.replace(held, tokens=tokens)
        # None: no round's condition held (a resize is never denied)
        raise LimiterUnavailable("the batch pool's item stayed contended while resizing a holding")

    def release(self, pool: str, model: str, holder: str) -> None:
        now_ms = epoch_ms(self._clock.now())

        def plan(state: PoolState) -> _Write | Enqueued:
            if holder not in state.holders:
                return Enqueued(pool, model, holder, 0)  # nothing held: done
            write = _Write(state, now_ms)
            write.reclaim_expired(keep=holder)
            write.remove(holder)
            return write

        if self._write_planned(self.key(pool, model), plan) is None:
            raise LimiterUnavailable("the batch pool's item stayed contended while releasing a holding")

    def room(self, pool: str, model: str) -> int:
        state = self._read(self.key(pool, model))
        return max(0, self._limits(model) - state.live_tokens(epoch_ms(self._clock.now())))

    def limit(self, model: str) -> int:
        return self._limits(model)

    def _reclaim_only(self, state: PoolState, now_ms: int) -> _Write:
        write = _Write(state, now_ms, reclaim_only=True)
        write.reclaim_expired()
        return write

    def _write_planned(
        self,
        key: str,
        plan: Callable[[PoolState], _Write | Enqueued | Denied],
        *,
        make_missing: bool = False,
    ) -> PoolState | Enqueued | Denied | None:
        """Writes ``plan(state)`` and, when its condition fails, plans again from the item the failure
        returns, for at most MAX_ROUNDS (None after that). Returns the state written from when a write
        held and ends the call; what the plan settled on without writing otherwise. A reclaim-only write
        does not end the call: the plan runs again on what it left."""
        state = self._read(key, make_missing=make_missing)
        for _ in range(MAX_ROUNDS):
            planned = plan(state)
            if not isinstance(planned, _Write):
                return planned
            try:
                self._call(
                    self._client.update_item,
                    TableName=self._table,
                    Key={KEY: {"S": key}},
                    ReturnValues="ALL_NEW",
                    ReturnValuesOnConditionCheckFailure="ALL_OLD",
                    **planned.request(),
                )
            except ConditionFailed as failed:
                if failed.item is None and not make_missing:
                    gone = plan(PoolState())  # the item is gone, and every holding with it
                    return None if isinstance(gone, _Write) else gone
                if failed.item is None:  # gone between the read and the write: made again, empty
                    state = self._read(key, make_missing=True)
                else:
                    state = PoolState.from_item(failed.item)
                continue
            if planned.reclaim_only:
                state = self._read(key)
                continue
            return planned.state
        return None

    def _read(self, key: str, *, make_missing: bool = False) -> PoolState:
        item = self._call(
            self._client.get_item, TableName=self._table, Key={KEY: {"S": key}}, ConsistentRead=True
        ).get("Item")
        if item is None and make_missing:
            self._create(key)
        return PoolState.from_item(item)

    def _create(self, key: str) -> None:
        """An empty pool item; another worker making it first is just as good."""
        now_s = epoch_ms(self._clock.now()) // 1000
        with contextlib.suppress(ConditionFailed):
            self._call(
                self._client.put_item,
                TableName=self._table,
                Item={
                    KEY: {"S": key},
                    HOLDERS: {"M": {}},
                    ENQUEUED: _n(0),
                    TTL_ATTRIBUTE: _n(now_s + POOL_ITEM_TTL_SECONDS),
                },
                ConditionExpression=f"attribute_not_exists({KEY})",
            )

    @staticmethod
    def _call(operation: Callable[..., Any], **request: Any) -> Any:
        return call_budget_table(operation, **request)
