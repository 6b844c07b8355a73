"""Tenants' API keys: minting them, and resolving a presented key to its tenant.

Keys carry 256 random bits, so a plain SHA-256 is a safe verifier (no slow hash needed) and lets the
authorizer look a key up by its hash. The key itself is shown once and never stored or logged.
"""

from __future__ import annotations

import hashlib
import re
import secrets
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Generic, TypeVar
from uuid import UUID

from tollgate.core.clock import Clock, IdFactory
from tollgate.core.errors import InvalidRequest, NotFound
from tollgate.db import Database
from tollgate.tenants.usage_keys import NoUsagePlan, UsagePlan

KEY_PREFIX = "tg_"
V = TypeVar("V")
_PREFIX_SHOWN = 10


class Scope(StrEnum):
    """What a key may do; each API route needs one (migration 0013 holds the same list)."""

    JOBS_WRITE = "jobs:write"  # submit and cancel jobs
    JOBS_READ = "jobs:read"  # read jobs, lists and results
    REVIEW = "review"  # decide results that wait for review
    WEBHOOKS_ADMIN = "webhooks:admin"  # manage webhook endpoints, their secrets and deliveries
    OPS_READ = "ops:read"  # operational detail: attempt history


ALL_SCOPES = frozenset(Scope)


def parse_scopes(names: Iterable[str]) -> frozenset[Scope]:
    """Scopes from their names (``jobs:read``), refusing unknown ones and an empty set."""
    wanted = {name.strip() for name in names if name.strip()}
    unknown = sorted(wanted - {scope.value for scope in Scope})
    if unknown:
        known = ", ".join(scope.value for scope in Scope)
        raise InvalidRequest(f"unknown scope {', '.join(unknown)}; the scopes are {known}")
    if not wanted:
        raise InvalidRequest("a key needs at least one scope")
    return frozenset(Scope(name) for name in wanted)


@dataclass(frozen=True)
class Principal:
    tenant_id: UUID
    key_id: UUID
    scopes: frozenset[Scope] = ALL_SCOPES
    # The tenant's API Gateway key on the usage plan (tollgate.tenants.usage_keys); None before it has one.
    usage_key: str | None = None


@dataclass(frozen=True)
class NewTenant:
    tenant_id: UUID
    name: str
    api_key: str
    key_prefix: str
    # The API Gateway key the usage plan meters the tenant by; None where there is no usage plan (local).
    usage_key_id: str | None = None


def hash_api_key(api_key: str) -> bytes:
    return hashlib.sha256(api_key.encode("utf-8")).digest()


def mint_api_key(token_source: Callable[[int], str] = secrets.token_urlsafe) -> str:
    return KEY_PREFIX + token_source(32)


def bearer_token(authorization: str | None) -> str | None:
    """The key from an ``Authorization: Bearer …`` header, or None when there is none to try."""
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token.startswith(KEY_PREFIX) or len(token) > 200:
        return None
    return token


class ApiKeyResolver:
    """Resolves keys through the database, caching answers for a short while per process.

    Misses are cached apart from hits, each cache bounded and dropping its oldest entries first: a flood of
    wrong keys then costs one lookup per distinct key and never pushes out the keys tenants really use.
    """

    def __init__(
        self, db: Database, clock: Clock, ttl_seconds: int, max_entries: int = 10_000, max_misses: int = 2_000
    ) -> None:
        self._db = db
        self._clock = clock
        self._ttl = ttl_seconds
        self._known: _ExpiringCache[Principal] = _ExpiringCache(max_entries)
        self._unknown: _ExpiringCache[bool] = _ExpiringCache(max_misses)

    def resolve(self, api_key: str) -> Principal | None:
        key_hash = hash_api_key(api_key)
        now = self._clock.now().timestamp()
        known = self._known.get(key_hash, now)
        if known is not None:
            return known
        if self._unknown.get(key_hash, now):
            return None
        with self._db.transaction() as conn:
            row = conn.execute(self._db.q.resolve_api_key, {"key_hash": key_hash}).fetchone()
        if row is None:
            self._unknown.put(key_hash, True, now + self._ttl)
            return None
        principal = Principal(
            row["tenant_id"],
            row["key_id"],
            frozenset(Scope(s) for s in row["scopes"]),
            usage_key=row["usage_key_value"],
        )
        self._known.put(key_hash, principal, now + self._ttl)
        return principal


class _ExpiringCache(Generic[V]):
    """At most ``max_entries`` values with an expiry each; the oldest entry goes first when full."""

    def __init__(self, max_entries: int) -> None:
        self._max_entries = max_entries
        self._entries: dict[bytes, tuple[float, V]] = {}
        self._lock = threading.Lock()

    def get(self, key: bytes, now: float) -> V | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            if entry[0] <= now:
                del self._entries[key]
                return None
            return entry[1]

    def put(self, key: bytes, value: V, expires_at: float) -> None:
        with self._lock:
            self._entries.pop(key, None)
            while self._entries and len(self._entries) >= self._max_entries:
                del self._entries[next(iter(self._entries))]
            self._entries[key] = (expires_at, value)


_NO_USAGE_PLAN = NoUsagePlan()


def create_tenant(
    db: Database,
    name: str,
    new_id: IdFactory,
    mint: Callable[[], str] = mint_api_key,
    allowed_currencies: list[str] | None = None,
    *,
    scopes: frozenset[Scope] = ALL_SCOPES,
    usage_plan: UsagePlan = _NO_USAGE_PLAN,
) -> NewTenant:
    """Creates a tenant, its usage-plan key and its first API key; needs the system role (tenants do not
    create tenants).

    ``allowed_currencies`` (ISO 4217 codes) defaults to EUR, USD, GBP and CHF; validation sends an invoice in
    any other currency to review. The key holds ``scopes``, every scope by default. ``usage_plan`` makes the
    tenant's key on the stage's usage plan before the tenant is stored, so a tenant never exists half made;
    the default, no plan, is for local development, where API Gateway does not run.
    """
    name = name.strip()
    if not 1 <= len(name) <= 100:
        raise InvalidRequest("a tenant name has 1 to 100 characters")
    if allowed_currencies is not None and not all(re.fullmatch(r"[A-Z]{3}", c) for c in allowed_currencies):
        raise InvalidRequest("currencies are three upper-case letters (ISO 4217)")
    taken = f"a tenant named {name!r} already exists"
    with db.transaction() as conn:
        # Checked before API Gateway is asked for a key, so a taken name leaves nothing behind there.
        if conn.execute(db.q.find_tenant_by_name, {"name": name}).fetchone() is not None:
            raise InvalidRequest(taken)
    tenant_id, key_id, api_key = new_id(), new_id(), mint()
    usage_key = usage_plan.attach(tenant_id, name)
    with db.transaction() as conn:
        created = conn.execute(
            db.q.insert_tenant,
            {
                "tenant_id": tenant_id,
                "name": name,
                "allowed_currencies": allowed_currencies,
                "usage_key_id": usage_key.key_id if usage_key else None,
                "usage_key_value": usage_key.value if usage_key else None,
            },
        ).fetchone()
        if created is None:
            # Taken since the check: the usage key made for this id stays on the plan, named after a tenant
            # that never came to be, and meters nothing.
            raise InvalidRequest(taken)
        conn.execute(
            db.q.insert_api_key,
            {
                "key_id": key_id,
                "tenant_id": tenant_id,
                "key_hash": hash_api_key(api_key),
                "key_prefix": api_key[:_PREFIX_SHOWN],
                "scopes": sorted(scopes),
            },
        )
    usage_key_id = usage_key.key_id if usage_key else None
    return NewTenant(tenant_id, name, api_key, api_key[:_PREFIX_SHOWN], usage_key_id=usage_key_id)


@dataclass(frozen=True)
class NewKey:
    key_id: UUID
    api_key: str
    key_prefix: str
    scopes: frozenset[Scope]


def create_key(
    db: Database,
    tenant_id: UUID,
    new_id: IdFactory,
    *,
    scopes: frozenset[Scope],
    mint: Callable[[], str] = mint_api_key,
) -> NewKey:
    """Another key for a tenant, holding ``scopes``; needs the system role. The key is returned once."""
    key_id, api_key = new_id(), mint()
    with db.transaction() as conn:
        conn.execute(
            db.q.insert_api_key,
            {
                "key_id": key_id,
                "tenant_id": tenant_id,
                "key_hash": hash_api_key(api_key),
                "key_prefix": api_key[:_PREFIX_SHOWN],
                "scopes": sorted(scopes),
            },
        )
    return NewKey(key_id, api_key, api_key[:_PREFIX_SHOWN], scopes)


def list_keys(db: Database, tenant_id: UUID) -> list[dict[str, Any]]:
    with db.transaction() as conn:
        return list(conn.execute(db.q.list_api_keys, {"tenant_id": tenant_id}).fetchall())


def revoke_key(db: Database, clock: Clock, tenant_id: UUID, key_id: UUID) -> None:
    """Revokes one of the tenant's keys; resolvers stop admitting it when their cache entry expires."""
    with db.transaction() as conn:
        revoked = conn.execute(
            db.q.revoke_api_key, {"tenant_id": tenant_id, "key_id": key_id, "now": clock.now()}
        ).fetchone()
    if revoked is None:
        raise NotFound(f"the tenant has no live key {key_id}")
