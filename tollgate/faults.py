"""Crash points: named places where a process can be told to die at once, as a kill -9 would leave it.

Used by the fault-injection tests and the chaos run to prove that a crash at the worst moment loses
nothing and duplicates nothing. Armed only when the process's settings name them; otherwise inert.
"""

from __future__ import annotations

import os

_armed: frozenset[str] = frozenset()

AFTER_PROVIDER_RESPONSE = "after_provider_response"
BEFORE_SQS_DELETE = "before_sqs_delete"
# The relay published a batch but has not marked it published: the next relay sends it again.
RELAY_AFTER_PUBLISH = "relay_after_publish"


def arm(names: frozenset[str]) -> None:
    global _armed  # noqa: PLW0603 - one process-wide switch, set once at start
    _armed = names


def crashpoint(name: str) -> None:
    if name in _armed:
        os._exit(137)
