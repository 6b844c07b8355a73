"""A small stand-in for API Gateway on 127.0.0.1: turns HTTP requests into REST proxy events.

It serves exactly the API's operations (``tollgate.api.surface``, the same table ApiStack makes its methods
from) and answers any other method or path as API Gateway does, before any authorizer or Lambda runs. For an
operation it runs the real authorizer use case first (TOKEN authorizer semantics: 401 when it denies, its
context passed on as ``requestContext.authorizer``) and then the API's handle function, as Lambda would.
``AppPool`` stands in for the API Lambda's concurrent instances: the gateway serves requests on many threads
at once."""

from __future__ import annotations

import base64
import json
import queue
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, cast
from urllib.parse import parse_qsl, urlsplit

from aws_lambda_powertools import Logger
from aws_lambda_powertools.event_handler import APIGatewayRestResolver
from aws_lambda_powertools.utilities.data_classes import APIGatewayProxyEvent
from aws_lambda_powertools.utilities.data_classes.common import BaseProxyEvent

from tollgate.api.app import create_app, handle
from tollgate.api.deps import ApiDeps
from tollgate.api.gateway_problems import gateway_problem, rendered
from tollgate.api.problems import DEPENDENCY_RETRY_AFTER_SECONDS, PROBLEM_CONTENT_TYPE, problem_body
from tollgate.api.surface import Operation, find_operation, http_surface
from tollgate.core.errors import (
    DependencyUnavailable,
    InvalidRequest,
    PayloadTooLarge,
    TollgateError,
    Unauthorized,
)
from tollgate.tenants.authorizer import AccessDenied

logger = Logger(service="tollgate-local", child=True)

ApiHandler = Callable[[dict[str, Any], Any], dict[str, Any]]
Authorizer = Callable[[str | None, str], dict[str, Any]]

STAGE = "local"
API_ID = "local"
# API Gateway's own limit on a request payload.
MAX_PAYLOAD_BYTES = 10 * 1024 * 1024
# How long a request's body may take to arrive in full once its headers are in. A body shorter than its
# Content-Length would otherwise hold the connection (and a server thread) forever, or, when the client
# half-closes, reach the API truncated.
BODY_READ_TIMEOUT_SECONDS = 30.0


def build_event(
    method: str, raw_path: str, headers: dict[str, str], body: bytes, operation: Operation | None = None
) -> dict[str, Any]:
    """The REST proxy event API Gateway sends for a request; ``resource`` and ``pathParameters`` come from
    the ``operation`` that serves it (the path itself when none is given)."""
    parts = urlsplit(raw_path)
    query = parse_qsl(parts.query, keep_blank_values=True)
    multi_query: dict[str, list[str]] = {}
    for key, value in query:
        multi_query.setdefault(key, []).append(value)
    try:
        text, is_base64 = body.decode("utf-8"), False
    except UnicodeDecodeError:
        text, is_base64 = base64.b64encode(body).decode(), True
    parameters = None
    if operation is not None:
        names = [segment[1:-1] for segment in operation.segments]
        values = [segment for segment in parts.path.split("/") if segment]
        parameters = {
            name: value
            for name, value, segment in zip(names, values, operation.segments, strict=True)
            if segment.startswith("{")
        } or None
    return {
        "resource": operation.path if operation is not None else parts.path,
        "path": parts.path,
        "httpMethod": method,
        "headers": dict(headers),
        "multiValueHeaders": {k: [v] for k, v in headers.items()},
        "queryStringParameters": dict(query) or None,
        "multiValueQueryStringParameters": multi_query or None,
        "pathParameters": parameters,
        "stageVariables": None,
        "requestContext": {
            "accountId": "000000000000",
            "apiId": API_ID,
            "stage": STAGE,
            "httpMethod": method,
            "path": f"/{STAGE}{parts.path}",
            "requestId": str(uuid.uuid4()),
            "identity": {"sourceIp": "127.0.0.1"},
        },
        "body": text if body else None,
        "isBase64Encoded": is_base64,
    }


class RequestScopedResolver(APIGatewayRestResolver):
    """Powertools' REST resolver with the request kept on the resolver itself.

    Powertools stores the event being resolved on a class attribute (``BaseRouter.current_event``), shared
    by every resolver in the process. One request per process at a time, as in Lambda, never notices; the
    local gateway serves requests on several threads (one resolver each, see ``AppPool``), where a request
    would read another thread's event: its body, headers or tenant. Setting the event on the instance while
    it is built makes every read through the resolver (the routers included in it, the error handlers and
    Powertools' validation) see its own. A stock resolver in the same process still reads the shared
    attribute, which these ones write too: it is safe only while no pool is serving.
    """

    def _to_proxy_event(self, event: dict[str, Any]) -> BaseProxyEvent:
        proxy = super()._to_proxy_event(event)
        self.current_event = cast(APIGatewayProxyEvent, proxy)
        return proxy


class AppPool:
    """Several resolvers for a server that handles requests on many threads (the local gateway).

    A resolver keeps the request being handled on itself, so one resolver must never serve two requests at
    once; in Lambda a process handles one request at a time and needs no pool.
    """

    def __init__(self, deps: ApiDeps, size: int) -> None:
        self._deps = deps
        self._idle: queue.SimpleQueue[APIGatewayRestResolver] = queue.SimpleQueue()
        for _ in range(size):
            self._idle.put(create_app(deps, RequestScopedResolver))

    def handle(self, event: dict[str, Any], context: Any) -> dict[str, Any]:
        app = self._idle.get()
        try:
            return handle(app, self._deps, event, context)
        finally:
            self._idle.put(app)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # The default backlog of 5 resets connections when tenants burst; API Gateway does not.
    request_queue_size = 256


class LocalGateway:
    def __init__(
        self,
        api: ApiHandler,
        authorizer: Authorizer,
        host: str = "127.0.0.1",
        port: int = 8080,
        surface: Sequence[Operation] | None = None,
        *,
        body_read_timeout: float = BODY_READ_TIMEOUT_SECONDS,
    ) -> None:
        self._api = api
        self._authorizer = authorizer
        self._body_read_timeout = body_read_timeout
        self._surface = tuple(surface) if surface is not None else http_surface()
        self._server = _Server((host, port), self._handler_class())
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> None:
        self._thread = threading.Thread(target=self._server.serve_forever, name="local-gateway", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread:
            self._thread.join()

    def dispatch(
        self, method: str, path: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, dict[str, str], bytes]:
        if len(body) > MAX_PAYLOAD_BYTES:
            return _problem(PayloadTooLarge(f"API Gateway accepts at most {MAX_PAYLOAD_BYTES} bytes"))
        operation = find_operation(self._surface, method, urlsplit(path).path)
        if operation is None:
            # API Gateway's answer to a method or resource the stage does not declare, before any authorizer.
            missing = gateway_problem("MISSING_AUTHENTICATION_TOKEN")
            assert missing.status is not None
            headers = {"Content-Type": PROBLEM_CONTENT_TYPE}
            return missing.status, headers, rendered(missing, str(uuid.uuid4())).encode()
        event = build_event(method, path, headers, body, operation)
        if operation.public is None:
            lowered = {k.lower(): v for k, v in headers.items()}
            method_arn = (
                f"arn:aws:execute-api:eu-west-1:000000000000:{API_ID}/{STAGE}/{method}{event['path']}"
            )
            try:
                policy = self._authorizer(lowered.get("authorization"), method_arn)
            except AccessDenied:
                return _problem(Unauthorized("send Authorization: Bearer <API key> with a valid key"))
            except Exception:
                # API Gateway's AUTHORIZER_FAILURE, which the deployed API answers as 503 with Retry-After.
                logger.exception("the authorizer failed")
                return _problem(
                    DependencyUnavailable(
                        "the API key could not be checked just now; retry after the Retry-After interval",
                        retry_after=DEPENDENCY_RETRY_AFTER_SECONDS,
                    )
                )
            event["requestContext"]["authorizer"] = {
                "principalId": policy["principalId"],
                **policy["context"],
            }
        response = self._api(event, None)
        out_headers = {k: str(v) for k, v in (response.get("headers") or {}).items()}
        for key, values in (response.get("multiValueHeaders") or {}).items():
            out_headers[key] = ", ".join(str(v) for v in values)
        raw = response.get("body") or ""
        payload = base64.b64decode(raw) if response.get("isBase64Encoded") else raw.encode("utf-8")
        return int(response["statusCode"]), out_headers, payload

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        gateway = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Headers and body go out in separate writes; with Nagle on, the body waits for the client's
            # delayed ACK (~40 ms a response).
            disable_nagle_algorithm = True

            def _serve(self) -> None:
                try:
                    body = self._read_body()
                except TollgateError as refusal:
                    # The connection's framing is lost (how much of it was body is unknown): answer and close.
                    self.close_connection = True
                    self._answer(*_problem(refusal))
                    return
                self._answer(*gateway.dispatch(self.command, self.path, dict(self.headers.items()), body))

            def _read_body(self) -> bytes:
                """The body as Content-Length declares it, within the gateway's read timeout, or the refusal a
                front end answers with: nothing reaches the authorizer or the API unless the body is whole."""
                declared = set(self.headers.get_all("Content-Length") or [])
                if not declared:
                    return b""
                # Two lengths that disagree are how requests get smuggled past a front end (RFC 9112 6.3).
                raw = declared.pop().strip() if len(declared) == 1 else ""
                if not (raw.isascii() and raw.isdigit()):
                    raise InvalidRequest("Content-Length must be one non-negative whole number of bytes")
                remaining = int(raw)
                deadline = time.monotonic() + gateway._body_read_timeout
                chunks = []
                try:
                    while remaining:
                        left = deadline - time.monotonic()
                        if left <= 0:
                            raise TimeoutError
                        self.connection.settimeout(left)
                        chunk = self.rfile.read1(remaining)
                        if not chunk:
                            raise InvalidRequest(
                                f"the body ended {remaining} bytes short of its Content-Length ({raw})"
                            )
                        chunks.append(chunk)
                        remaining -= len(chunk)
                except TimeoutError:
                    raise InvalidRequest(
                        f"the body did not arrive in full within {gateway._body_read_timeout:g} s: "
                        f"{remaining} of its Content-Length ({raw}) bytes are missing"
                    ) from None
                finally:
                    self.connection.settimeout(None)
                return b"".join(chunks)

            def _answer(self, status: int, headers: dict[str, str], payload: bytes) -> None:
                self.send_response(status)
                for key, value in headers.items():
                    if key.lower() not in {"content-length", "connection"}:
                        self.send_header(key, value)
                if self.close_connection:
                    self.send_header("Connection", "close")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_OPTIONS = _serve

            def log_message(self, format: str, *args: Any) -> None:
                pass  # request lines would repeat what the API logs, and headers carry keys

        return Handler


def _problem(error: TollgateError) -> tuple[int, dict[str, str], bytes]:
    headers = {"Content-Type": PROBLEM_CONTENT_TYPE}
    if error.retry_after is not None:
        headers["Retry-After"] = str(error.retry_after)
    return error.status, headers, json.dumps(problem_body(error)).encode()
