"""The local stand-in of the operations function's URL: what Lambda does in front of a function URL with
AWS_IAM auth, on 127.0.0.1.

It verifies each request's SigV4 signature (service ``lambda``) against the local development credentials,
refuses what is unsigned, badly signed, signed for another region or service, or too old, and only then
builds the function URL event with the signer's ARN in ``requestContext.authorizer.iam`` and runs the
operations function's own request path in this process. The CLI's stage mode reaches it with
``--ops-url``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from aws_lambda_powertools import Logger
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from tollgate.ops.function_url import handle_function_url
from tollgate.ops.service import OpsDeps
from tollgate.support.configuration import LOCAL_AWS_KEY, LOCAL_AWS_REGION, LOCAL_AWS_SECRET

logger = Logger(service="tollgate-local", child=True)

# The account moto uses; the operator the local development credentials stand for.
LOCAL_ACCOUNT = "123456789012"
LOCAL_OPERATOR_ARN = f"arn:aws:iam::{LOCAL_ACCOUNT}:user/local-operator"
# SigV4 requests older or newer than this are refused, as AWS does.
MAX_SKEW_SECONDS = 300
MAX_BODY_BYTES = 6 * 1024 * 1024  # a function URL's request payload limit
_AUTHORIZATION = re.compile(
    r"^AWS4-HMAC-SHA256 Credential=(?P<key>[^/\s]+)/(?P<date>\d{8})/(?P<region>[a-z0-9-]+)/"
    r"(?P<service>[a-z0-9-]+)/aws4_request, ?SignedHeaders=(?P<signed>[a-z0-9;-]+), ?"
    r"Signature=(?P<signature>[0-9a-f]{64})$"
)


@dataclass(frozen=True)
class LocalPrincipal:
    """A local access key's secret and the IAM ARN a signature made with it proves."""

    secret_access_key: str
    arn: str


LOCAL_PRINCIPALS = {LOCAL_AWS_KEY: LocalPrincipal(LOCAL_AWS_SECRET, LOCAL_OPERATOR_ARN)}


class Refused(Exception):
    """Why a request's signature does not prove anyone (the 403 body says only "Forbidden", as AWS's)."""


def verify_sigv4(
    method: str,
    path: str,
    headers: Mapping[str, str],
    body: bytes,
    *,
    principals: Mapping[str, LocalPrincipal],
    region: str,
    now: float,
) -> tuple[str, LocalPrincipal]:
    """The access key and principal that signed this request, or ``Refused``."""
    lowered = {name.lower(): value for name, value in headers.items()}
    match = _AUTHORIZATION.match(lowered.get("authorization", ""))
    if match is None:
        raise Refused("no SigV4 Authorization header")
    key, signed = match["key"], match["signed"].split(";")
    principal = principals.get(key)
    if principal is None:
        raise Refused(f"unknown access key {key}")
    if match["service"] != "lambda" or match["region"] != region:
        raise Refused(f"signed for {match['service']} in {match['region']}, not lambda in {region}")
    if "host" not in signed or "x-amz-date" not in signed or any(name not in lowered for name in signed):
        raise Refused("host and x-amz-date must be signed, and every signed header sent")
    stamp = lowered["x-amz-date"]
    try:
        signed_at = datetime.strptime(stamp, "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC).timestamp()
    except ValueError:
        raise Refused("x-amz-date is not a SigV4 timestamp") from None
    if stamp[:8] != match["date"] or abs(now - signed_at) > MAX_SKEW_SECONDS:
        raise Refused("the signature is too old, from the future, or scoped to another day")
    claimed = lowered.get("x-amz-content-sha256")
    if claimed is not None and claimed != hashlib.sha256(body).hexdigest():
        raise Refused("x-amz-content-sha256 does not match the body")

    request = AWSRequest(
        method=method,
        url=f"http://{lowered['host']}{path}",
        data=body,
        headers={name: lowered[name] for name in signed},
    )
    request.context["timestamp"] = stamp
    signer = SigV4Auth(Credentials(key, principal.secret_access_key), "lambda", region)
    expected = signer.signature(signer.string_to_sign(request, signer.canonical_request(request)), request)
    if not hmac.compare_digest(expected, match["signature"]):
        raise Refused("the signature does not match")
    return key, principal


def function_url_event(
    method: str, path: str, headers: Mapping[str, str], body: bytes, *, key: str, principal: LocalPrincipal
) -> dict[str, Any]:
    """The event Lambda hands a function behind an AWS_IAM function URL (payload format 2.0)."""
    try:
        text, encoded = body.decode("utf-8"), False
    except UnicodeDecodeError:
        text, encoded = base64.b64encode(body).decode("ascii"), True
    return {
        "version": "2.0",
        "rawPath": path.split("?", 1)[0],
        "rawQueryString": path.split("?", 1)[1] if "?" in path else "",
        "headers": {name.lower(): value for name, value in headers.items()},
        "requestContext": {
            "accountId": "anonymous",
            "apiId": "local-ops",
            "authorizer": {
                "iam": {
                    "accessKey": key,
                    "accountId": principal.arn.split(":")[4],
                    "callerId": key,
                    "userArn": principal.arn,
                    "userId": key,
                }
            },
            "domainName": headers.get("host", "127.0.0.1"),
            "http": {"method": method, "path": path.split("?", 1)[0], "protocol": "HTTP/1.1"},
            "requestId": str(uuid.uuid4()),
            "timeEpoch": int(time.time() * 1000),
        },
        "body": text,
        "isBase64Encoded": encoded,
    }


class _Server(ThreadingHTTPServer):
    daemon_threads = True


class LocalOpsFunction:
    """The operations function on ``url`` until ``stop``."""

    def __init__(
        self,
        deps: OpsDeps,
        *,
        port: int = 0,
        principals: Mapping[str, LocalPrincipal] = LOCAL_PRINCIPALS,
        region: str = LOCAL_AWS_REGION,
        now: Callable[[], float] = time.time,
    ) -> None:
        self._deps = deps
        self._principals = principals
        self._region = region
        self._now = now
        self._server = _Server(("127.0.0.1", port), self._handler_class())
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/"

    def start(self) -> LocalOpsFunction:
        self._thread = threading.Thread(target=self._server.serve_forever, name="local-ops", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread:
            self._thread.join()

    def dispatch(
        self, method: str, path: str, headers: Mapping[str, str], body: bytes
    ) -> tuple[int, dict[str, str], bytes]:
        if len(body) > MAX_BODY_BYTES:
            return 413, {"content-type": "application/json"}, b'{"Message":"Request Entity Too Large"}'
        try:
            key, principal = verify_sigv4(
                method,
                path,
                headers,
                body,
                principals=self._principals,
                region=self._region,
                now=self._now(),
            )
        except Refused:
            # Lambda's own answer: the function never runs, and nothing says which check failed.
            return 403, {"content-type": "application/json"}, b'{"Message":"Forbidden"}'
        event = function_url_event(method, path, headers, body, key=key, principal=principal)
        try:
            response = handle_function_url(self._deps, event)
        except Exception:
            # What a function URL answers when its function raises: the caller always gets a response.
            logger.exception("the operations function raised")
            return 502, {"content-type": "application/json"}, b'{"Message":"Internal Server Error"}'
        out = {str(k): str(v) for k, v in (response.get("headers") or {}).items()}
        return int(response["statusCode"]), out, str(response.get("body") or "").encode("utf-8")

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        function = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                status, headers, payload = function.dispatch(
                    self.command, self.path, dict(self.headers.items()), body
                )
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve

            def log_message(self, format: str, *args: Any) -> None:
                pass  # the function logs each command with its caller

        return Handler
