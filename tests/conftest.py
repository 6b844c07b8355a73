"""Shared fixtures: a real PostgreSQL database per test process (DATABASE_URL's server, or the embedded
one) with all migrations applied, and moto as a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from tollgate.db.migrations import apply_migrations
from tollgate.settings import REPO_ROOT

MIGRATIONS = REPO_ROOT / "migrations"
# Tenants first: CASCADE reaches every table that refers to them; the rest have no tenant key.
TABLES = "tenants, outbox_events, inbox_quarantine, support_audit"


@pytest.fixture(scope="session")
def pg_server_url() -> Iterator[str]:
    url = os.environ.get("DATABASE_URL")
    if url:
        yield url
        return
    from tollgate.local.postgres import embedded_server

    # One embedded server for every test process of this checkout; each process makes its own database.
    server = embedded_server(REPO_ROOT / ".tollgate" / "test-pgdata")
    yield server.get_uri()


def database_url_for(server_url: str, dbname: str) -> str:
    params = conninfo_to_dict(server_url)
    params["dbname"] = dbname
    return make_conninfo(**{k: str(v) for k, v in params.items() if v is not None})


@pytest.fixture(scope="session")
def fresh_database(pg_server_url: str) -> Iterator[object]:
    """Makes empty databases on the server and drops them at the end of the session."""
    created: list[str] = []

    def make() -> str:
        name = f"tollgate_test_{os.getpid()}_{secrets.token_hex(4)}"
        with psycopg.connect(pg_server_url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        created.append(name)
        return database_url_for(pg_server_url, name)

    yield make
    with psycopg.connect(pg_server_url, autocommit=True) as conn:
        for name in created:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def database_url(fresh_database: object) -> str:
    url: str = fresh_database()  # type: ignore[operator]
    apply_migrations(url, MIGRATIONS)
    return url


@pytest.fixture
def clean_db(database_url: str) -> str:
    with psycopg.connect(database_url) as conn:
        conn.execute(f"TRUNCATE {TABLES} CASCADE")
    return database_url


@pytest.fixture(scope="session")
def migrations_dir() -> Path:
    return MIGRATIONS
