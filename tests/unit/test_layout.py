"""The runtime package never reaches for the development harness: the harness imports production code,
never the reverse (CONVENTIONS 21)."""

from __future__ import annotations

from pathlib import Path

from tests.layout import imported_modules, python_files
from tollgate.settings import REPO_ROOT

# What runs in production: the Lambdas' code, the worker image and the CDK app.
PRODUCTION = ("tollgate", "functions", "worker", "stacks")


def dev_imports(folders: tuple[str, ...]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for folder in folders:
        for path in python_files(REPO_ROOT / folder):
            named = sorted(m for m in imported_modules(path) if m.split(".")[0] == "tollgate_dev")
            if named:
                found[str(path.relative_to(REPO_ROOT))] = named
    return found


def test_no_production_module_imports_the_development_package() -> None:
    assert dev_imports(PRODUCTION) == {}


def test_the_check_sees_a_lazy_import_inside_a_function(tmp_path: Path) -> None:
    module = tmp_path / "probe.py"
    module.write_text(
        "def f():\n    from tollgate_dev.local.runtime import LocalStack\n    return LocalStack\n"
    )

    assert list(imported_modules(module)) == [
        "tollgate_dev.local.runtime",
        "tollgate_dev.local.runtime.LocalStack",
    ]


def test_the_harness_does_import_production_code() -> None:
    """The reverse direction is the allowed one, and the check sees it (it is not vacuous)."""
    imports = {m for p in python_files(REPO_ROOT / "tollgate_dev") for m in imported_modules(p)}
    assert any(m.startswith("tollgate.") for m in imports)
