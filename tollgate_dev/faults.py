"""Crash points: the production code's checkpoints (``tollgate.core.checkpoints``) made deadly, so that a
process dies at once there, as a kill -9 would leave it.

Used by the fault-injection tests and the chaos run to prove that a crash at the worst moment loses
nothing and duplicates nothing. A harness entrypoint arms the points from ``FaultSettings`` at start; the
production entrypoints never do, so their checkpoints stay inert.

Two ways to arm: by name at start (the process dies the first time it meets the point), or by tokens in a
folder that a harness fills while the processes run (the next process to meet the point takes the token and
dies; each token is taken by exactly one process, however many race for it).
"""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from tollgate.core import checkpoints
from tollgate.core.checkpoints import (
    AFTER_PROVIDER_RESPONSE,
    BATCH_AFTER_CREATE,
    BATCH_LINE_COMMITTED,
    BEFORE_SQS_DELETE,
    CHECKPOINTS,
    RELAY_AFTER_PUBLISH,
)

__all__ = [
    "AFTER_PROVIDER_RESPONSE",
    "BATCH_AFTER_CREATE",
    "BATCH_LINE_COMMITTED",
    "BEFORE_SQS_DELETE",
    "CRASH_STATUS",
    "RELAY_AFTER_PUBLISH",
    "TAKEN",
    "FaultSettings",
    "arm",
    "arm_from",
    "crashpoint",
    "disarm",
    "taken_name",
    "token_name",
]

CRASH_STATUS = 137  # what a kill -9 leaves, so a watcher cannot tell the two apart
TAKEN = "taken"  # the tokens folder's subfolder where a taken token is moved, named for its taker
_SEPARATOR = "@"

_armed: frozenset[str] = frozenset()
_tokens: Path | None = None


class FaultSettings(BaseSettings):
    """How a harness-run process (a worker, the relay) is told where to die."""

    model_config = SettingsConfigDict(extra="ignore")

    crashpoints: frozenset[str] = Field(
        default=frozenset(), description="Die the first time one of these checkpoints is reached."
    )
    crash_tokens_dir: Path | None = Field(
        default=None, description="Die at a checkpoint when a token for it can be taken from this folder."
    )


def arm(names: frozenset[str], tokens: Path | None = None) -> None:
    unknown = names - CHECKPOINTS
    if unknown:
        raise ValueError(f"no such checkpoints: {sorted(unknown)} (known: {sorted(CHECKPOINTS)})")
    global _armed, _tokens  # one process-wide switch, set once at start
    _armed, _tokens = names, tokens
    checkpoints.listen(crashpoint)


def arm_from(settings: FaultSettings) -> None:
    arm(settings.crashpoints, settings.crash_tokens_dir)


def disarm() -> None:
    global _armed, _tokens
    _armed, _tokens = frozenset(), None
    checkpoints.listen(None)


def crashpoint(name: str) -> None:
    if name in _armed or (_tokens is not None and _take_token(_tokens, name)):
        os._exit(CRASH_STATUS)


def token_name(point: str, number: int) -> str:
    return f"{point}{_SEPARATOR}{number}"


def taken_name(token: str, pid: int) -> str:
    """The name a token gets in ``TAKEN`` when the process ``pid`` took it."""
    return f"{token}{_SEPARATOR}{pid}"


def _take_token(folder: Path, point: str) -> bool:
    try:
        waiting = sorted(name for name in os.listdir(folder) if name.startswith(point + _SEPARATOR))
    except OSError:
        return False  # the harness removed the folder: nothing is armed any more
    for token in waiting:
        try:
            # A rename is atomic: of the processes racing for one token, exactly one moves it.
            os.rename(folder / token, folder / TAKEN / taken_name(token, os.getpid()))
        except OSError:
            continue  # another process took it first
        return True
    return False
