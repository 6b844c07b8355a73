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
from typing import Any
from uuid import UUID

from tollgate.core.clock import Clock, IdFactory
from tollgate.core.errors import InvalidRequest, NotFound
from tollgate.db import Database

KEY_PREFIX = "tg_"
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


@dataclass(frozen=True)
class NewTenant:
    tenant_id: UUID
    name: str
    api_key: str
    key_prefix: str


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
    """Resolves keys through the database, caching answers (also misses) for a short while per process."""

    def __init__(self, db: Database, clock: Clock, ttl_seconds: int, max_entries: int = 10_000) -> None:
        self._db = db
        self._clock = clock
        self._ttl = ttl_seconds
        self._max_entries = max_entries
        self._cache: dict[bytes, tuple[float, Principal | None]] = {}
        self._lock = threading.Lock()

    def resolve(self, api_key: str) -> Principal | None:
        key_hash = hash_api_key(api_key)
        now = self._clock.now().timestamp()
        with self._lock:
            cached = self._cache.get(key_hash)
        if cached is not None and cached[0] > now:
            return cached[1]
        with self._db.transaction() as conn:
            row = conn.execute(self._db.q.resolve_api_key, {"key_hash": key_hash}).fetchone()
        principal = (
            Principal(row["tenant_id"], row["key_id"], frozenset(Scope(s) for s in row["scopes"]))
            if row
            else None
        )
        with self._lock:
            if len(self._cache) >= self._max_entries:
                self._cache.clear()
            self._cache[key_hash] = (now + self._ttl, principal)
        return principal


def create_tenant(
    db: Database,
    name: str,
    new_id: IdFactory,
    mint: Callable[[], str] = mint_api_key,
    allowed_currencies: list[str] | None = None,
    *,
    scopes: frozenset[Scope] = ALL_SCOPES,
) -> NewTenant:
    """Creates a tenant and its first API key; needs the system role (tenants do not create tenants).

    ``allowed_currencies`` (ISO 4217 codes) defaults to EUR, USD, GBP and CHF; validation sends an invoice in
    any other currency to review. The key holds ``scopes``, every scope by default.
    """
    name = name.strip()
    if not 1 <= len(name) <= 100:
        raise InvalidRequest("a tenant name has 1 to 100 characters")
    if allowed_currencies is not None and not all(re.fullmatch(r"[A-Z]{3}", c) for c in allowed_currencies):
        raise InvalidRequest("currencies are three upper-case letters (ISO 4217)")
    tenant_id, key_id, api_key = new_id(), new_id(), mint()
    with db.transaction() as conn:
        created = conn.execute(
            db.q.insert_tenant,
            {"tenant_id": tenant_id, "name": name, "allowed_currencies": allowed_currencies},
        ).fetchone()
        if created is None:
            raise InvalidRequest(f"a tenant named {name!r} already exists")
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
    return NewTenant(tenant_id, name, api_key, api_key[:_PREFIX_SHOWN])


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
