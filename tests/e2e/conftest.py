"""Shared setup of the end-to-end stories: the whole local system on a migrated database of its own."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tollgate_dev.local.runtime import LocalStack
from tollgate_dev.simulator.server import Latency, SimulatorConfig


@pytest.fixture
def local_stack(fresh_database, tmp_path) -> Iterator[Callable[..., LocalStack]]:
    """Starts the local system (API, workers, relay, scheduler, moto, simulator, demo ERP) on a fresh,
    migrated database; the simulator has no quotas and answers at once unless told otherwise. Everything
    started is stopped when the test ends, and the test fails if an entrypoint made an undeclared AWS call."""
    from tollgate.db.migrations import apply_migrations
    from tollgate.settings import REPO_ROOT

    started: list[LocalStack] = []

    def start(
        *, worker_overrides: dict[str, Any] | None = None, data_dir: Path | None = None, **simulator: Any
    ) -> LocalStack:
        url = fresh_database()
        apply_migrations(url, REPO_ROOT / "migrations")
        config = SimulatorConfig(
            **{"requests_per_minute": None, "tokens_per_minute": None, "latency": Latency(0.0), **simulator}
        )
        local = LocalStack(
            port=0,
            data_dir=data_dir or tmp_path,
            database_url=url,
            simulator_config=config,
            worker_overrides=worker_overrides or {},
        ).start()
        started.append(local)
        return local

    yield start
    for local in started:
        local.stop()
    # Raised where they were made too, but a caller that retries every error would hide one: every story
    # proves its entrypoints call only what tollgate.core.reach declares (and so what they are granted).
    assert [call for local in started for call in local.undeclared_calls] == []
