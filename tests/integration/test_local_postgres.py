"""The databases local runs use on DATABASE_URL's server: a run's scratch database is dropped when it ends, a
kept one (`tollgate local demo --keep`) outlives it and is named for the run, and DATABASE_URL's own database
is never written to."""

from __future__ import annotations

import psycopg
import pytest

from tollgate_dev.local.postgres import (
    drop_database,
    kept_database,
    scratch_database,
    with_dbname,
    without_password,
)


def database_exists(url: str, name: str) -> bool:
    with psycopg.connect(url) as conn:
        return conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() is not None


def test_a_kept_database_outlives_the_run_and_a_scratch_one_does_not(fresh_database, monkeypatch, tmp_path):
    server = fresh_database()
    monkeypatch.setenv("DATABASE_URL", server)

    with scratch_database(tmp_path, "tollgate_demo") as scratch:
        psycopg.connect(scratch.url).close()
    with kept_database(tmp_path, "tollgate_demo") as kept, psycopg.connect(kept.url, autocommit=True) as conn:
        conn.execute("CREATE TABLE visited (at timestamptz DEFAULT now())")
        conn.execute("INSERT INTO visited DEFAULT VALUES")
    try:
        assert not database_exists(server, scratch.name)
        assert kept.name.startswith("tollgate_demo_") and kept.server == "on DATABASE_URL's server"
        assert kept.url == with_dbname(server, kept.name)
        with psycopg.connect(kept.url) as conn:
            assert conn.execute("SELECT count(*) FROM visited").fetchone() == (1,)
        with psycopg.connect(server) as conn:
            assert conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'").fetchone() == (
                0,
            )
    finally:
        drop_database(server, kept.name)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://demo:s3cret@127.0.0.1:5432/tollgate_demo_1", "tollgate_demo_1"),
        ("host=127.0.0.1 user=demo dbname=tollgate_demo_1", "tollgate_demo_1"),
    ],
)
def test_a_kept_database_is_shown_without_its_password(url, shown):
    text = without_password(url)

    assert "s3cret" not in text and "password" not in text
    assert f"dbname={shown}" in text and "user=demo" in text
