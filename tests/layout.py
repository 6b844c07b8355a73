"""Reads which project modules a set of Python files imports, without importing them: the packaging tests use
it to prove the Lambda asset and the worker image run without the development package."""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from pathlib import Path

PROJECT_PACKAGES = ("tollgate", "tollgate_dev", "functions", "worker", "stacks", "tests", "bench")


def imported_modules(path: Path) -> Iterator[str]:
    """Every project module ``path`` imports, at its top or inside a function (a lazy import still runs)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from tollgate.core import metrics` may name a module or an attribute: both are tried.
            names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        else:
            continue
        yield from (name for name in names if name.split(".")[0] in PROJECT_PACKAGES)


def module_file(root: Path, module: str) -> Path | None:
    base = root.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def missing_imports(root: Path, entry_files: Iterable[Path]) -> dict[str, str]:
    """Follows the imports from ``entry_files`` through ``root``; returns each project module that is not
    there, with the file that asked for it. Attribute imports (``from x import name``) are not modules."""
    missing: dict[str, str] = {}
    seen: set[Path] = set()
    pending = list(entry_files)
    while pending:
        path = pending.pop()
        if path in seen:
            continue
        seen.add(path)
        for module in imported_modules(path):
            found = module_file(root, module)
            if found is not None:
                pending.append(found)
                continue
            parent = module.rpartition(".")[0]
            if parent and module_file(root, parent) is not None:
                continue  # `from package import name`: a name defined in the package, not a module
            missing.setdefault(module, str(path.relative_to(root)))
    return missing


def python_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)


def tree_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
