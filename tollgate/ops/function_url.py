"""The operations function's HTTP face: a Lambda function URL event in, an HTTP response out.

The URL's auth type is AWS_IAM, so Lambda has verified the request's SigV4 signature before the function
runs and puts the signer in ``requestContext.authorizer.iam``. That ARN, never anything in the body, is who
the audit trail names. A request without it (a URL whose auth type was changed to NONE) is refused.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

import psycopg
from aws_lambda_powertools import Logger
from botocore.exceptions import BotoCoreError, ClientError
from psycopg_pool import PoolTimeout
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tollgate.core.errors import TollgateError
from tollgate.ops.models import REQUEST, RESULTS, OpsProblem
from tollgate.ops.service import Caller, OpsDeps, run_command

logger = Logger(service="tollgate-ops", child=True)

MAX_BODY_BYTES = 1024 * 1024
PROBLEM_JSON = "application/problem+json"
# Not a Tollgate domain error: the database or an AWS service did not answer. The CLI exits 1 for it, as
# it does locally when it cannot reach them; refusals (every other type) exit 2.
DEPENDENCY_UNAVAILABLE = "dependency-unavailable"


class _Iam(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    user_arn: str = Field(alias="userArn", min_length=1)
    account_id: str | None = Field(default=None, alias="accountId")


class _Authorizer(BaseModel):
    iam: _Iam | None = None


class _Http(BaseModel):
    method: str


class _RequestContext(BaseModel):
    http: _Http
    authorizer: _Authorizer | None = None


class FunctionUrlEvent(BaseModel):
    """The parts of a function URL event (payload format 2.0) this function reads."""

    model_config = ConfigDict(populate_by_name=True)

    request_context: _RequestContext = Field(alias="requestContext")
    body: str | None = None
    is_base64_encoded: bool = Field(default=False, alias="isBase64Encoded")

    def caller(self) -> Caller | None:
        authorizer = self.request_context.authorizer
        if authorizer is None or authorizer.iam is None:
            return None
        return Caller(authorizer.iam.user_arn, authorizer.iam.account_id)

    def raw_body(self) -> bytes:
        text = self.body or ""
        if self.is_base64_encoded:
            return base64.b64decode(text, validate=True)
        return text.encode("utf-8")


def _response(status: int, body: BaseModel, content_type: str = "application/json") -> dict[str, Any]:
    return {"statusCode": status, "headers": {"content-type": content_type}, "body": body.model_dump_json()}


def _problem(status: int, problem_type: str, title: str, detail: str, **extensions: Any) -> dict[str, Any]:
    problem = OpsProblem(type=problem_type, title=title, status=status, detail=detail, extensions=extensions)
    return _response(status, problem, PROBLEM_JSON)


def _validation_detail(error: ValidationError) -> tuple[str, list[dict[str, Any]]]:
    errors = [
        {"loc": [str(part) for part in item["loc"]], "msg": item["msg"].removeprefix("Value error, ")}
        for item in error.errors()
    ]
    detail = "; ".join(f"{'.'.join(e['loc']) or 'body'}: {e['msg']}" for e in errors)
    return f"the request is not a valid command: {detail}", errors


def handle_function_url(deps: OpsDeps, event: dict[str, Any]) -> dict[str, Any]:
    """One request: who calls, which command, its result or its problem."""
    try:
        parsed = FunctionUrlEvent.model_validate(event)
    except ValidationError:
        return _problem(400, "invalid-request", "Not a function URL request", "not a function URL request")
    caller = parsed.caller()
    if caller is None:
        # Only an IAM-authenticated URL gives an identity; without one nothing is run, let alone audited.
        return _problem(403, "forbidden", "Not allowed", "the request carries no verified IAM identity")
    if parsed.request_context.http.method.upper() != "POST":
        return _problem(405, "method-not-allowed", "Method not allowed", "send commands with POST")
    try:
        raw = parsed.raw_body()
    except (binascii.Error, ValueError):
        return _problem(400, "invalid-request", "The request is malformed", "the body is not valid base64")
    if len(raw) > MAX_BODY_BYTES:
        return _problem(413, "payload-too-large", "Too large", f"a command is at most {MAX_BODY_BYTES} bytes")
    try:
        request = REQUEST.validate_json(raw)
    except ValidationError as error:
        detail, errors = _validation_detail(error)
        return _problem(400, "invalid-request", "The request is malformed", detail, errors=errors)

    command = request.command
    try:
        result = run_command(deps, caller, request)
    except TollgateError as error:
        logger.info("ops command refused", command=command, caller=caller.arn, problem=error.problem_type)
        extensions = json.loads(json.dumps(error.extensions, default=str))
        return _problem(error.status, error.problem_type, error.title, error.detail, **extensions)
    except psycopg.DataError as error:
        # A value PostgreSQL cannot store or compare (a NUL in text or JSON, a number out of range) that got
        # past the models: the command is refused as the caller's, and its transaction rolled back.
        logger.info(
            "ops command refused by the database", command=command, caller=caller.arn, error=str(error)
        )
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        return _problem(
            400,
            "invalid-request",
            "The request is malformed",
            f"a value in the command cannot be stored: {reason}",
        )
    except (psycopg.OperationalError, PoolTimeout) as error:
        logger.exception("ops command could not reach the database", command=command, caller=caller.arn)
        return _problem(503, DEPENDENCY_UNAVAILABLE, "Unavailable", f"cannot reach the database: {error}")
    except (BotoCoreError, ClientError) as error:
        logger.exception("ops command failed at AWS", command=command, caller=caller.arn)
        return _problem(502, DEPENDENCY_UNAVAILABLE, "Unavailable", f"AWS said: {error}")
    assert isinstance(result, RESULTS[command])
    logger.info("ops command done", command=command, caller=caller.arn)
    return _response(200, result)
