"""The migration runner: ordered, checksummed, transactional, safe when two run at once."""

from __future__ import annotations

import re
import shutil
import threading
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from tollgate.core.job_states import CANCELLABLE_STATES, UNFINISHED_STATES, JobState
from tollgate.db.migrations import MigrationError, apply_migrations, read_migrations
from tollgate.delivery.states import DeliveryState
from tollgate.settings import MIGRATIONS_DIR

pytestmark = pytest.mark.integration


def test_all_migrations_apply_to_an_empty_database_and_again_as_a_no_op(fresh_database, migrations_dir):
    url = fresh_database()
    applied = apply_migrations(url, migrations_dir)
    assert [m.version for m in applied] == [m.version for m in read_migrations(migrations_dir)]
    assert apply_migrations(url, migrations_dir) == []


def test_an_edited_migration_is_refused(fresh_database, migrations_dir, tmp_path):
    url = fresh_database()
    copy = tmp_path / "migrations"
    shutil.copytree(migrations_dir, copy)
    apply_migrations(url, copy)
    first = sorted(copy.glob("*.sql"))[0]
    first.write_text(first.read_text() + "\n-- a quiet edit\n")

    with pytest.raises(MigrationError, match="edited after it was applied"):
        apply_migrations(url, copy)


def test_a_failing_migration_leaves_nothing_behind(fresh_database, migrations_dir, tmp_path):
    url = fresh_database()
    copy = tmp_path / "migrations"
    shutil.copytree(migrations_dir, copy)
    version = len(list(copy.glob("*.sql"))) + 1
    (copy / f"{version:04d}_broken.sql").write_text("CREATE TABLE half_done (id int);\nSELECT 1/0;\n")

    with pytest.raises(psycopg.errors.DivisionByZero):
        apply_migrations(url, copy)

    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT to_regclass('half_done')").fetchone()[0] is None
        recorded = conn.execute("SELECT max(version) FROM schema_migrations").fetchone()[0]
    assert recorded == version - 1


def test_gaps_in_numbering_are_refused(tmp_path):
    (tmp_path / "0001_a.sql").write_text("SELECT 1;")
    (tmp_path / "0003_c.sql").write_text("SELECT 1;")
    with pytest.raises(MigrationError, match="without gaps"):
        read_migrations(tmp_path)


def test_a_missing_migrations_folder_is_an_error_not_nothing_to_apply(fresh_database, tmp_path):
    with pytest.raises(MigrationError, match="no migrations folder"):
        apply_migrations(fresh_database(), tmp_path / "not-there")


def test_two_runners_at_once_apply_each_migration_once(fresh_database, migrations_dir):
    url = fresh_database()
    results: list[list] = []
    errors: list[BaseException] = []
    start = threading.Barrier(2)

    def run() -> None:
        start.wait()
        try:
            results.append(apply_migrations(url, migrations_dir))
        except BaseException as error:  # surfaced below
            errors.append(error)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert errors == []
    assert sorted(len(r) for r in results) == [0, len(read_migrations(migrations_dir))]


def test_the_job_state_enum_mirrors_the_check_constraint(database_url):
    with psycopg.connect(database_url) as conn:
        (definition,) = conn.execute(
            "SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conname = 'extraction_jobs_state_check'"
        ).fetchone()
    states_in_db = set(re.findall(r"'([A-Z_]+)'", definition))
    assert states_in_db == {s.value for s in JobState}


def test_the_provider_batch_state_enum_mirrors_the_check_constraint(database_url):
    from tollgate.execution.batch.states import BatchState

    with psycopg.connect(database_url) as conn:
        (definition,) = conn.execute(
            "SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conname = 'provider_batches_state_check'"
        ).fetchone()
    assert set(re.findall(r"'([a-z_]+)'", definition)) == {s.value for s in BatchState}


def test_the_delivery_state_enum_mirrors_the_check_constraint(database_url):
    with psycopg.connect(database_url) as conn:
        (definition,) = conn.execute(
            "SELECT pg_get_constraintdef(oid) FROM pg_constraint"
            " WHERE conname = 'webhook_deliveries_state_check'"
        ).fetchone()
    states_in_db = set(re.findall(r"'([A-Z_]+)'", definition))
    assert states_in_db == {s.value for s in DeliveryState}


def test_sql_state_lists_match_the_state_machine():
    from tollgate.db import load_queries

    q = load_queries()
    # A RUNNING job is cancelled only while it waits in a provider batch (the SQL says which).
    assert (
        "state IN ('READY', 'RETRY_SCHEDULED') OR (state = 'RUNNING' AND batch_id IS NOT NULL)"
        in q.cancel_job
    )
    assert {JobState.READY, JobState.RETRY_SCHEDULED, JobState.RUNNING} == CANCELLABLE_STATES
    # Unfinished work is counted by the run-queue trigger and recounted by its reconciliation (migration 0010).
    unfinished_sql = "state IN ('READY', 'RUNNING', 'RETRY_SCHEDULED')"
    run_queues = (MIGRATIONS_DIR / "0010_run_queues.sql").read_text()
    trigger = run_queues[run_queues.index("CREATE FUNCTION track_job_queues") :]
    recount = run_queues[run_queues.index("CREATE FUNCTION tenant_queue_recount") :]
    assert unfinished_sql in trigger[: trigger.index("$$;")]
    assert unfinished_sql in recount[: recount.index("$$;")]
    assert {JobState.READY, JobState.RUNNING, JobState.RETRY_SCHEDULED} == UNFINISHED_STATES


@pytest.mark.parametrize(
    ("assignment", "constraint"),
    [
        (
            "state = 'SUCCEEDED', finished_at = now(), lease_owner = 'w', lease_until = now()",
            "running_iff_leased",
        ),
        ("state = 'RUNNING'", "running_iff_leased"),
        ("state = 'FAILED_TERMINAL'", "finished_iff_terminal"),
        ("state = 'RETRY_SCHEDULED'", "retry_has_due_time"),
        ("attempt = max_attempts + 1", "attempts_within_budget"),
        ("lease_owner = 'w'", "no_lease_fields_half_set"),
    ],
)
def test_the_schema_refuses_impossible_job_rows(tenant, clean_db, assignment, constraint):
    from tests.support import invoice_request

    job_id = tenant.client.submit(invoice_request(), "k").json["job_id"]
    with psycopg.connect(clean_db) as conn, pytest.raises(psycopg.errors.CheckViolation, match=constraint):
        conn.execute(f"UPDATE extraction_jobs SET {assignment} WHERE job_id = %s", (job_id,))


def test_the_run_queue_migration_backfills_a_live_database_with_jobs_in_every_state(
    fresh_database, migrations_dir, tmp_path
):
    """Migration 0010 on a database that already holds jobs in every state: the counters it fills equal a
    recount, the backlog shards count every unfinished job, and only tenants with work due are runnable."""
    url = fresh_database()
    before = tmp_path / "before"
    before.mkdir()
    for path in sorted(migrations_dir.glob("*.sql")):
        if int(path.name[:4]) < 10:
            shutil.copy(path, before / path.name)
    apply_migrations(url, before)
    busy, idle, waiting = (uuid.uuid4() for _ in range(3))
    with psycopg.connect(url, autocommit=True) as conn:
        for tenant in (busy, idle, waiting):
            conn.execute("INSERT INTO tenants (tenant_id, name) VALUES (%s, %s)", (tenant, str(tenant)))
        # Every state the schema had then (REJECTED came with migration 0014).
        states = [s for s in JobState if s is not JobState.REJECTED] * 2
        for index, state in enumerate(states):
            insert_old_job(conn, busy, index, state)
        insert_old_job(conn, idle, 0, JobState.SUCCEEDED)
        insert_old_job(conn, waiting, 0, JobState.RETRY_SCHEDULED)

    apply_migrations(url, migrations_dir)

    with psycopg.connect(url, row_factory=dict_row) as conn:
        for tenant in (busy, idle, waiting):
            kept = conn.execute(
                QUEUE_COLUMNS + " FROM tenant_queues WHERE tenant_id = %s", (tenant,)
            ).fetchone()
            recount = conn.execute(QUEUE_COLUMNS + " FROM tenant_queue_recount(%s)", (tenant,)).fetchone()
            assert kept == recount
        busy_row = conn.execute(
            "SELECT pending_jobs, running_jobs, ready_jobs, retry_jobs, runnable FROM tenant_queues"
            " WHERE tenant_id = %s",
            (busy,),
        ).fetchone()
        assert busy_row == {
            "pending_jobs": 6,
            "running_jobs": 2,
            "ready_jobs": 2,
            "retry_jobs": 2,
            "runnable": True,
        }
        runnable = conn.execute("SELECT tenant_id FROM tenant_queues WHERE runnable").fetchall()
        assert [r["tenant_id"] for r in runnable] == [busy]  # the retry waits an hour; the idle has none
        shards = conn.execute("SELECT sum(unfinished) AS u, sum(running) AS r FROM backlog_shards").fetchone()
        assert (shards["u"], shards["r"]) == (7, 2)


QUEUE_COLUMNS = (
    "SELECT pending_jobs, pending_bytes, pending_tokens, running_jobs, ready_jobs, retry_jobs,"
    " next_ready_at::text AS next_ready_at"
)


def insert_old_job(conn: psycopg.Connection[Any], tenant: uuid.UUID, index: int, state: JobState) -> None:
    """A job row as the schema before migration 0010 allows it, in ``state``."""
    document = uuid.uuid4()
    conn.execute(
        "INSERT INTO documents (document_id, tenant_id, content_sha256, size_bytes, page_count, s3_key,"
        " s3_version_id) VALUES (%s, %s, %s, 100, 1, 'k', 'v')",
        (document, tenant, uuid.uuid4().hex * 2),
    )
    running = state is JobState.RUNNING
    conn.execute(
        "INSERT INTO extraction_jobs (job_id, tenant_id, idempotency_key, request_hash, job_type, document_id,"
        " schema_version, model_policy, max_attempts, estimated_tokens, document_bytes, deadline_at, state,"
        " attempt, lease_owner, lease_until, next_attempt_at, finished_at)"
        " VALUES (%s, %s, %s, repeat('b', 64), 'invoice_extraction', %s, 'invoice.v1', 'auto', 3, 1000, 100,"
        " now() + interval '1 day', %s, %s, %s, %s, %s, %s)",
        (
            uuid.uuid4(),
            tenant,
            f"k-{index}",
            document,
            state.value,
            1 if state is not JobState.READY else 0,
            "w" if running else None,
            _in(minutes=5) if running else None,
            _in(hours=1) if state is JobState.RETRY_SCHEDULED else None,
            _in() if state.is_finished else None,
        ),
    )


def _in(**delta: float) -> datetime:
    return datetime.now(UTC) + timedelta(**delta)


def test_keys_made_before_scopes_keep_every_scope(fresh_database, migrations_dir, tmp_path):
    from uuid import uuid4

    before = tmp_path / "before-scopes"
    before.mkdir()
    for path in sorted(migrations_dir.glob("*.sql")):
        if int(path.name[:4]) < 13:
            shutil.copy(path, before / path.name)
    url = fresh_database()
    apply_migrations(url, before)
    tenant_id, key_id = uuid4(), uuid4()
    with psycopg.connect(url) as conn:
        conn.execute("INSERT INTO tenants (tenant_id, name) VALUES (%s, 'old')", (tenant_id,))
        conn.execute(
            "INSERT INTO api_keys (key_id, tenant_id, key_hash, key_prefix) VALUES (%s, %s, %s, 'tg_old')",
            (key_id, tenant_id, uuid4().bytes * 2),
        )

    apply_migrations(url, migrations_dir)

    with psycopg.connect(url) as conn:
        (scopes,) = conn.execute("SELECT scopes FROM api_keys WHERE key_id = %s", (key_id,)).fetchone()
    assert set(scopes) == {"jobs:write", "jobs:read", "review", "webhooks:admin", "ops:read"}
