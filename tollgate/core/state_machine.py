"""A state machine as data: the allowed transitions of one aggregate's states, and the check every use case
that changes a state runs before it writes. Jobs and webhook deliveries each have one."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Generic, TypeVar

S = TypeVar("S", bound=StrEnum)


class IllegalTransition(ValueError):
    """A use case asked for a state change its state machine does not have: a bug, never a user's error."""


@dataclass(frozen=True)
class StateMachine(Generic[S]):
    aggregate: str  # what the states belong to, for the error: "job", "delivery"
    transitions: Mapping[S, frozenset[S]]

    def can_transition(self, source: S, target: S) -> bool:
        return target in self.transitions[source]

    def checked_transition(self, sources: S | frozenset[S], target: S) -> S:
        """``target``, once every state in ``sources`` may move to it; raises ``IllegalTransition`` otherwise.

        Called with the states the use case's SQL moves from (its ``WHERE state ...``) and the state it
        writes, before the query runs.
        """
        for source in sorted(sources) if isinstance(sources, frozenset) else (sources,):
            if not self.can_transition(source, target):
                raise IllegalTransition(f"a {self.aggregate} cannot go from {source} to {target}")
        return target
