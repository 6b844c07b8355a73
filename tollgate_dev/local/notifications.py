"""Live notifications on 127.0.0.1: a WebSocket server speaking the API Gateway stage's protocol ($connect
with the same authorizer and the tenant's cap, subscribe, $default, $disconnect), the sender that writes to
its sockets, and the notifier that reads the notifications queue on moto SQS as the Lambda's event source
would. The use cases are tollgate.notify.service's, unchanged; only the transport is local."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from uuid import UUID

from aws_lambda_powertools import Logger
from websockets.exceptions import ConnectionClosed
from websockets.frames import CloseCode
from websockets.http11 import Request, Response
from websockets.sync.server import Server, ServerConnection, serve

from tollgate.notify.messages import BadMessage
from tollgate.notify.service import (
    NotifyDeps,
    TooManyConnections,
    connect,
    disconnect,
    notify_tenants,
    parse_notifications,
    subscribe,
)
from tollgate.tenants.authorizer import AccessDenied, authorize_websocket
from tollgate.tenants.keys import ApiKeyResolver
from tollgate_dev.local.logs import as_component

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient

logger = Logger(service="tollgate-local", child=True)

# What the authorizer is told it guards: API Gateway passes the $connect route's ARN.
LOCAL_CONNECT_ARN = "arn:aws:execute-api:eu-west-1:000000000000:local/local/$connect"
# SQS FIFO receives at most ten messages; the Lambda event source hands the notifier batches of that size.
RECEIVE_BATCH = 10


class SocketSender:
    """The Sender over the local server's own sockets: what PostToConnection and DeleteConnection do in a
    stage. A connection the server no longer holds is gone (False), as API Gateway answers 410."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: dict[str, ServerConnection] = {}

    def add(self, connection_id: str, connection: ServerConnection) -> None:
        with self._lock:
            self._open[connection_id] = connection

    def forget(self, connection_id: str) -> None:
        with self._lock:
            self._open.pop(connection_id, None)

    def post(self, connection_id: str, body: bytes) -> bool:
        with self._lock:
            connection = self._open.get(connection_id)
        if connection is None:
            return False
        try:
            # A text frame, as API Gateway sends a message posted as UTF-8 JSON; send is thread-safe, and one
            # sender holds a connection at a time, so frames leave in the order posted.
            connection.send(body.decode())
        except ConnectionClosed:
            return False
        return True

    def close(self, connection_id: str) -> None:
        with self._lock:
            connection = self._open.pop(connection_id, None)
        if connection is not None:
            connection.close(CloseCode.POLICY_VIOLATION, "closed by the server")


class LocalWebSocketServer:
    """The WebSocket API of a stage on 127.0.0.1: the handshake runs the $connect authorizer on the
    ``Authorization: Bearer <key>`` header (401 without a key allowed jobs:read) and then the $connect route
    (429 past the tenant's cap); each text message is routed on its ``action`` like the stage's route
    selection expression ``$request.body.action``; a closed socket is $disconnect."""

    def __init__(
        self, deps: NotifyDeps, sender: SocketSender, resolver: ApiKeyResolver, port: int = 0
    ) -> None:
        self._deps = deps
        self._sender = sender
        self._resolver = resolver
        self._port = port
        self._server: Server | None = None
        self._thread: threading.Thread | None = None
        self.url = ""

    def start(self) -> LocalWebSocketServer:
        # No permessage-deflate: API Gateway does not negotiate it, and clients see the same frames.
        self._server = serve(
            as_component("websocket", self._handle),
            "127.0.0.1",
            self._port,
            process_request=as_component("websocket", self._admit),
            compression=None,
            server_header="tollgate-local",
        )
        host, port = self._server.socket.getsockname()[:2]
        self.url = f"ws://{host}:{port}"
        self._thread = threading.Thread(target=self._server.serve_forever, name="websocket", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()  # closes open connections (1001) and waits for their handlers
        if self._thread is not None:
            self._thread.join()

    def _admit(self, connection: ServerConnection, request: Request) -> Response | None:
        try:
            policy = authorize_websocket(
                self._resolver, request.headers.get("Authorization"), LOCAL_CONNECT_ARN
            )
        except AccessDenied:
            return connection.respond(401, "Unauthorized\n")
        if any(statement["Effect"] != "Allow" for statement in policy["policyDocument"]["Statement"]):
            return connection.respond(403, "Forbidden\n")
        connection_id = _connection_id(connection)
        context = policy["context"]
        try:
            connect(self._deps, connection_id, UUID(context["tenant_id"]), UUID(context["key_id"]))
        except TooManyConnections as error:
            return connection.respond(429, f"{error}\n")
        self._sender.add(connection_id, connection)
        return None

    def _handle(self, connection: ServerConnection) -> None:
        connection_id = _connection_id(connection)
        try:
            for message in connection:
                if _route(message) == "subscribe":
                    subscribe(self._deps, connection_id, message)
                else:
                    self._deps.sender.post(
                        connection_id, BadMessage('the only action is "subscribe"').reply.encode()
                    )
        except ConnectionClosed:
            pass
        finally:
            self._sender.forget(connection_id)
            disconnect(self._deps, connection_id)


def _connection_id(connection: ServerConnection) -> str:
    return connection.id.hex


def _route(message: str | bytes) -> str:
    """The route API Gateway would pick: ``action`` of a JSON object, else $default."""
    try:
        body = json.loads(message)
    except (ValueError, RecursionError):
        return "$default"
    action = body.get("action") if isinstance(body, dict) else None
    return action if action == "subscribe" else "$default"


def deliver_notifications(deps: NotifyDeps, sqs: SQSClient, queue_url: str, wait_seconds: int = 1) -> int:
    """One invocation of the notifier as its SQS event source makes them: a batch of up to ten messages
    (waiting up to ``wait_seconds`` for the first), delivered, then deleted; the messages sent to clients.
    A batch that fails stays in the queue and comes back after its visibility timeout."""
    received = sqs.receive_message(
        QueueUrl=queue_url, MaxNumberOfMessages=RECEIVE_BATCH, WaitTimeSeconds=wait_seconds
    ).get("Messages", [])
    if not received:
        return 0
    sent = notify_tenants(deps, parse_notifications([message["Body"] for message in received]))
    sqs.delete_message_batch(
        QueueUrl=queue_url,
        Entries=[
            {"Id": str(index), "ReceiptHandle": message["ReceiptHandle"]}
            for index, message in enumerate(received)
        ],
    )
    return sent


class NotifierThread:
    """The notifier Lambda's event source: receives from the notifications queue until stopped, each batch
    one call of ``deliver_notifications``. Errors are logged and the loop goes on, as Lambda retries."""

    def __init__(self, deliver: Callable[[], Any], on_step: Callable[[], None]) -> None:
        self._deliver = deliver
        self._on_step = on_step
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="notifier", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join()  # a receive waits at most its wait time

    def _run(self) -> None:
        while not self._stopped.is_set():
            try:
                sent = self._deliver()
            except Exception:
                logger.exception("local notifier step failed")
                self._stopped.wait(1.0)
                continue
            if sent:
                self._on_step()
