"""Forward-only, numbered, checksummed migrations, applied in order under an advisory lock.

A file ``NNNN_name.sql`` runs once, in its own transaction. Editing a file after it ran is refused (its
checksum no longer matches), and two runners started together apply each file once: the second waits on
the lock, then finds nothing left to do.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

import psycopg
from psycopg.rows import dict_row

from tollgate.db.queries import load_queries

# Arbitrary but fixed: every runner of this project contends for the same lock.
MIGRATION_LOCK_ID = 7_314_227_001
_FILE_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


class MigrationError(RuntimeError):
    """The migrations on disk and in the database disagree; nothing was applied past the problem."""


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode("utf-8")).hexdigest()


def read_migrations(directory: Path) -> list[Migration]:
    if not directory.is_dir():
        # Not "nothing to apply": a missing folder would otherwise look like an up-to-date database.
        raise MigrationError(f"no migrations folder at {directory}")
    migrations: list[Migration] = []
    for path in sorted(directory.glob("*.sql")):
        match = _FILE_NAME.match(path.name)
        if match is None:
            raise MigrationError(f"{path.name}: migration files are named NNNN_lower_snake.sql")
        migrations.append(Migration(int(match[1]), match[2], path.read_text(encoding="utf-8")))
    versions = [m.version for m in migrations]
    if versions != list(range(1, len(versions) + 1)):
        raise MigrationError(
            f"migration numbers must run 1, 2, 3, … without gaps or repeats; found {versions}"
        )
    return migrations


def apply_migrations(conninfo: str, directory: Path) -> list[Migration]:
    """Applies what is not yet applied; returns the migrations this call ran."""
    migrations = read_migrations(directory)
    q = load_queries()
    applied_now: list[Migration] = []
    with psycopg.connect(conninfo, autocommit=True, row_factory=dict_row) as conn:
        conn.execute(q.migrations_lock, {"lock_id": MIGRATION_LOCK_ID})
        try:
            conn.execute(q.migrations_create_table)
            applied = {row["version"]: row for row in conn.execute(q.migrations_applied)}
            on_disk = {m.version for m in migrations}
            unknown = sorted(set(applied) - on_disk)
            if unknown:
                raise MigrationError(
                    f"the database has migrations {unknown} that this code does not know; deploy newer code"
                )
            for migration in migrations:
                row = applied.get(migration.version)
                if row is not None:
                    if row["checksum"] != migration.checksum:
                        raise MigrationError(
                            f"migration {migration.version:04d}_{row['name']} was edited after it was "
                            "applied; migrations are forward-only: add a new file instead"
                        )
                    continue
                with conn.transaction():
                    # The file is trusted project source, shipped with the code: run it as written.
                    conn.execute(migration.sql.encode("utf-8"))
                    conn.execute(
                        q.migrations_record,
                        {
                            "version": migration.version,
                            "name": migration.name,
                            "checksum": migration.checksum,
                        },
                    )
                applied_now.append(migration)
        finally:
            conn.execute(q.migrations_unlock, {"lock_id": MIGRATION_LOCK_ID})
    return applied_now
