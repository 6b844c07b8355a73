"""Crash points: named places where a process can be told to die at once, as a kill -9 would leave it.

Used by the fault-injection tests and the chaos run to prove that a crash at the worst moment loses
nothing and duplicates nothing. Armed only when the process's settings name them; otherwise inert.

Two ways to arm: by name at start (the process dies the first time it meets the point), or by tokens in a
folder that a harness fills while the processes run (the next process to meet the point takes the token and
dies; each token is taken by exactly one process, however many race for it).
"""

from __future__ import annotations

import os
from pathlib import Path

_armed: frozenset[str] = frozenset()
_tokens: Path | None = None

AFTER_PROVIDER_RESPONSE = "after_provider_response"
BEFORE_SQS_DELETE = "before_sqs_delete"
# The relay published a batch but has not marked it published: the next relay sends it again.
RELAY_AFTER_PUBLISH = "relay_after_publish"

CRASH_STATUS = 137  # what a kill -9 leaves, so a watcher cannot tell the two apart
TAKEN = "taken"  # the tokens folder's subfolder where a taken token is moved, named for its taker
_SEPARATOR = "@"


def arm(names: frozenset[str], tokens: Path | None = None) -> None:
    global _armed, _tokens  # one process-wide switch, set once at start
    _armed, _tokens = names, tokens


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
