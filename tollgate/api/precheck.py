"""Refusals made before Powertools reads a request: a key without the scope its operation needs, then a body
that is not JSON by its media type, too large, not UTF-8, or an array. Each would otherwise fail inside the
parser or be half-read, and a key's missing scope would be answered only after the request it may not send
had been parsed and validated."""

from __future__ import annotations

import base64
import re
from typing import Any

from aws_lambda_powertools.event_handler import Response

from tollgate.api.problems import problem_response
from tollgate.api.routes.shared import tenant_holding
from tollgate.core.errors import (
    InvalidRequest,
    PayloadTooLarge,
    TollgateError,
    UnsupportedMediaType,
    ValidationFailed,
)
from tollgate.tenants.keys import Scope

JSON_CONTENT_TYPE = re.compile(r"^application/json\s*(;.*)?$", re.IGNORECASE)


def scope_refusal(event: dict[str, Any], scope: Scope | None) -> Response[str] | None:
    """401 or 403 for a request whose operation needs ``scope``, when the authorizer's context lacks a tenant
    or the key lacks the scope; None when the request may go on (or the operation is public)."""
    if scope is None:
        return None
    try:
        tenant_holding(event, scope)
    except TollgateError as error:
        return problem_response(error, event.get("path"))
    return None


def precheck(event: dict[str, Any], max_request_bytes: int) -> Response[str] | None:
    if event.get("httpMethod") not in {"POST", "PATCH", "PUT"}:
        return None
    headers = {k.lower(): v for k, v in (event.get("headers") or {}).items()}
    body = event.get("body") or ""
    if body and not JSON_CONTENT_TYPE.match(headers.get("content-type", "")):
        return problem_response(UnsupportedMediaType("send the request body as application/json"))
    if len(body) > max_request_bytes:
        return problem_response(PayloadTooLarge(f"the request body is larger than {max_request_bytes} bytes"))
    if event.get("isBase64Encoded"):
        # A body handed over base64-encoded (binary, or bytes that are not UTF-8) must still be UTF-8 JSON
        # (RFC 8259); Powertools would fail while decoding it, before any validation could answer.
        try:
            body = base64.b64decode(body, validate=True).decode("utf-8")
        except ValueError:  # binascii.Error and UnicodeDecodeError both are
            return problem_response(InvalidRequest("the body is not UTF-8 text; send JSON encoded as UTF-8"))
    # Powertools' validation takes the first element of a list sent for a single model (a form-data
    # convenience); a JSON array is not a job, so it is refused here rather than half-read.
    if body.lstrip().startswith("["):
        return problem_response(
            ValidationFailed(
                "body: the request body must be a JSON object",
                errors=[{"loc": ["body"], "type": "model_type", "msg": "Input should be an object"}],
            )
        )
    return None
