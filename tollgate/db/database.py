"""Pooled PostgreSQL connections and the transactions every use case runs in.

Each transaction assumes a role with ``set_config('role', …, true)`` and, for tenant work, sets the tenant
for row-level security the same way; both revert at commit, so a pooled connection never carries a
tenant or a role into the next transaction.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from uuid import UUID

from psycopg import Connection
from psycopg.conninfo import make_conninfo
from psycopg.rows import DictRow, dict_row
from psycopg_pool import ConnectionPool

from tollgate.db.queries import Queries, load_queries
from tollgate.settings import DatabaseSettings

Conn = Connection[DictRow]


class Database:
    def __init__(self, pool: ConnectionPool[Conn], role: str, queries: Queries | None = None) -> None:
        self.pool = pool
        self.role = role
        self.q = queries or load_queries()

    @contextmanager
    def transaction(self, tenant_id: UUID | None = None) -> Iterator[Conn]:
        """One transaction, as the configured role; with a tenant, row-level security admits only its rows."""
        with self.pool.connection() as conn, conn.transaction():
            if self.role:
                conn.execute(
                    self.q.begin_scope,
                    {"role": self.role, "tenant_id": str(tenant_id) if tenant_id else ""},
                )
            yield conn

    def close(self) -> None:
        self.pool.close()


def resolve_conninfo(settings: DatabaseSettings, secret_loader: Any = None) -> str:
    """The libpq connection string, from DATABASE_URL or from the Secrets Manager secret."""
    if settings.database_url is not None:
        return settings.database_url.get_secret_value()
    if secret_loader is None:
        from aws_lambda_powertools.utilities.parameters import get_secret

        secret_loader = get_secret
    raw = secret_loader(settings.database_secret_arn)
    secret = json.loads(raw) if isinstance(raw, str | bytes) else raw
    return make_conninfo(
        host=settings.database_host or secret["host"],
        port=str(secret.get("port", 5432)),
        dbname=secret.get("dbname", "postgres"),
        user=secret["username"],
        password=secret["password"],
        # The secret path is the deployed one: Aurora and RDS Proxy, both reached over TLS only.
        sslmode="require",
    )


def build_database(settings: DatabaseSettings, *, pool_name: str = "tollgate") -> Database:
    pool: ConnectionPool[Conn] = ConnectionPool(
        resolve_conninfo(settings),
        connection_class=Connection[DictRow],
        kwargs={
            "row_factory": dict_row,
            # Server-side prepared statements pin RDS Proxy sessions; plain statements keep multiplexing.
            "prepare_threshold": None,
        },
        min_size=1,
        max_size=settings.database_pool_size,
        # A Lambda thawed after minutes may hold a dead socket: check before lending it out.
        check=ConnectionPool.check_connection,
        name=pool_name,
        open=True,
    )
    return Database(pool, settings.database_role)
