"""The provider budget every worker shares, kept in DynamoDB: one item per shard of a provider pool.

Each shard item holds the pool's buckets as the time each would be full again (``req_full_at``,
``tok_full_at``): a bucket of ``rate`` units a second holding ``window`` seconds' worth has level
``rate * (window - max(0, full_at - now))``, so ``full_at`` is the level and the last-refill time folded into
one number. That form is what lets one conditional UpdateItem take a request, a token reservation and an
in-flight permit together, computed with the caller's clock and without reading first: taking ``c`` units
is ``full_at = max(full_at, now) + c / rate`` under the condition ``full_at <= now + window - c / rate``,
and DynamoDB's expressions (no min, max or multiplication) take ``max`` as two cases, ``full_at <= now``
and ``full_at > now``. The caller picks the case from the last state it saw; a wrong guess fails the
condition, which returns the item as it is, and the next round uses that. Concurrent callers in the same
case only add to the numbers, so they do not conflict with each other.

In-flight permits are a map in the same item (permit id -> expiry), counted with ``size()``. An acquire
removes expired permits it saw and conditions on each still being there, so a holder that died gives its
slot back once its permit expires, exactly. The item also keeps the shared cooldown after a provider 429,
the AIMD share of the configured rates, the provider's own limits from its ``x-ratelimit-*`` headers, and
running totals of what it granted, which bring the provider's headroom (read when it admitted a call, a
round trip ago) up to date. A TTL attribute lets DynamoDB remove the items of pools nobody uses any more.

Tiers (base.py ``TierShares``): the item holds, per tier that ranks above another, until when it is waiting
(``waiting_high``, ``waiting_normal``). A denied caller of such a tier sets its mark; its grant clears it. A
lower tier's acquire reads the marks it was planned from: with a higher tier waiting it is planned against
its ceiling (a smaller in-flight cap and a smaller part of the token bucket, stricter than the pool's and so
safe whatever happened since); with none waiting it may use the whole pool, on the condition, in the same
write, that no higher tier has marked itself waiting since. A mark and a borrow therefore never cross: the
first write after a mark holds lower tiers back.

A caller denied by an older copy of the item looks again with a strongly consistent read before it says
so: a read costs a fraction of a failed conditional write, and waiting callers ask often.

When the table cannot be reached the limiter fails closed (LimiterUnavailable), unless a bounded local
allowance is configured. Past ~1,000 writes a second one item is too hot, so the pool is split across K
items, each with 1/K of the rates and of the in-flight permits; a caller picks one at random and tries one
other when its pick has no room.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import random
import threading
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import Enum
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools import Logger
from botocore.exceptions import BotoCoreError, ClientError

from tollgate.core.clock import Clock, IdFactory, new_id
from tollgate.core.tiers import SERVICE_TIERS, ServiceTier
from tollgate.execution.limiter.aimd import AimdPolicy, capped_ceiling, headroom_from_headers
from tollgate.execution.limiter.base import (
    Denied,
    LimiterUnavailable,
    Outcome,
    Permit,
    Reservation,
    TierShares,
)

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

logger = Logger(service="tollgate-worker", child=True)

KEY = "pk"
TTL_ATTRIBUTE = "expires_at"
REQUESTS = "req_full_at"
TOKENS = "tok_full_at"
PERMITS = "permits"
COOLDOWN = "cooldown_until"
SHARE = "share"
DECREASED_AT = "decreased_at"
PROVIDER_RPM = "provider_rpm"
PROVIDER_TPM = "provider_tpm"
# Running totals of what the shard has granted, so a provider's headroom read at one call's admission can
# be brought up to date with the calls granted since.
REQUESTS_SENT = "req_sent"
TOKENS_SENT = "tok_sent"


def waiting_attribute(tier: ServiceTier) -> str:
    """Until when ``tier`` is waiting for budget: while it is, the tiers below it keep to their ceilings."""
    return f"waiting_{tier}"


# Buckets hold a minute's worth, like the provider's per-minute limits they mirror.
WINDOW_SECONDS = 60.0
# An idle pool's items go after a week; the next acquire recreates them full.
POOL_ITEM_TTL_SECONDS = 7 * 24 * 3600
DEFAULT_COOLDOWN_SECONDS = 1.0
# Nobody can say when another worker will release a permit, so a caller denied one looks again soon,
# with jitter so that waiting workers do not all ask at once.
IN_FLIGHT_POLL_SECONDS = 0.1
CONTENTION_WAIT_SECONDS = 0.02
# Conditional-write rounds per call; each failed round returns the current item, so more rarely help.
MAX_ROUNDS = 8
# Bounds the expression size; more expired permits are reclaimed by the next acquires.
MAX_RECLAIMED_PER_ACQUIRE = 16
# Grant-time totals kept per permit of this process; a permit never released drops out past this many.
MAX_TRACKED_PERMITS = 10_000
# What one partition takes; acquire + release + the odd failed condition make ~3 writes per request.
ITEM_WRITES_PER_SECOND = 1000.0
WRITES_PER_REQUEST = 3.0
# After a failure the table is left alone this long, so an outage does not cost every caller a timeout.
UNREACHABLE_BACKOFF_SECONDS = 1.0
LOCAL_PERMIT_PREFIX = "local:"


def shard_permit_id(shard: int, unique: str) -> str:
    """A permit's id names the shard item it is held in, so its release, resize and cancel find it."""
    return f"{shard}.{unique}"


def local_permit_id(unique: str) -> str:
    return LOCAL_PERMIT_PREFIX + unique


def shard_of(permit_id: str) -> int | None:
    """The shard item a permit is held in; None for one the local allowance granted, which is in no item."""
    if permit_id.startswith(LOCAL_PERMIT_PREFIX):
        return None
    return int(permit_id.split(".", 1)[0])


def derive_shards(requests_per_minute: float, max_in_flight: int, configured: int = 0) -> int:
    """K items for the pool: the configured count, else enough that none takes more than ~1,000 writes/s.
    Never more shards than in-flight permits, so every shard can grant at least one call."""
    wanted = configured or math.ceil(requests_per_minute / 60.0 * WRITES_PER_REQUEST / ITEM_WRITES_PER_SECOND)
    return max(1, min(wanted, max_in_flight))


def split_evenly(total: int, parts: int) -> list[int]:
    """``total`` permits over ``parts`` shards, differing by at most one, adding up to ``total``."""
    base, extra = divmod(total, parts)
    return [base + (1 if index < extra else 0) for index in range(parts)]


def bucket_wait(full_at: float, now: float, cost_seconds: float, window: float = WINDOW_SECONDS) -> float:
    """Seconds until a bucket that is full at ``full_at`` has room for a cost of ``cost_seconds``; 0 = now.

    A cost larger than the whole bucket fits only into a full one (and leaves it in debt): refusing it
    forever would leave the job waiting until its deadline for nothing.
    """
    if full_at <= now:
        return 0.0
    latest = now + window - cost_seconds
    if full_at <= latest:
        return 0.0
    return full_at - max(latest, now)


@dataclass(frozen=True)
class ShardState:
    """One shard item as last seen."""

    requests_full_at: float = 0.0
    tokens_full_at: float = 0.0
    permits: Mapping[str, float] = field(default_factory=dict)
    cooldown_until: float = 0.0
    share: float = 1.0
    decreased_at: float = 0.0
    provider_rpm: int | None = None
    provider_tpm: int | None = None
    requests_sent: float = 0.0
    tokens_sent: float = 0.0
    waiting: Mapping[str, float] = field(default_factory=dict)

    @classmethod
    def from_item(cls, item: Mapping[str, Any]) -> ShardState:
        def number(name: str, default: float) -> float:
            value = item.get(name)
            return float(value["N"]) if value and "N" in value else default

        def optional(name: str) -> int | None:
            value = item.get(name)
            return int(float(value["N"])) if value and "N" in value else None

        permits = {key: float(value["N"]) for key, value in (item.get(PERMITS) or {}).get("M", {}).items()}
        return cls(
            requests_full_at=number(REQUESTS, 0.0),
            tokens_full_at=number(TOKENS, 0.0),
            permits=permits,
            cooldown_until=number(COOLDOWN, 0.0),
            share=number(SHARE, 1.0),
            decreased_at=number(DECREASED_AT, 0.0),
            provider_rpm=optional(PROVIDER_RPM),
            provider_tpm=optional(PROVIDER_TPM),
            requests_sent=number(REQUESTS_SENT, 0.0),
            tokens_sent=number(TOKENS_SENT, 0.0),
            waiting={tier: number(waiting_attribute(tier), 0.0) for tier in SERVICE_TIERS},
        )

    def waiting_above(self, tier: ServiceTier, now: float) -> bool:
        return any(self.waiting.get(higher, 0.0) > now for higher in TierShares.above(tier))

    def live_permits(self, now: float) -> int:
        return sum(1 for expiry in self.permits.values() if expiry > now)

    def expired_permits(self, now: float) -> list[str]:
        return sorted(key for key, expiry in self.permits.items() if expiry <= now)


def _number(value: float) -> dict[str, str]:
    # Fixed-point text: DynamoDB keeps 38 digits, and an epoch time with nanoseconds needs 19.
    return {"N": f"{value:.9f}"}


class _Update:
    """One UpdateItem's expressions, with placeholders for every name and value."""

    def __init__(self) -> None:
        self.sets: list[str] = []
        self.removes: list[str] = []
        self.conditions: list[str] = []
        self.names: dict[str, str] = {}
        self.values: dict[str, dict[str, str]] = {}

    def name(self, attribute: str) -> str:
        for placeholder, existing in self.names.items():
            if existing == attribute:
                return placeholder
        placeholder = f"#n{len(self.names)}"
        self.names[placeholder] = attribute
        return placeholder

    def permit(self, permit_id: str) -> str:
        return f"{self.name(PERMITS)}.{self.name(permit_id)}"

    def value(self, number: float) -> str:
        placeholder = f":v{len(self.values)}"
        self.values[placeholder] = _number(number)
        return placeholder

    def request(self) -> dict[str, Any]:
        clauses = []
        if self.sets:
            clauses.append("SET " + ", ".join(self.sets))
        if self.removes:
            clauses.append("REMOVE " + ", ".join(self.removes))
        return {
            "UpdateExpression": " ".join(clauses),
            # Never let an update create a half item: a missing item is created whole, by _create.
            "ConditionExpression": " AND ".join([f"attribute_exists({self.name(KEY)})", *self.conditions]),
            "ExpressionAttributeNames": self.names,
            **({"ExpressionAttributeValues": self.values} if self.values else {}),
        }

    def add_to_total(self, attribute: str, amount: float) -> None:
        """A running total; items made before the attribute existed count from zero."""
        name = self.name(attribute)
        self.sets.append(f"{name} = if_not_exists({name}, {self.value(0)}) + {self.value(amount)}")

    def keep_item(self, now: float) -> None:
        """Moves the item's expiry on: only a pool that nobody acquires or releases from loses its item."""
        self.sets.append(f"{self.name(TTL_ATTRIBUTE)} = {self.value(now + POOL_ITEM_TTL_SECONDS)}")

    def take(self, attribute: str, full_at: float, now: float, cost: float, window: float) -> None:
        """``full_at = max(full_at, now) + cost`` if there is room for ``cost``; else the write fails."""
        name = self.name(attribute)
        if full_at <= now:
            self.conditions.append(f"{name} <= {self.value(now)}")
            self.sets.append(f"{name} = {self.value(now + cost)}")
        else:
            self.conditions.append(f"{name} > {self.value(now)}")
            self.conditions.append(f"{name} <= {self.value(now + window - cost)}")
            self.sets.append(f"{name} = {name} + {self.value(cost)}")

    def raise_to(self, attribute: str, current: float, delta: float, floor: float) -> None:
        """``attribute = max(attribute + delta, floor)``: a refund or a charge, and a floor under it."""
        if floor == -math.inf and not delta:
            return  # nothing to change; DynamoDB refuses names an expression does not use
        name = self.name(attribute)
        if floor == -math.inf:
            self.sets.append(f"{name} = {name} + {self.value(delta)}")
            return
        pivot = floor - delta
        if current >= pivot:
            self.conditions.append(f"{name} >= {self.value(pivot)}")
            if delta:
                self.sets.append(f"{name} = {name} + {self.value(delta)}")
        else:
            self.conditions.append(f"{name} < {self.value(pivot)}")
            self.sets.append(f"{name} = {self.value(floor)}")


class _Plan(Enum):
    READ_AGAIN = "read_again"  # the copy planned from may be out of date for this answer: read, then plan


class _Unwritten(Enum):
    GONE = "gone"
    CONTENDED = "contended"


class ConditionFailed(Exception):
    """A conditional write to the budget's table whose condition did not hold; ``item`` as it was."""

    def __init__(self, item: Mapping[str, Any] | None) -> None:
        super().__init__("condition failed")
        self.item = item


def call_budget_table(operation: Callable[..., Any], **request: Any) -> Any:
    """One call of the budget's table (the immediate pool's and the Batch API's): a failed condition is
    ConditionFailed, with the item as it was; anything else the table answered, or no answer, is
    LimiterUnavailable (fail closed)."""
    try:
        return operation(**request)
    except ClientError as error:
        code = error.response.get("Error", {}).get("Code", "")
        if code == "ConditionalCheckFailedException":
            item = error.response.get("Item")
            raise ConditionFailed(item if isinstance(item, dict) else None) from None
        raise LimiterUnavailable(f"DynamoDB answered {code}: {error}") from error
    except BotoCoreError as error:
        raise LimiterUnavailable(f"DynamoDB unreachable: {error}") from error


class LocalAllowance:
    """The explicit exception to failing closed: at most ``calls_per_minute`` calls in any 60 seconds, for
    this process alone, while the shared table cannot be reached."""

    def __init__(self, calls_per_minute: int, clock: Clock, permit_ttl_seconds: float) -> None:
        if calls_per_minute < 1:
            raise ValueError("a local allowance grants at least one call a minute")
        self._limit = calls_per_minute
        self._clock = clock
        self._ttl = permit_ttl_seconds
        self._granted: deque[datetime] = deque()
        self._lock = threading.Lock()

    def try_acquire(self, reservation: Reservation, permit_id: str) -> Permit | Denied:
        with self._lock:
            now = self._clock.now()
            while self._granted and self._granted[0] <= now - timedelta(seconds=WINDOW_SECONDS):
                self._granted.popleft()
            if len(self._granted) >= self._limit:
                oldest = self._granted[0]
                wait = (oldest + timedelta(seconds=WINDOW_SECONDS) - now).total_seconds()
                return Denied(max(wait, 0.0), "limiter_unavailable")
            self._granted.append(now)
            return Permit(
                local_permit_id(permit_id),
                reservation.pool,
                reservation.tokens,
                now + timedelta(seconds=self._ttl),
            )


class DynamoDbLimiter:
    """The Limiter port on a table made by ``create_limiter_table``; safe to share between threads."""

    def __init__(
        self,
        client: DynamoDBClient,
        table: str,
        clock: Clock,
        *,
        requests_per_minute: float,
        tokens_per_minute: float,
        max_in_flight: int,
        shards: int = 1,
        permit_ttl_seconds: float = 300.0,
        aimd: AimdPolicy | None = None,
        local_allowance_per_minute: int = 0,
        rng: random.Random | None = None,
        new_permit_id: IdFactory = new_id,
        tier_shares: TierShares | None = None,
    ) -> None:
        if shards < 1 or shards > max_in_flight:
            raise ValueError("between 1 shard and one shard per in-flight permit")
        if requests_per_minute <= 0 or tokens_per_minute <= 0 or max_in_flight < 1:
            raise ValueError("every limit must allow something")
        self._client = client
        self._table = table
        self._clock = clock
        self._rpm = requests_per_minute
        self._tpm = tokens_per_minute
        self._shards = shards
        self._in_flight_caps = split_evenly(max_in_flight, shards)
        self._ttl = permit_ttl_seconds
        self._aimd = aimd or AimdPolicy()
        self._tiers = tier_shares or TierShares()
        self._rng = rng or random.Random()  # noqa: S311 - load spreading, not security
        self._new_permit_id = new_permit_id
        self._allowance = (
            LocalAllowance(local_allowance_per_minute, clock, permit_ttl_seconds)
            if local_allowance_per_minute
            else None
        )
        self._known: dict[str, ShardState] = {}
        # Per permit of this process: the shard's running totals right after it was granted.
        self._sent_at_grant: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()
        self._unreachable_until: datetime | None = None

    # -- the port --------------------------------------------------------------------------------------

    def try_acquire(self, reservation: Reservation) -> Permit | Denied:
        now = self._clock.now()
        if self._unreachable_until is not None and now < self._unreachable_until:
            return self._without_table(reservation, "the limiter table failed moments ago")
        with self._lock:
            order = [self._rng.randrange(self._shards)]
            if self._shards > 1:
                order.append((order[0] + 1 + self._rng.randrange(self._shards - 1)) % self._shards)
            permit_id = self._new_permit_id().hex
        denials: list[Denied] = []
        try:
            for shard in order:
                result = self._acquire_on(reservation, shard, shard_permit_id(shard, permit_id), now)
                if isinstance(result, Permit):
                    return result
                if result.reason == "cooldown":  # every shard has it: asking another one cannot help
                    return result
                denials.append(result)
        except LimiterUnavailable as error:
            self._unreachable_until = now + timedelta(seconds=UNREACHABLE_BACKOFF_SECONDS)
            return self._without_table(reservation, str(error))
        self._unreachable_until = None
        return min(denials, key=lambda denied: denied.wait_seconds)

    def release(self, permit: Permit, outcome: Outcome) -> None:
        shard = shard_of(permit.permit_id)
        if shard is None:
            return  # granted by the local allowance: nothing of it is in the table
        now = self._clock.now()
        try:
            self._release_on(permit, outcome, shard, now)
            if outcome.throttled:
                for other in range(self._shards):
                    if other != shard:
                        self._spread_throttle(permit, outcome, other, now)
        except LimiterUnavailable:
            # The call was made and its answer is in hand; losing it over the budget's bookkeeping would be
            # worse than what is lost here: the permit lapses at its expiry, the reservation stays charged.
            logger.warning(
                "limiter release failed; the permit will expire", extra={"pool": permit.pool}, exc_info=True
            )

    def resize(self, permit: Permit, tokens: int) -> Permit:
        resized = dataclasses.replace(permit, tokens=tokens)
        shard = shard_of(permit.permit_id)
        if tokens == permit.tokens or shard is None:
            return resized
        key = self._key(permit.pool, shard)
        now = self._clock.now().timestamp()

        def plan(state: ShardState, fresh: bool) -> _Update:
            update = _Update()
            _, tokens_per_second, _ = self._effective(state, shard)
            delta = (tokens - permit.tokens) / tokens_per_second
            # Like a charge at release, it lands on the bucket as it is now, even past empty: the call is
            # about to be sent, and the next acquires wait for the debt instead.
            update.raise_to(TOKENS, state.tokens_full_at, delta, now + delta if delta > 0 else -math.inf)
            update.add_to_total(TOKENS_SENT, tokens - permit.tokens)
            return update

        if self._write_planned(key, plan) is _Unwritten.CONTENDED:
            raise LimiterUnavailable("the limiter item stayed contended while resizing a reservation")
        with self._lock:
            at_grant = self._sent_at_grant.get(permit.permit_id)
            if at_grant is not None:
                # The call's own tokens are not "sent since its admission" when its release reads headroom.
                self._sent_at_grant[permit.permit_id] = (at_grant[0], at_grant[1] + tokens - permit.tokens)
        return resized

    def cancel(self, permit: Permit) -> None:
        shard = shard_of(permit.permit_id)
        if shard is None:
            return  # the local allowance keeps no permits, and its window is this process's alone
        with self._lock:
            self._sent_at_grant.pop(permit.permit_id, None)

        def plan(state: ShardState, fresh: bool) -> _Update | None:
            # Only a permit still in the item gives anything back, so a second cancel, or one after the permit
            # lapsed and was reclaimed, cannot return more than its acquire took. The condition decides; a
            # remembered copy may predate the grant, so only a fresh one is trusted to say it is gone.
            if fresh and permit.permit_id not in state.permits:
                return None
            requests_per_second, tokens_per_second, _ = self._effective(state, shard)
            update = _Update()
            update.conditions.append(f"attribute_exists({update.permit(permit.permit_id)})")
            update.removes.append(update.permit(permit.permit_id))
            update.raise_to(REQUESTS, state.requests_full_at, -1 / requests_per_second, -math.inf)
            update.raise_to(TOKENS, state.tokens_full_at, -permit.tokens / tokens_per_second, -math.inf)
            # The running totals of what was granted keep the cancelled grant: read against a provider's
            # headroom they then count a call more than was sent, which errs on the safe side.
            return update

        try:
            self._write_planned(self._key(permit.pool, shard), plan)
        except LimiterUnavailable:
            # Giving back is a courtesy: the permit lapses at its expiry, and until then the budget errs on
            # the safe side.
            logger.warning(
                "limiter cancel failed; the permit will expire", extra={"pool": permit.pool}, exc_info=True
            )

    # -- acquire ---------------------------------------------------------------------------------------

    def _without_table(self, reservation: Reservation, reason: str) -> Permit | Denied:
        if self._allowance is None:
            raise LimiterUnavailable(reason)
        return self._allowance.try_acquire(reservation, self._new_permit_id().hex)

    def _acquire_on(
        self, reservation: Reservation, shard: int, permit_id: str, now: datetime
    ) -> Permit | Denied:
        expires_at = now + timedelta(seconds=self._ttl)

        def plan(state: ShardState, fresh: bool) -> _Update | _Plan | Denied:
            verdict, update = self._plan_acquire(
                state,
                shard=shard,
                tokens=reservation.tokens,
                tier=reservation.tier,
                permit_id=permit_id,
                now_at=now,
                expires_at=expires_at,
            )
            if verdict is None:
                return update
            # A cooldown only ever lengthens, so that denial stands. Any other one, read from an older state,
            # may be out of date (permits released, tokens refunded since): waiting callers look again with a
            # read, which costs a fraction of a failed conditional write.
            return verdict if fresh or verdict.reason == "cooldown" else _Plan.READ_AGAIN

        # An acquire makes a missing item (a new pool, or one whose item expired): the first caller's grant
        # comes from a full bucket.
        granted = self._write_planned(self._key(reservation.pool, shard), plan, make_missing=True)
        if isinstance(granted, Denied):
            if granted.reason != "cooldown" and self._tiers.recalls(reservation.tier):
                self._mark_waiting(reservation, shard, now)
            return granted
        if not isinstance(granted, ShardState):
            return Denied(CONTENTION_WAIT_SECONDS * (1 + self._jitter()), "contention")
        with self._lock:
            if len(self._sent_at_grant) >= MAX_TRACKED_PERMITS:
                self._sent_at_grant.pop(next(iter(self._sent_at_grant)))  # the oldest; its holder is gone
            self._sent_at_grant[permit_id] = (granted.requests_sent, granted.tokens_sent)
        return Permit(permit_id, reservation.pool, reservation.tokens, expires_at)

    def _mark_waiting(self, reservation: Reservation, shard: int, now_at: datetime) -> None:
        """This tier waits for budget on this shard: lower tiers keep to their ceilings until the mark runs
        out. Renewed once half of it is gone, so a caller polling every tenth of a second writes it a few
        times a second at most; its next grant clears it."""
        now = now_at.timestamp()
        until = now + self._tiers.recall_seconds

        def plan(state: ShardState, fresh: bool) -> _Update | None:
            if state.waiting.get(reservation.tier, 0.0) >= now + self._tiers.recall_seconds / 2:
                return None
            update = _Update()
            update.sets.append(f"{update.name(waiting_attribute(reservation.tier))} = {update.value(until)}")
            return update

        self._write_planned(self._key(reservation.pool, shard), plan)

    def _plan_acquire(
        self,
        state: ShardState,
        *,
        shard: int,
        tokens: int,
        tier: ServiceTier,
        permit_id: str,
        now_at: datetime,
        expires_at: datetime,
    ) -> tuple[Denied | None, _Update]:
        now = now_at.timestamp()
        update = _Update()
        waits: list[tuple[float, str]] = []

        cooldown = update.name(COOLDOWN)
        update.conditions.append(f"{cooldown} <= {update.value(now)}")
        if state.cooldown_until > now:
            return Denied(state.cooldown_until - now, "cooldown"), update

        requests_per_second, tokens_per_second, pool_cap = self._effective(state, shard)
        # A higher tier waiting: this tier keeps to its ceiling, which is stricter than the pool's, so it
        # needs no condition. None waiting: the whole pool, provided none has started waiting since.
        recalled = state.waiting_above(tier, now)
        if not recalled:
            for higher in TierShares.above(tier):
                mark = update.name(waiting_attribute(higher))
                update.conditions.append(f"(attribute_not_exists({mark}) OR {mark} <= {update.value(now)})")
        cap = self._tiers.in_flight_cap(tier, pool_cap, recalled)
        token_window = self._tiers.window(tier, WINDOW_SECONDS, recalled)
        if self._tiers.recalls(tier) and state.waiting.get(tier, 0.0) > now:
            # Granted: this tier is not waiting any more (another caller of it still waiting marks again).
            update.sets.append(f"{update.name(waiting_attribute(tier))} = {update.value(0)}")
        expired = state.expired_permits(now)[:MAX_RECLAIMED_PER_ACQUIRE]
        # Counting every permit, expired ones included, is exact only while those are still there to be
        # removed: each is a condition, so one already reclaimed by someone else fails this round.
        update.conditions.append(f"size({update.name(PERMITS)}) < {update.value(cap + len(expired))}")
        for stale in expired:
            update.conditions.append(f"attribute_exists({update.permit(stale)})")
            update.removes.append(update.permit(stale))
        update.sets.append(f"{update.permit(permit_id)} = {update.value(expires_at.timestamp())}")
        live = state.live_permits(now)
        if live >= cap:
            reason = "in_flight" if live >= pool_cap else "reserved"
            waits.append((IN_FLIGHT_POLL_SECONDS * (0.5 + self._jitter()), reason))

        for attribute, full_at, cost, window, reason in (
            (REQUESTS, state.requests_full_at, 1 / requests_per_second, WINDOW_SECONDS, "requests"),
            (TOKENS, state.tokens_full_at, tokens / tokens_per_second, token_window, "tokens"),
        ):
            update.take(attribute, full_at, now, cost, window)
            wait = bucket_wait(full_at, now, cost, window)
            if wait > 0:
                # "reserved": the pool has the room, but it is kept for a waiting higher tier.
                kept = window < WINDOW_SECONDS and bucket_wait(full_at, now, cost) == 0
                waits.append((wait, "reserved" if kept else reason))
        update.add_to_total(REQUESTS_SENT, 1)
        update.add_to_total(TOKENS_SENT, tokens)
        update.keep_item(now)
        if not waits:
            return None, update
        # Every dimension must have room at once, so the longest wait is the earliest chance.
        wait, reason = max(waits)
        return Denied(wait, reason), update

    # -- release ---------------------------------------------------------------------------------------

    def _release_on(self, permit: Permit, outcome: Outcome, shard: int, now_at: datetime) -> None:
        # Taken once, not in the plan: a plan runs again after a failed condition, and must find it again.
        with self._lock:
            sent_at_grant = self._sent_at_grant.pop(permit.permit_id, None)
        written = self._write_planned(
            self._key(permit.pool, shard),
            lambda state, fresh: self._plan_release(
                state, permit, outcome, shard=shard, now_at=now_at, sent_at_grant=sent_at_grant
            ),
        )
        if written is _Unwritten.CONTENDED:
            # The in-flight slot must come back now, not at the permit's expiry minutes later: a slot given
            # up here is a slot of the whole pool lost until then, and under the load that contends the item
            # they add up. So the permit goes in a write with no condition to lose, and only the token
            # reconciliation, which needs conditions, is given up (a refund forgone errs on the safe side).
            logger.warning(
                "limiter release contended; the permit is returned without reconciling tokens",
                extra={"pool": permit.pool},
            )
            self._write_planned(
                self._key(permit.pool, shard),
                lambda state, fresh: self._plan_bare_release(state, permit, outcome, shard, now_at),
            )

    def _plan_bare_release(
        self, state: ShardState, permit: Permit, outcome: Outcome, shard: int, now_at: datetime
    ) -> _Update:
        """The permit back, and a charge for tokens used beyond the reservation, with no condition but the
        item's existence: concurrent writers cannot make it fail."""
        update = _Update()
        update.removes.append(update.permit(permit.permit_id))
        if outcome.used_tokens is not None and outcome.used_tokens > permit.tokens:
            _, tokens_per_second, _ = self._effective(state, shard)
            update.raise_to(
                TOKENS,
                state.tokens_full_at,
                (outcome.used_tokens - permit.tokens) / tokens_per_second,
                -math.inf,
            )
        update.keep_item(now_at.timestamp())
        return update

    def _plan_release(
        self,
        state: ShardState,
        permit: Permit,
        outcome: Outcome,
        *,
        shard: int,
        now_at: datetime,
        sent_at_grant: tuple[float, float] | None,
    ) -> _Update:
        now = now_at.timestamp()
        update = _Update()
        # The request was sent and stays spent; the in-flight permit goes back.
        update.removes.append(update.permit(permit.permit_id))
        requests_per_second, tokens_per_second, _ = self._effective(state, shard)
        headroom = headroom_from_headers(outcome.rate_limit_headers)
        for attribute, reported, known in (
            (PROVIDER_RPM, headroom.limit_requests, state.provider_rpm),
            (PROVIDER_TPM, headroom.limit_tokens, state.provider_tpm),
        ):
            if reported is not None and reported > 0 and reported != known:
                update.sets.append(f"{update.name(attribute)} = {update.value(reported)}")

        # Tokens: refund what was reserved and not used, charge what was used beyond it. A charge lands on
        # the bucket as it is now (a full bucket loses it from full), a refund never fills past full.
        delta = 0.0
        floor = -math.inf
        if outcome.used_tokens is not None:
            delta = (outcome.used_tokens - permit.tokens) / tokens_per_second
            if delta > 0:
                floor = now + delta
        # The provider's remaining headroom, when lower than ours, is the truth: this shard may hold no more
        # than its share of it (1/K). That also corrects a refund the provider does not make.
        acquired_at = self._granted_at(permit)
        requests_since, tokens_since = (
            (max(0.0, state.requests_sent - sent_at_grant[0]), max(0.0, state.tokens_sent - sent_at_grant[1]))
            if sent_at_grant
            else (0.0, 0.0)
        )
        if headroom.remaining_tokens is not None:
            floor = max(
                floor,
                self._headroom_floor(headroom.remaining_tokens, tokens_since, tokens_per_second, acquired_at),
            )
        update.raise_to(TOKENS, state.tokens_full_at, delta, floor)
        if headroom.remaining_requests is not None:
            request_floor = self._headroom_floor(
                headroom.remaining_requests, requests_since, requests_per_second, acquired_at
            )
            update.raise_to(REQUESTS, state.requests_full_at, 0.0, request_floor)

        if outcome.throttled:
            self._plan_throttle(update, state, permit, outcome, now)
        elif outcome.used_tokens is not None and state.share < 1.0:
            share = update.name(SHARE)
            limit = 1.0 - self._aimd.increase_step
            if state.share <= limit:
                update.conditions.append(f"{share} <= {update.value(limit)}")
                update.sets.append(f"{share} = {share} + {update.value(self._aimd.increase_step)}")
            else:
                update.conditions.append(f"{share} > {update.value(limit)}")
                update.sets.append(f"{share} = {update.value(1.0)}")
        update.keep_item(now)
        return update

    def _headroom_floor(
        self, remaining: int, sent_since: float, per_second: float, admitted_at: float
    ) -> float:
        """The ``full_at`` at which this shard holds no more than its share of what the provider has left.

        ``remaining`` is the provider's headroom when it admitted the call, a round trip ago; since then it
        has refilled, and the calls this shard granted meanwhile have taken from it. Leaving those out lets
        the budget run a round trip's worth of calls ahead of the provider whenever it spends faster than
        the provider refills (a full bucket draining, or refunds the provider does not make).
        """
        return admitted_at + WINDOW_SECONDS - (remaining / self._shards - sent_since) / per_second

    def _plan_throttle(
        self, update: _Update, state: ShardState, permit: Permit, outcome: Outcome, now: float
    ) -> None:
        """A 429: a cooldown every worker honours, and one multiplicative decrease per round of calls."""
        wait = outcome.retry_after_seconds if outcome.retry_after_seconds else DEFAULT_COOLDOWN_SECONDS
        until = now + wait
        if until > state.cooldown_until:
            cooldown = update.name(COOLDOWN)
            update.conditions.append(f"{cooldown} < {update.value(until)}")
            update.sets.append(f"{cooldown} = {update.value(until)}")
        # Calls sent before the last decrease met the old rate; their 429s are that rate's, already answered.
        # Like TCP, which halves once per window, not once per lost packet.
        if self._granted_at(permit) > state.decreased_at:
            share = update.name(SHARE)
            update.conditions.append(f"{share} = {update.value(state.share)}")
            update.sets.append(f"{share} = {update.value(self._aimd.decreased(state.share))}")
            update.sets.append(f"{update.name(DECREASED_AT)} = {update.value(now)}")

    def _spread_throttle(self, permit: Permit, outcome: Outcome, shard: int, now_at: datetime) -> None:
        """The cooldown and the decrease reach every shard: the provider limits the pool, not a shard."""

        def plan(state: ShardState, fresh: bool) -> _Update | None:
            update = _Update()
            self._plan_throttle(update, state, permit, outcome, now_at.timestamp())
            return update if update.sets else None  # this shard has heard of it already

        self._write_planned(self._key(permit.pool, shard), plan)

    # -- state and the table ---------------------------------------------------------------------------

    def _write_planned(
        self,
        key: str,
        plan: Callable[[ShardState, bool], _Update | _Plan | Denied | None],
        *,
        make_missing: bool = False,
    ) -> ShardState | Denied | _Unwritten | None:
        """Every conditional write of a shard item goes through here: writes ``plan(state, fresh)``, and
        when its condition fails plans again from the item the failure returns, for at most MAX_ROUNDS.

        ``fresh`` is False for this process's copy of the item from an earlier call (it saves a read per
        call, but may be out of date) and True for one just read or returned by DynamoDB. A plan returns
        the update to write, ``_Plan.READ_AGAIN`` to be given a strongly consistent copy first, or what it
        settled on without writing: a denial, or None for nothing to do. A plan may run once a round, so it
        changes nothing itself.

        Returns the item as written, what the plan settled on, CONTENDED when no round's condition held,
        or GONE when the item does not exist (an expired pool, and its permits with it) unless
        ``make_missing`` has it made again, full.
        """
        state, fresh = self._remembered(key), False
        if state is None:
            state, fresh = self._read(key), True
        for _ in range(MAX_ROUNDS):
            planned = plan(state, fresh)
            if planned is _Plan.READ_AGAIN:
                state, fresh = self._read(key), True
                continue
            if not isinstance(planned, _Update):
                return planned
            try:
                written = self._write(key, planned)
            except ConditionFailed as failed:
                if failed.item is None and not make_missing:
                    return _Unwritten.GONE
                state, fresh = self._state_after_failure(key, failed), True
                continue
            self._remember(key, written)
            return written
        return _Unwritten.CONTENDED

    def _effective(self, state: ShardState, shard: int) -> tuple[float, float, int]:
        """This shard's requests/s, tokens/s and in-flight cap now: 1/K of the ceiling (lowered to what the
        provider reports, if less), times the AIMD share."""
        share = min(max(state.share, self._aimd.min_share), 1.0)
        requests = capped_ceiling(self._rpm, state.provider_rpm) / self._shards / 60.0 * share
        tokens = capped_ceiling(self._tpm, state.provider_tpm) / self._shards / 60.0 * share
        cap = max(1, math.ceil(self._in_flight_caps[shard] * share))
        return requests, tokens, cap

    def _granted_at(self, permit: Permit) -> float:
        """Every permit expires the same TTL after its grant, so its expiry says when it was granted."""
        return permit.expires_at.timestamp() - self._ttl

    def _jitter(self) -> float:
        with self._lock:
            return self._rng.random()

    @staticmethod
    def _key(pool: str, shard: int) -> str:
        return f"{pool}#{shard}"

    def _remembered(self, key: str) -> ShardState | None:
        with self._lock:
            return self._known.get(key)

    def _remember(self, key: str, state: ShardState) -> None:
        with self._lock:
            self._known[key] = state

    def _state_after_failure(self, key: str, failed: ConditionFailed) -> ShardState:
        if failed.item is None:
            return self._read(key)  # the item does not exist (yet, or any more): made whole by _read
        state = ShardState.from_item(failed.item)
        self._remember(key, state)
        return state

    def _read(self, key: str) -> ShardState:
        item = self._call(
            self._client.get_item,
            TableName=self._table,
            Key={KEY: {"S": key}},
            ConsistentRead=True,
        ).get("Item")
        if item is None:
            self._create(key)
            state = ShardState()
        else:
            state = ShardState.from_item(item)
        self._remember(key, state)
        return state

    def _create(self, key: str) -> None:
        """A new shard item, full: nothing has been spent from it yet."""
        now = self._clock.now().timestamp()
        # Another worker may make it first, which is just as good.
        with contextlib.suppress(ConditionFailed):
            self._call(
                self._client.put_item,
                TableName=self._table,
                Item={
                    KEY: {"S": key},
                    REQUESTS: _number(0),
                    TOKENS: _number(0),
                    PERMITS: {"M": {}},
                    COOLDOWN: _number(0),
                    SHARE: _number(1),
                    REQUESTS_SENT: _number(0),
                    TOKENS_SENT: _number(0),
                    DECREASED_AT: _number(0),
                    TTL_ATTRIBUTE: _number(now + POOL_ITEM_TTL_SECONDS),
                },
                ConditionExpression=f"attribute_not_exists({KEY})",
            )

    def _write(self, key: str, update: _Update) -> ShardState:
        response = self._call(
            self._client.update_item,
            TableName=self._table,
            Key={KEY: {"S": key}},
            ReturnValues="ALL_NEW",
            ReturnValuesOnConditionCheckFailure="ALL_OLD",
            **update.request(),
        )
        return ShardState.from_item(response.get("Attributes", {}))

    @staticmethod
    def _call(operation: Callable[..., Any], **request: Any) -> Any:
        return call_budget_table(operation, **request)
