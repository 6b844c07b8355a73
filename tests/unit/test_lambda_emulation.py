"""The emulation's verdict on bytecode reads `python -v` right: shipped pycs counted, compiled sources caught."""

from __future__ import annotations

from bench.lambda_emulation import count_sources

VERBOSE = """\
# /var/task/tollgate/__pycache__/wiring.cpython-313.pyc matches /var/task/tollgate/wiring.py
# code object from '/var/task/tollgate/__pycache__/wiring.cpython-313.pyc'
# code object from '/opt/python/pydantic/__pycache__/main.cpython-313.pyc'
# code object from /opt/python/psycopg/pq/__init__.py
# code object from /var/task/functions/api/handler.py
# code object from /usr/lib/python3.13/json/decoder.py
import 'json' # <_frozen_importlib_external.SourceFileLoader object at 0x0>
"""


def test_pycs_and_compiled_sources_are_told_apart_by_where_they_live() -> None:
    assert count_sources(VERBOSE) == {
        "task_pyc": 1,
        "layer_pyc": 1,
        "task_compiled": 1,
        "layer_compiled": 1,
        "stdlib_compiled": 1,
    }
