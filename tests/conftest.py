"""Shared fixtures: a real PostgreSQL database per test process (DATABASE_URL's server, or the embedded
one) with all migrations applied, and moto as a real HTTP server on 127.0.0.1. Every test is also held to
leaving the process as it found it: its environment variables and its non-daemon threads."""

from __future__ import annotations

import os
import secrets
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tollgate.db.migrations import apply_migrations
from tollgate.settings import REPO_ROOT
from tollgate_dev.local.postgres import create_database, drop_database, with_dbname

MIGRATIONS = REPO_ROOT / "migrations"
# Tenants first: CASCADE reaches every table that refers to them; the rest have no tenant key (a provider
# batch carries several tenants' jobs).
TABLES = "tenants, outbox_events, inbox_quarantine, support_audit, provider_batches"
# A thread a test stopped may still be on its way out; this bounds the wait for it on a loaded machine.
THREAD_EXIT_SECONDS = 60.0
# pytest itself names the running test and phase here.
PYTEST_OWN = "PYTEST_CURRENT_TEST"


def environment_changes(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """Names whose value differs between two snapshots of os.environ (values are not shown: secrets)."""
    names = (before.keys() | after.keys()) - {PYTEST_OWN}
    return sorted(name for name in names if before.get(name) != after.get(name))


def lingering_threads(before: set[threading.Thread], timeout: float) -> list[str]:
    """Non-daemon threads started since ``before`` that are still alive once ``timeout`` has passed."""
    deadline = time.monotonic() + timeout
    for thread in set(threading.enumerate()) - before:
        if not thread.daemon:
            thread.join(max(0.0, deadline - time.monotonic()))
    return sorted(t.name for t in set(threading.enumerate()) - before if not t.daemon and t.is_alive())


# Library code the local system patches while it runs (moto's Lambda invoke for the dispatcher, its DynamoDB
# handler for atomic conditions): (module, class, attribute).
PATCH_POINTS = (
    ("moto.awslambda.models", "LambdaFunction", "_invoke_lambda"),
    ("moto.dynamodb.responses", "DynamoHandler", "call_action"),
)


def patched_library_code() -> dict[tuple[str, str, str], object]:
    """The patch points of modules already imported, each with the function now in place."""
    return {
        (module, owner, attribute): getattr(getattr(sys.modules[module], owner), attribute)
        for module, owner, attribute in PATCH_POINTS
        if module in sys.modules
    }


def patches_left(before: dict[tuple[str, str, str], object]) -> list[str]:
    """Patch points that differ from the start of the test, or, for a module first imported during it, whose
    function is not the library's own."""
    left = []
    for point, function in patched_library_code().items():
        unchanged = before[point] is function if point in before else function.__module__ == point[0]
        if not unchanged:
            left.append(".".join(point))
    return left


@pytest.fixture(autouse=True)
def leaves_the_process_as_it_found_it() -> Iterator[None]:
    """Fails a test that changes os.environ without restoring it, leaves a non-daemon thread running, or
    leaves library code patched.

    Autouse and function-scoped, so it is set up after session and module fixtures and torn down after
    the test's own fixtures: what those wider fixtures hold is theirs to put back when they end (the
    session check below), and what the test or its fixtures changed must be back by the end of the test.
    """
    environment = dict(os.environ)
    threads = set(threading.enumerate())
    library = patched_library_code()
    yield
    changed = environment_changes(environment, dict(os.environ))
    # Put it back first, so one leak is reported once and not again by every later test in this process.
    for name in changed:
        if name in environment:
            os.environ[name] = environment[name]
        else:
            del os.environ[name]
    left = lingering_threads(threads, THREAD_EXIT_SECONDS)
    assert not changed, f"the test changed these environment variables and did not restore them: {changed}"
    assert not left, f"the test left these non-daemon threads running: {left}"
    patched = patches_left(library)
    assert not patched, f"the test left this library code patched: {patched}"


@pytest.fixture(scope="session", autouse=True)
def session_leaves_the_environment_as_it_found_it() -> Iterator[None]:
    """Session and module fixtures (the shared moto server, say) must restore what they set, too."""
    environment = dict(os.environ)
    yield
    changed = environment_changes(environment, dict(os.environ))
    assert not changed, f"session or module fixtures left these environment variables changed: {changed}"


@pytest.fixture(scope="session")
def pg_server_url() -> Iterator[str]:
    url = os.environ.get("DATABASE_URL")
    if url:
        yield url
        return
    from tollgate_dev.local.postgres import embedded_server

    # One embedded server for every test process of this checkout; each process makes its own database.
    server = embedded_server(REPO_ROOT / ".tollgate" / "test-pgdata")
    yield server.get_uri()


@pytest.fixture(scope="session")
def fresh_database(pg_server_url: str) -> Iterator[object]:
    """Makes empty databases on the server and drops them at the end of the session."""
    created: list[str] = []

    def make() -> str:
        name = f"tollgate_test_{os.getpid()}_{secrets.token_hex(4)}"
        create_database(pg_server_url, name)
        created.append(name)
        return with_dbname(pg_server_url, name)

    yield make
    for name in created:
        drop_database(pg_server_url, name)


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
