"""Pooled PostgreSQL connections and the transactions every use case runs in.

Each transaction assumes a role with ``set_config('role', …, true)`` and, for tenant work, sets the tenant
for row-level security the same way; both revert at commit, so a pooled connection never carries a
tenant or a role into the next transaction. In AWS the credentials come from the rotating Secrets Manager
secret and are read again for every new connection, so a pool outlives a password rotation.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, Protocol
from uuid import UUID

import psycopg
from psycopg import Connection, Pipeline
from psycopg.conninfo import make_conninfo
from psycopg.pq import TransactionStatus
from psycopg.rows import DictRow, dict_row
from psycopg_pool import ConnectionPool

from tollgate.db.queries import Queries, load_queries
from tollgate.settings import DatabaseSettings

Conn = Connection[DictRow]

# How long a process reuses the secret it read. A rotation does not wait for it: after a login that did
# not succeed, the next connection reads the secret afresh (SecretConninfo).
SECRET_MAX_AGE_SECONDS = 300


class SecretLoader(Protocol):
    """Reads a Secrets Manager secret's value; ``force_fetch`` goes past whatever cache the loader keeps."""

    def __call__(self, secret_id: str, *, force_fetch: bool = False) -> str | bytes | Mapping[str, Any]: ...


def powertools_secret_loader(max_age_seconds: int = SECRET_MAX_AGE_SECONDS) -> SecretLoader:
    """Powertools' ``get_secret``, cached in the process for ``max_age_seconds``."""
    # Imported here: the DATABASE_URL path (local runs, tests, the CLI) never needs boto3.
    from aws_lambda_powertools.utilities.parameters import get_secret

    def load(secret_id: str, *, force_fetch: bool = False) -> str:
        return get_secret(secret_id, force_fetch=force_fetch, max_age=max_age_seconds)

    return load


def conninfo_from_secret(
    raw: str | bytes | Mapping[str, Any], *, ca_bundle: Path, host: str | None = None
) -> str:
    """A libpq connection string from an RDS secret (username, password, host, port, dbname).

    ``host`` replaces the secret's own (the cluster's), to go through RDS Proxy instead.
    """
    secret: Mapping[str, Any] = json.loads(raw) if isinstance(raw, str | bytes) else raw
    return make_conninfo(
        host=host or secret["host"],
        port=str(secret.get("port", 5432)),
        dbname=secret.get("dbname", "postgres"),
        user=secret["username"],
        password=secret["password"],
        # The secret path is the deployed one. verify-full: the server's certificate must chain to a CA in
        # the bundle and name the host we asked for; `require` would encrypt to whoever answered, so
        # anything able to redirect the connection could read the password and every tenant's data.
        sslmode="verify-full",
        sslrootcert=str(ca_bundle),
    )


class SecretConninfo:
    """The pool's connection string, built from the database secret each time the pool opens a connection.

    Secrets Manager rotates the password every 30 days. Connections already open stay logged in; each new
    one takes what the secret says at that moment, so a worker or a warm Lambda keeps its pool across a
    rotation. Reads go through the loader's cache, except after a login that never succeeded (a password
    rotated while cached, typically): the next connection then reads the secret afresh, so the pool's first
    reconnection attempt (about a second later) already uses the new password. When the pool opens several
    connections at once this may read the secret once more than needed, which is harmless.
    """

    def __init__(
        self, secret_id: str, loader: SecretLoader, *, ca_bundle: Path, host: str | None = None
    ) -> None:
        self._secret_id = secret_id
        self._loader = loader
        self._ca_bundle = ca_bundle
        self._host = host
        self._lock = threading.Lock()
        self._login_pending = False

    def __call__(self) -> str:
        with self._lock:
            # Credentials handed out before that have not produced a connection may be the stale ones.
            force_fetch = self._login_pending
            self._login_pending = True
        return self.read(force_fetch=force_fetch)

    def read(self, *, force_fetch: bool = False) -> str:
        """The connection string as the secret has it now (or as the loader's cache does)."""
        secret = self._loader(self._secret_id, force_fetch=force_fetch)
        return conninfo_from_secret(secret, ca_bundle=self._ca_bundle, host=self._host)

    def logged_in(self, conn: Conn) -> None:
        """The pool's ``configure`` callback, called for each new connection: its credentials worked."""
        with self._lock:
            self._login_pending = False


def secret_conninfo(settings: DatabaseSettings, loader: SecretLoader | None = None) -> SecretConninfo:
    if settings.database_secret_arn is None:
        raise ValueError("the database secret path needs DATABASE_SECRET_ARN")
    return SecretConninfo(
        settings.database_secret_arn,
        loader or powertools_secret_loader(),
        ca_bundle=settings.ca_bundle,
        host=settings.database_host,
    )


class Database:
    def __init__(self, pool: ConnectionPool[Conn], role: str, queries: Queries | None = None) -> None:
        self.pool = pool
        self.role = role
        self.q = queries or load_queries()

    @contextmanager
    def transaction(self, tenant_id: UUID | None = None) -> Iterator[Conn]:
        """One transaction, as the configured role; with a tenant, row-level security admits only its rows."""
        with self.pool.connection() as conn, conn.transaction():
            self._begin_scope(conn, tenant_id)
            yield conn

    @contextmanager
    def pipelined(self) -> Iterator[PipelinedSession]:
        """One pooled connection in pipeline mode, for a hot path that runs a few short transactions on it.

        Statements go out without waiting for one another; a fetch waits for what was sent before it, and a
        transaction's COMMIT goes out with its last statements. The path then pays a round trip per decision
        it takes, not per statement. The connection is in autocommit mode only while it is lent here, so its
        transactions are the session's explicit BEGIN and COMMIT; it goes back to the pool as it came.
        """
        with self.pool.connection() as conn:
            conn.autocommit = True
            try:
                with conn.pipeline() as pipeline:
                    yield PipelinedSession(self, conn, pipeline)
            finally:
                _restore_transactional(conn)

    def _begin_scope(self, conn: Conn, tenant_id: UUID | None) -> None:
        if self.role:
            conn.execute(
                self.q.begin_scope, {"role": self.role, "tenant_id": str(tenant_id) if tenant_id else ""}
            )

    def close(self) -> None:
        self.pool.close()


class PipelinedSession:
    """A pipelined connection lent by ``Database.pipelined``; ``transaction`` runs one transaction on it."""

    def __init__(self, db: Database, conn: Conn, pipeline: Pipeline) -> None:
        self._db = db
        self._conn = conn
        self._pipeline = pipeline

    @contextmanager
    def transaction(self, tenant_id: UUID | None = None) -> Iterator[Conn]:
        """As ``Database.transaction``, but BEGIN, the scope and the block's statements are sent together,
        and COMMIT is sent with the last of them: one round trip to commit, where psycopg's own transaction
        block in a pipeline syncs once before its COMMIT and once after. A statement that failed is raised
        at the next fetch or at the commit; either way the transaction is rolled back and nothing is kept.
        """
        conn, q = self._conn, self._db.q
        conn.execute(q.begin)
        self._db._begin_scope(conn, tenant_id)
        try:
            yield conn
            conn.execute(q.commit)
            self._pipeline.sync()
        except BaseException:
            self._roll_back()
            raise

    def _roll_back(self) -> None:
        # The error being raised is the one to report: a failure here only means the connection is gone,
        # and the pool discards a broken connection when it comes back.
        try:
            with suppress(psycopg.Error):
                self._pipeline.sync()  # ends an aborted pipeline; raises the error that aborted it
            self._conn.execute(self._db.q.rollback)
            self._pipeline.sync()
        except psycopg.Error:
            pass


def _restore_transactional(conn: Conn) -> None:
    """Puts a lent connection back as the pool's others are, or closes it for the pool to drop."""
    try:
        if conn.info.transaction_status != TransactionStatus.IDLE:
            conn.rollback()
        conn.autocommit = False
    except psycopg.Error:
        conn.close()


def resolve_conninfo(settings: DatabaseSettings, secret_loader: SecretLoader | None = None) -> str:
    """A connection string for one-off use (the migration runner): DATABASE_URL, or the secret read now."""
    if settings.database_url is not None:
        return settings.database_url.get_secret_value()
    # Nothing reuses this string, so a cached secret would only risk a password rotated moments ago.
    return secret_conninfo(settings, secret_loader).read(force_fetch=True)


def build_database(
    settings: DatabaseSettings,
    *,
    pool_name: str = "tollgate",
    secret_loader: SecretLoader | None = None,
    connect_at_start: bool = True,
) -> Database:
    """The pool for one entrypoint. With DATABASE_URL it connects with that URL; otherwise it reads the
    credentials from the database secret for each new connection (``secret_loader``, by default Powertools'
    cached ``get_secret``).

    ``connect_at_start=False`` keeps no connection open: the first transaction opens one. It is for an
    entrypoint that often runs without PostgreSQL, where a connection made at cold start would resume a
    paused Aurora cluster for nothing.
    """
    conninfo: str | SecretConninfo
    configure: Callable[[Conn], None] | None = None
    if settings.database_url is not None:
        conninfo = settings.database_url.get_secret_value()
    else:
        # A callable conninfo (psycopg-pool 3.3, the project's minimum) is called for every new connection.
        conninfo = secret_conninfo(settings, secret_loader)
        configure = conninfo.logged_in
    pool: ConnectionPool[Conn] = ConnectionPool(
        conninfo,
        connection_class=Connection[DictRow],
        kwargs={
            "row_factory": dict_row,
            # Server-side prepared statements pin RDS Proxy sessions; plain statements keep multiplexing.
            "prepare_threshold": None,
            "connect_timeout": max(1, int(settings.database_wait_seconds)),
        },
        configure=configure,
        min_size=1 if connect_at_start else 0,
        max_size=settings.database_pool_size,
        # Under API Gateway's 29 s limit, so a caller hears 503 from us rather than a gateway timeout.
        timeout=settings.database_wait_seconds,
        # A Lambda thawed after minutes may hold a dead socket: check before lending it out.
        check=ConnectionPool.check_connection,
        name=pool_name,
        open=True,
    )
    return Database(pool, settings.database_role)
