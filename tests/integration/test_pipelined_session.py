"""Database.pipelined: its transactions commit whole or not at all, and its connection goes back to the pool
as the pool's other connections are (transactional, no role, no tenant)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from uuid import UUID

import psycopg
import pytest
from psycopg.pq import TransactionStatus
from pydantic import SecretStr

from tollgate.core.clock import new_id
from tollgate.db import Database, build_database
from tollgate.settings import DatabaseSettings
from tollgate.tenants.keys import create_tenant

pytestmark = pytest.mark.integration

INSERT = (
    "INSERT INTO documents (document_id, tenant_id, content_sha256, s3_key, s3_version_id, size_bytes, page_count)"
    " VALUES (%s, %s, %s, 'k', 'v', 1, 1)"
)
COUNT = "SELECT count(*) AS n FROM documents WHERE tenant_id = %s"
SCOPE = "SELECT current_user AS role, current_setting('tollgate.tenant_id', true) AS tenant"


@pytest.fixture
def one_connection_db(database_url: str) -> Iterator[Database]:
    """The API's role on a pool of one, so the connection a test hands back is the next one lent."""
    settings = DatabaseSettings(database_url=SecretStr(database_url), database_pool_size=1)
    db = build_database(settings, pool_name="pipelined-test")
    yield db
    db.close()


@pytest.fixture
def tenant_id(clean_db: str, system_db: Database) -> UUID:
    return create_tenant(system_db, "pipelined", new_id).tenant_id


def documents(db: Database, tenant_id: UUID) -> int:
    with db.transaction(tenant_id) as conn:
        row = conn.execute(COUNT, (tenant_id,)).fetchone()
    assert row is not None
    return int(row["n"])


def assert_lent_back_clean(db: Database) -> None:
    with db.pool.connection() as conn:
        assert conn.autocommit is False
        assert conn.info.transaction_status == TransactionStatus.IDLE
        row = conn.execute(SCOPE).fetchone()
        conn.rollback()
    assert row is not None
    assert row["tenant"] in (None, "")
    assert row["role"] != "tollgate_app"


def insert(conn: psycopg.Connection, tenant_id: UUID, *letters: str) -> None:
    for letter in letters:
        conn.execute(INSERT, (new_id(), tenant_id, letter * 64))


def run_in_one_transaction(
    db: Database, tenant_id: UUID, block: Callable[[psycopg.Connection], None]
) -> None:
    with db.pipelined() as session, session.transaction(tenant_id) as conn:
        block(conn)


def test_a_committed_transaction_keeps_every_statement_and_reads_see_the_tenant(one_connection_db, tenant_id):
    with one_connection_db.pipelined() as session:
        with session.transaction(tenant_id) as conn:
            insert(conn, tenant_id, "a", "b")
            scope = conn.execute(SCOPE)
        row = scope.fetchone()
        with session.transaction(tenant_id) as conn:
            counted = conn.execute(COUNT, (tenant_id,))
        assert counted.fetchone() == {"n": 2}

    assert row == {"role": "tollgate_app", "tenant": str(tenant_id)}
    assert documents(one_connection_db, tenant_id) == 2
    assert_lent_back_clean(one_connection_db)


def test_a_statement_that_fails_undoes_the_statements_before_it(one_connection_db, tenant_id):
    # The second insert fails only on the server, after the first was sent.
    with pytest.raises(psycopg.errors.UniqueViolation):
        run_in_one_transaction(one_connection_db, tenant_id, lambda conn: insert(conn, tenant_id, "a", "a"))

    assert documents(one_connection_db, tenant_id) == 0
    assert_lent_back_clean(one_connection_db)


class Refused(Exception):
    pass


def test_an_exception_in_the_block_undoes_what_it_sent(one_connection_db, tenant_id):
    def refuse(conn: psycopg.Connection) -> None:
        insert(conn, tenant_id, "a")
        raise Refused

    with pytest.raises(Refused):
        run_in_one_transaction(one_connection_db, tenant_id, refuse)

    assert documents(one_connection_db, tenant_id) == 0
    assert_lent_back_clean(one_connection_db)


def test_after_a_failed_transaction_the_session_runs_the_next_one(one_connection_db, tenant_id):
    failed = []
    with one_connection_db.pipelined() as session:
        try:
            with session.transaction(tenant_id) as conn:
                insert(conn, tenant_id, "a", "a")
        except psycopg.errors.UniqueViolation as error:
            failed.append(error)
        with session.transaction(tenant_id) as conn:
            insert(conn, tenant_id, "c")

    assert len(failed) == 1
    assert documents(one_connection_db, tenant_id) == 1
    assert_lent_back_clean(one_connection_db)


def test_a_connection_that_dies_while_lent_is_dropped_not_reused(one_connection_db, tenant_id, database_url):
    def die(conn: psycopg.Connection) -> None:
        insert(conn, tenant_id, "a")
        pid = conn.execute("SELECT pg_backend_pid() AS pid").fetchone()
        assert pid is not None
        with psycopg.connect(database_url, autocommit=True) as killer:
            killer.execute("SELECT pg_terminate_backend(%s)", (pid["pid"],))
        conn.execute("SELECT 1").fetchone()

    with pytest.raises(psycopg.OperationalError):
        run_in_one_transaction(one_connection_db, tenant_id, die)

    assert documents(one_connection_db, tenant_id) == 0  # on a new connection: the pool dropped the dead one
    assert_lent_back_clean(one_connection_db)
