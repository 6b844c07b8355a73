"""A module imported at its first use, so defining a command does not import what only running it needs."""

from __future__ import annotations

import importlib
from typing import Any


class Deferred:
    """Stands for the module ``name`` and imports it when an attribute is first read (``ops.ListJobs``)."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attribute: str) -> Any:
        return getattr(importlib.import_module(self._name), attribute)
