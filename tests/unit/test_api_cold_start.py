"""The API Lambda's cold start imports only what a request needs: no boto3 or X-Ray SDK, no OpenAPI models.

A fresh interpreter imports the handler as Lambda would and reports which heavy modules it loaded. Each
of these once cost the API's cold start a tenth of a second or more (see BENCHMARKS.md, cold start).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tollgate.settings import REPO_ROOT

# Loaded on first use instead: boto3 and its clients (S3 for large documents, Lambda for the relay
# nudge), the OpenAI SDK (the worker's), Powertools' OpenAPI models (the /openapi.json page), and what
# wiring builds for other entrypoints (worker, relay, scheduler, webhook attempts, support CLI).
NOT_AT_INIT = (
    "boto3",
    "botocore.session",
    "botocore.client",
    "s3transfer",
    "aws_xray_sdk",
    "openai",
    "httpx2",
    "aws_lambda_powertools.event_handler.openapi.models",
    "tollgate.execution.attempt",
    "tollgate.execution.limiter.factory",
    "tollgate.ingress.consumer",
    "tollgate.scheduler.retention",
    "tollgate.support.service",
)

PROBE = """
import json, sys
import functions.api.handler as handler
import tollgate.events as events
loaded = [name for name in json.loads(sys.argv[1]) if name in sys.modules]
# The webhook bodies' and bus details' models are built on first use, not by the API's import.
loaded += [f"events.{fn}" for fn in ("_webhook_models", "_bus_models") if getattr(events, fn).cache_info().currsize]
handler.deps.acceptance.db.close()
print(json.dumps(loaded))
"""


def test_importing_the_api_handler_loads_no_module_a_request_may_not_need() -> None:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("AWS_", "POWERTOOLS_"))}
    # Nothing is called: the pool may fail to connect in the background without changing the answer.
    env.update(
        DATABASE_URL="postgresql://tollgate@127.0.0.1:9/none",
        DOCUMENTS_BUCKET="documents",
        RELAY_FUNCTION_NAME="relay",
        AWS_DEFAULT_REGION="eu-west-1",
    )
    done = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(NOT_AT_INIT)],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []
