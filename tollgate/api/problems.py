"""application/problem+json (RFC 9457) responses with a stable ``type`` per error."""

from __future__ import annotations

import json
from typing import Any

from aws_lambda_powertools.event_handler import Response

from tollgate.core.errors import TollgateError

PROBLEM_CONTENT_TYPE = "application/problem+json"
PROBLEM_TYPE_BASE = "https://tollgate.dev/problems/"
# Retry-After when a dependency is down: a database failover or restart usually takes seconds to tens of
# seconds. Here rather than in the app so the CDK stack and the local gateway can read it without the routes.
DEPENDENCY_RETRY_AFTER_SECONDS = 5


def problem_body(error: TollgateError, instance: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "type": PROBLEM_TYPE_BASE + error.problem_type,
        "title": error.title,
        "status": error.status,
        "detail": error.detail,
    }
    if instance:
        body["instance"] = instance
    body.update(error.extensions)
    return body


def problem_response(error: TollgateError, instance: str | None = None) -> Response[str]:
    headers: dict[str, str] = {}
    if error.retry_after is not None:
        headers["Retry-After"] = str(error.retry_after)
    return Response(
        status_code=error.status,
        content_type=PROBLEM_CONTENT_TYPE,
        body=json.dumps(problem_body(error, instance), default=str),
        headers=headers,
    )
