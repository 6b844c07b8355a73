"""A module imported at its first real use, so defining or dispatching a command does not import what only
running it in one mode needs (the operations' models are for stage mode; a local read does not load them)."""

from __future__ import annotations

import importlib
from typing import Any


class Deferred:
    """Stands for the module ``name``: ``ops.ListJobs`` is a reference that imports the module only when it
    is called or looked into (``ops.ListJobs(...)``, ``ops.DeadLetterView.of(...)``), or ``resolve``d."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attribute: str) -> Any:
        return DeferredAttribute(self._name, attribute)


class DeferredAttribute:
    def __init__(self, module: str, name: str) -> None:
        self._module = module
        self._name = name

    def resolve(self) -> Any:
        return getattr(importlib.import_module(self._module), self._name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.resolve()(*args, **kwargs)

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self.resolve(), attribute)


def resolve(value: Any) -> Any:
    """The object itself, for a deferred reference; anything else unchanged."""
    return value.resolve() if isinstance(value, DeferredAttribute) else value
