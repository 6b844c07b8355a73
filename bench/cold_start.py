"""The API Lambda's cold start, before and after, as Lambda would run it: code and layer, bytecode or not.

Child side (``app`` / ``handler``): one fresh interpreter, one import, timings as JSON on stdout. It imports
nothing of the project before the timed import (only the standard library), so what it times is what a
Lambda cold start pays. ``bench.acceptance`` runs it for its own cold-start rows.

Parent side (``python -m bench.cold_start``, writes bench/results/cold_start.json): builds Lambda-shaped
trees (the function code of the base commit and of the working tree, and the locked dependencies installed
as layers/build.py installs the layer, for this machine's CPU), each with and without bytecode, then runs
the handler child in every variant, interleaved, several rounds. The interpreter is a CPython of the
runtime's version when this machine has one (the layer's bytecode is compiled by it), else this one.
"""

from __future__ import annotations

import importlib
import json
import sys
import time
from types import SimpleNamespace
from typing import Any

# What the API Lambda's module-level code needs, without reaching for the entrypoint itself.
APP_MODULES = ("tollgate.api.app", "tollgate.wiring")
HANDLER_MODULE = "functions.api.handler"


def _ms(start: int, end: int) -> float:
    return (end - start) / 1e6


def _lambda_context() -> Any:
    # Only the attributes Powertools' Logger reads when it injects the Lambda context.
    return SimpleNamespace(
        function_name="tollgate-api-bench",
        function_version="$LATEST",
        memory_limit_in_mb=1024,
        invoked_function_arn="arn:aws:lambda:eu-west-1:000000000000:function:tollgate-api-bench",
        aws_request_id="bench-cold-start",
        log_group_name="/aws/lambda/tollgate-api-bench",
        log_stream_name="bench",
    )


def time_app_import() -> dict[str, Any]:
    start = time.perf_counter_ns()
    for name in APP_MODULES:
        importlib.import_module(name)
    return {"import_ms": _ms(start, time.perf_counter_ns())}


def time_handler_cold_start(event: dict[str, Any]) -> dict[str, Any]:
    """Import (settings, pool, boto3 client, routes), then the wait for a usable connection, then one job.

    The pool connects in a background thread, so the import alone would under-count: the first request
    of a real cold start waits for that connection.
    """
    start = time.perf_counter_ns()
    cpu_start = time.process_time_ns()
    handler = importlib.import_module(HANDLER_MODULE)
    imported = time.perf_counter_ns()
    # CPU time of the whole process (the pool's connecting thread too): less sensitive to a busy machine.
    import_cpu = time.process_time_ns() - cpu_start
    handler.deps.acceptance.db.pool.wait(timeout=30.0)
    pool_ready = time.perf_counter_ns()
    response = handler.lambda_handler(event, _lambda_context())
    answered = time.perf_counter_ns()
    handler.deps.acceptance.db.close()
    return {
        "import_ms": _ms(start, imported),
        "pool_ready_ms": _ms(imported, pool_ready),
        "first_request_ms": _ms(pool_ready, answered),
        "to_first_response_ms": _ms(start, answered),
        "import_cpu_ms": import_cpu / 1e6,
        "status": response["statusCode"],
    }


def main(argv: list[str]) -> int:
    if not argv or argv[0].startswith("-"):
        from bench.cold_start_compare import main as compare

        return compare(argv)
    if argv == ["app"]:
        result = time_app_import()
    elif argv == ["handler"]:
        # The event arrives on stdin, already built by the parent, so building it costs this process nothing.
        result = time_handler_cold_start(json.loads(sys.stdin.read()))
    else:
        print("usage: python -m bench.cold_start [app|handler|--repeats N ...]", file=sys.stderr)
        return 2
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
