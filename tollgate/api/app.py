"""Routes of the acceptance API on Powertools' REST resolver, with pydantic validation and OpenAPI.

The tenant always comes from the authorizer's context, never from the request. Every error leaves as
application/problem+json; validation failures of any kind are 4xx, never 500.
"""

from __future__ import annotations

import base64
import json
import queue
import re
from dataclasses import dataclass
from typing import Annotated, Any, cast
from uuid import UUID

import botocore.exceptions
import psycopg
from aws_lambda_powertools import Logger
from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response
from aws_lambda_powertools.event_handler.exceptions import NotFoundError
from aws_lambda_powertools.event_handler.openapi.exceptions import (
    RequestUnsupportedContentType,
    RequestValidationError,
)
from aws_lambda_powertools.event_handler.openapi.models import HTTPBearer
from aws_lambda_powertools.event_handler.openapi.params import Body, Header, Query
from aws_lambda_powertools.event_handler.openapi.types import OpenAPIResponse
from aws_lambda_powertools.utilities.data_classes import APIGatewayProxyEvent
from aws_lambda_powertools.utilities.data_classes.common import BaseProxyEvent
from pydantic import BaseModel

from tollgate import __version__
from tollgate.accept.models import CreateJobRequest, JobPage, JobResultView, JobView
from tollgate.accept.service import (
    AcceptanceDeps,
    accept_job,
    cancel_job,
    get_job,
    get_job_result,
    list_jobs,
)
from tollgate.api.json_body import UnacceptableJson, load_request_json
from tollgate.api.problems import DEPENDENCY_RETRY_AFTER_SECONDS, PROBLEM_CONTENT_TYPE, problem_response
from tollgate.api.webhook_routes import register_webhook_routes
from tollgate.core.errors import (
    DependencyUnavailable,
    InvalidRequest,
    MissingIdempotencyKey,
    NotFound,
    PayloadTooLarge,
    TollgateError,
    Unauthorized,
    UnsupportedMediaType,
    ValidationFailed,
)
from tollgate.core.job_states import JobState
from tollgate.core.observability import log_context, trace_for_request
from tollgate.delivery.deliveries import ReplayDeps
from tollgate.delivery.endpoints import EndpointDeps

logger = Logger(service="tollgate-api")

IDEMPOTENCY_KEY = r"^[\x21-\x7e]{1,255}$"
JSON_CONTENT_TYPE = re.compile(r"^application/json\s*(;.*)?$", re.IGNORECASE)
# The JSON envelope around a document (keys, quotes, escapes) on top of the document's own limit.
ENVELOPE_ALLOWANCE = 64 * 1024


@dataclass(frozen=True)
class ApiDeps:
    acceptance: AcceptanceDeps
    webhooks: EndpointDeps | None = None
    # None where no dispatcher is deployed: replays answer 503.
    replays: ReplayDeps | None = None

    @property
    def max_request_bytes(self) -> int:
        return self.acceptance.settings.max_document_bytes * 2 + ENVELOPE_ALLOWANCE


def _problem_responses(*statuses: int) -> dict[int, OpenAPIResponse]:
    # Every route reads or writes PostgreSQL, so every route may answer 503 while it is unreachable.
    return {
        status: {
            "description": "Problem details (RFC 9457)",
            "content": {PROBLEM_CONTENT_TYPE: {"schema": {}}},
        }
        for status in sorted({*statuses, 503})
    }


def _json_response(status: int, model: BaseModel, headers: dict[str, str] | None = None) -> Response[str]:
    return Response(
        status_code=status,
        content_type="application/json",
        body=model.model_dump_json(),
        headers=headers or {},
    )


class RequestScopedResolver(APIGatewayRestResolver):
    """Powertools' REST resolver with the request kept on the resolver itself.

    Powertools stores the event being resolved on a class attribute (``BaseRouter.current_event``), shared
    by every resolver in the process. One request per process at a time, as in Lambda, never notices; the
    local gateway serves requests on several threads (one resolver each, see ``AppPool``), where a request
    would read another thread's event: its body, headers or tenant. Setting the event on the instance while
    it is built makes every read through the resolver (our routes and Powertools' validation) see its own.
    """

    def _to_proxy_event(self, event: dict[str, Any]) -> BaseProxyEvent:
        proxy = super()._to_proxy_event(event)
        self.current_event = cast(APIGatewayProxyEvent, proxy)
        return proxy


def create_app(deps: ApiDeps) -> APIGatewayRestResolver:
    app = RequestScopedResolver(enable_validation=True, json_body_deserializer=load_request_json)

    def tenant_id() -> UUID:
        authorizer = (app.current_event.raw_event.get("requestContext") or {}).get("authorizer") or {}
        try:
            return UUID(str(authorizer["tenant_id"]))
        except (KeyError, ValueError):
            raise Unauthorized("the request carries no authenticated tenant") from None

    def parse_job_id(raw: str) -> UUID:
        try:
            return UUID(raw)
        except ValueError:
            raise NotFound(f"no extraction job {raw}") from None

    @app.post(
        "/extraction-jobs",
        summary="Submit an invoice extraction job",
        description="Answers 202 with the job and its Location. The same Idempotency-Key with the same "
        "request answers with the first job (Idempotent-Replayed: true); with a different request, 409.",
        responses={
            202: {"description": "Accepted", "content": {"application/json": {"model": JobView}}},
            200: {
                "description": "Replay of a finished job",
                "content": {"application/json": {"model": JobView}},
            },
            **_problem_responses(400, 401, 403, 409, 413, 415, 422, 429, 503),
        },
        tags=["extraction-jobs"],
    )
    def create_job(
        request: Annotated[CreateJobRequest, Body()],
        idempotency_key: Annotated[
            str,
            Header(
                alias="Idempotency-Key",
                description="Unique per request, 1-255 visible ASCII.",
                pattern=IDEMPOTENCY_KEY,
            ),
        ],
        traceparent: Annotated[str | None, Header(description="W3C trace context to carry along.")] = None,
    ) -> Response[str]:
        trace = trace_for_request(traceparent, app.current_event.headers.get("X-Amzn-Trace-Id"))
        accepted = accept_job(deps.acceptance, tenant_id(), idempotency_key, request, trace.traceparent)
        job = accepted.job
        logger.info(
            "job accepted",
            extra={"job_id": str(job.job_id), "replayed": accepted.replayed, "trace_id": trace.trace_id},
        )
        headers = {"Location": job.links.self}
        if accepted.replayed:
            headers["Idempotent-Replayed"] = "true"
        status = 200 if accepted.replayed and job.state.is_terminal else 202
        return _json_response(status, job, headers)

    @app.get(
        "/extraction-jobs",
        summary="List the tenant's jobs, newest first",
        responses={
            200: {"description": "A page of jobs", "content": {"application/json": {"model": JobPage}}},
            **_problem_responses(400, 401, 422),
        },
        tags=["extraction-jobs"],
    )
    def list_extraction_jobs(
        state: Annotated[JobState | None, Query(description="Only jobs in this state.")] = None,
        limit: Annotated[int, Query(ge=1, le=100)] = 20,
        cursor: Annotated[str | None, Query(max_length=512)] = None,
    ) -> Response[str]:
        return _json_response(
            200, list_jobs(deps.acceptance.db, tenant_id(), state=state, limit=limit, cursor=cursor)
        )

    @app.get(
        "/extraction-jobs/<job_id>",
        summary="One job",
        responses={
            200: {"description": "The job", "content": {"application/json": {"model": JobView}}},
            **_problem_responses(401, 404),
        },
        tags=["extraction-jobs"],
    )
    def get_extraction_job(job_id: str) -> Response[str]:
        return _json_response(200, get_job(deps.acceptance.db, tenant_id(), parse_job_id(job_id)))

    @app.get(
        "/extraction-jobs/<job_id>/result",
        summary="A finished job's validated extraction",
        responses={
            200: {"description": "The result", "content": {"application/json": {"model": JobResultView}}},
            **_problem_responses(401, 404, 409),
        },
        tags=["extraction-jobs"],
    )
    def get_extraction_result(job_id: str) -> Response[str]:
        return _json_response(200, get_job_result(deps.acceptance.db, tenant_id(), parse_job_id(job_id)))

    @app.post(
        "/extraction-jobs/<job_id>/cancel",
        summary="Cancel a job that has not started (or waits for a retry)",
        responses={
            200: {"description": "The cancelled job", "content": {"application/json": {"model": JobView}}},
            **_problem_responses(401, 404, 409),
        },
        tags=["extraction-jobs"],
    )
    def cancel_extraction_job(job_id: str) -> Response[str]:
        return _json_response(200, cancel_job(deps.acceptance.db, tenant_id(), parse_job_id(job_id)))

    register_webhook_routes(app, deps, tenant_id, _json_response, _problem_responses)

    @app.get("/openapi.json", include_in_schema=False)
    def openapi() -> Response[str]:
        return Response(status_code=200, content_type="application/json", body=openapi_document(app))

    def domain_error(error: TollgateError) -> Response[str]:
        return problem_response(error, app.current_event.path)

    def unsupported_content_type(_: RequestUnsupportedContentType) -> Response[str]:
        return problem_response(UnsupportedMediaType("send the request body as application/json"))

    def validation_error(error: RequestValidationError) -> Response[str]:
        errors = [_public_error(e) for e in error.errors()]
        if any(e["type"] == "json_invalid" for e in errors):
            why = error.__cause__.msg if isinstance(error.__cause__, UnacceptableJson) else None
            detail = f"the body is not JSON the API takes: {why}" if why else "the body is not valid JSON"
            return problem_response(InvalidRequest(detail, errors=errors))
        if errors and all(e["loc"] == ["header", "idempotency-key"] for e in errors):
            # When the key is all that is wrong, the answer is the 400 the API documents for it.
            if errors[0]["type"] == "missing":
                return problem_response(
                    MissingIdempotencyKey("send an Idempotency-Key header, unique per logical request")
                )
            return problem_response(
                InvalidRequest("the Idempotency-Key must be 1 to 255 visible ASCII characters")
            )
        return problem_response(ValidationFailed(_summary(errors), errors=errors))

    def dependency_down(error: Exception) -> Response[str]:
        # The database or S3 did not answer (an outage, a failover, a restart): nothing was committed, and
        # the same request with the same Idempotency-Key is safe to send again after a short wait.
        logger.warning("a dependency is unavailable", extra={"error": f"{type(error).__name__}: {error}"})
        return problem_response(
            DependencyUnavailable(
                "a service we depend on did not answer; retry after the Retry-After interval",
                retry_after=DEPENDENCY_RETRY_AFTER_SECONDS,
            )
        )

    def unexpected_error(_: Exception) -> Response[str]:
        # Logged with its stack for the operators; the tenant gets a stable problem without internals.
        logger.exception("unhandled error")
        return problem_response(TollgateError("the request failed on our side; it is safe to retry it"))

    # Registered by call rather than as decorators: the decorator is untyped, the functions are not.
    # Powertools picks the handler of the most specific class in the exception's MRO.
    app.exception_handler(TollgateError)(domain_error)
    app.exception_handler(RequestUnsupportedContentType)(unsupported_content_type)
    app.exception_handler(RequestValidationError)(validation_error)
    app.exception_handler(psycopg.OperationalError)(dependency_down)  # pool timeouts included
    app.exception_handler(botocore.exceptions.ConnectionError)(dependency_down)  # refused, connect timeout
    app.exception_handler(botocore.exceptions.HTTPClientError)(dependency_down)  # closed, read timeout
    app.exception_handler(Exception)(unexpected_error)

    @app.not_found
    def route_not_found(_: NotFoundError) -> Response[str]:
        return problem_response(
            NotFound(f"no route for {app.current_event.http_method} {app.current_event.path}")
        )

    return app


def _public_error(error: dict[str, Any]) -> dict[str, Any]:
    """A validation error as tenants see it: where, what, why; never the input echoed back."""
    return {
        "loc": [str(part) for part in error.get("loc", ())],
        "type": error.get("type"),
        "msg": error.get("msg"),
    }


def _summary(errors: list[dict[str, Any]]) -> str:
    first = errors[0] if errors else {"loc": [], "msg": "invalid"}
    where = ".".join(first["loc"]) or "request"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{where}: {first['msg']}{more}"


def openapi_document(app: APIGatewayRestResolver) -> str:
    document = app.get_openapi_json_schema(
        title="Tollgate",
        version=__version__,
        description="Asynchronous invoice extraction for many tenants. Errors are application/problem+json.",
        security_schemes={"bearer": HTTPBearer(description="Authorization: Bearer <API key>")},
        security=[{"bearer": []}],
    )
    # Stable, diffable formatting for the committed copy.
    return json.dumps(json.loads(document), indent=2, sort_keys=True) + "\n"


def export_openapi() -> str:
    """The OpenAPI document without any running dependency: routes are only described, never called."""
    return openapi_document(create_app(cast(ApiDeps, None)))


def precheck(event: dict[str, Any], max_request_bytes: int) -> Response[str] | None:
    """Refusals that must happen before the body is parsed: wrong media type, oversize body, bytes that are
    not text."""
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


def handle(app: APIGatewayRestResolver, deps: ApiDeps, event: dict[str, Any], context: Any) -> dict[str, Any]:
    refusal = precheck(event, deps.max_request_bytes)
    if refusal is not None:
        return _raw(refusal)
    request = event.get("requestContext") or {}
    with log_context(
        tenant_id=(request.get("authorizer") or {}).get("tenant_id"), request_id=request.get("requestId")
    ):
        result: dict[str, Any] = app.resolve(event, context)
    return result


class AppPool:
    """Several resolvers for a server that handles requests on many threads (the local gateway).

    A Powertools resolver keeps the request being handled on the resolver itself, so one resolver must
    never serve two requests at once; in Lambda a process handles one request at a time and needs no pool.
    """

    def __init__(self, deps: ApiDeps, size: int) -> None:
        self._deps = deps
        self._idle: queue.SimpleQueue[APIGatewayRestResolver] = queue.SimpleQueue()
        for _ in range(size):
            self._idle.put(create_app(deps))

    def handle(self, event: dict[str, Any], context: Any) -> dict[str, Any]:
        app = self._idle.get()
        try:
            return handle(app, self._deps, event, context)
        finally:
            self._idle.put(app)


def _raw(response: Response[str]) -> dict[str, Any]:
    return {
        "statusCode": response.status_code,
        "headers": {
            "Content-Type": response.content_type or PROBLEM_CONTENT_TYPE,
            **(response.headers or {}),
        },
        "body": response.body,
        "isBase64Encoded": False,
    }
