"""What each entrypoint calls: the one declaration of every AWS operation a Lambda or the worker makes.

The stacks read it to choose a function's subnets and a stage's interface endpoints; the infrastructure tests
check every declared service is reachable and every declared IAM action granted; and clients made through
``tollgate.core.aws`` check each call against it, so a call the declaration misses fails where the local
system and the tests run (``enforce``), not first in a deployed stage as a timeout or an AccessDenied.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

# IAM's prefix where it differs from boto3's service name.
IAM_PREFIX = {
    "stepfunctions": "states",
    "apigatewaymanagementapi": "execute-api",
}


@dataclass(frozen=True)
class Call:
    """One botocore operation (as ``before-call`` names it, ``"PutEvents"``) and the IAM actions it needs."""

    service: str
    operation: str
    actions: tuple[str, ...]


def call(service: str, operation: str, *actions: str) -> Call:
    """``actions`` when IAM's differ from ``<prefix>:<operation>`` (batch operations, S3 on a KMS bucket)."""
    return Call(service, operation, actions or (f"{IAM_PREFIX.get(service, service)}:{operation}",))


@dataclass(frozen=True)
class Reach:
    """``internet`` says why the entrypoint calls something outside AWS (it then needs a NAT route), or is
    empty when it calls AWS alone."""

    calls: tuple[Call, ...]
    internet: str = ""
    # Set for the ECS worker, whose subnets its own stack chooses (the LLM provider is behind NAT).
    container: bool = False

    @property
    def services(self) -> frozenset[str]:
        return frozenset(c.service for c in self.calls)

    @property
    def actions(self) -> frozenset[str]:
        return frozenset(action for c in self.calls for action in c.actions)

    def allows(self, service: str, operation: str) -> bool:
        return any(c.service == service and c.operation == operation for c in self.calls)


# Every client of PostgreSQL reads the database secret in a deployed stage (Powertools' get_secret).
DATABASE_SECRET = call("secretsmanager", "GetSecretValue")
# The documents bucket is encrypted with its own KMS key, which S3 uses under the caller's identity.
READ_DOCUMENT = call("s3", "GetObject", "s3:GetObject", "s3:GetObjectVersion", "kms:Decrypt")
PUT_DOCUMENT = call("s3", "PutObject", "s3:PutObject", "kms:GenerateDataKey")
START_DELIVERY = call("stepfunctions", "StartExecution")
NUDGE_RELAY = call("lambda", "Invoke", "lambda:InvokeFunction")
# boto3 names no batch operation in IAM: a batch is authorized as its single operation.
SEND_MESSAGES = call("sqs", "SendMessageBatch", "sqs:SendMessage")
LIVE_NOTIFICATIONS = (
    DATABASE_SECRET,
    *(
        call("dynamodb", operation)
        for operation in ("PutItem", "GetItem", "DeleteItem", "Query", "UpdateItem", "Scan")
    ),
    call("apigatewaymanagementapi", "PostToConnection", "execute-api:ManageConnections"),
    call("apigatewaymanagementapi", "DeleteConnection", "execute-api:ManageConnections"),
)

ENTRYPOINTS: dict[str, Reach] = {
    "api": Reach((DATABASE_SECRET, READ_DOCUMENT, PUT_DOCUMENT, START_DELIVERY, NUDGE_RELAY)),
    "authorizer": Reach((DATABASE_SECRET,)),
    "migrate": Reach((DATABASE_SECRET,)),
    "outbox_relay": Reach((DATABASE_SECRET, SEND_MESSAGES, START_DELIVERY, call("events", "PutEvents"))),
    "scheduler": Reach(
        (
            DATABASE_SECRET,
            START_DELIVERY,
            call("s3", "PutObject", "s3:PutObject", "kms:GenerateDataKey"),
            call("s3", "DeleteObjects", "s3:DeleteObjectVersion"),
        )
    ),
    "webhook_attempt": Reach((DATABASE_SECRET,), internet="tenants' webhook endpoints"),
    "websocket_authorizer": Reach((DATABASE_SECRET,)),
    # One build (build_notify) serves both: the route Lambda connects, counts and replays, the notifier
    # posts, closes and sweeps.
    "websocket": Reach(LIVE_NOTIFICATIONS),
    "notifier": Reach(LIVE_NOTIFICATIONS),
    "ops": Reach(
        (
            DATABASE_SECRET,
            READ_DOCUMENT,
            START_DELIVERY,
            call("sqs", "ReceiveMessage"),
            call("sqs", "ChangeMessageVisibility"),
            call("sqs", "SendMessage"),
            call("sqs", "DeleteMessage"),
            call("sqs", "GetQueueAttributes"),
            call("sqs", "StartMessageMoveTask"),
            call("apigateway", "GetApiKeys", "apigateway:GET"),
            call("apigateway", "CreateApiKey", "apigateway:POST"),
            call("apigateway", "CreateUsagePlanKey", "apigateway:POST"),
        )
    ),
    "worker": Reach(
        (
            DATABASE_SECRET,
            READ_DOCUMENT,
            NUDGE_RELAY,
            call("sqs", "ReceiveMessage"),
            call("sqs", "ChangeMessageVisibility"),
            call("sqs", "DeleteMessageBatch", "sqs:DeleteMessage"),
            call("dynamodb", "GetItem"),
            call("dynamodb", "PutItem"),
            call("dynamodb", "UpdateItem"),
        ),
        internet="the LLM provider's API",
        container=True,
    ),
}


def reach_of(entrypoint: str) -> Reach:
    try:
        return ENTRYPOINTS[entrypoint]
    except KeyError:
        raise KeyError(f"{entrypoint!r} declares no reach in tollgate.core.reach") from None


class UndeclaredCall(RuntimeError):
    """An entrypoint called an AWS operation its declaration does not list."""


# One list per open ``enforce`` block; a call is checked while any is open.
_WATCHERS: list[list[str]] = []
_LOCK = threading.Lock()


@contextmanager
def enforce() -> Iterator[list[str]]:
    """Within this block an undeclared call raises ``UndeclaredCall``; yields the list of those seen.

    The list is kept as well as the error raised: a caller that catches every error (a publisher that
    retries) would otherwise hide it. Off in a deployed stage, where IAM and the network refuse what is not
    granted or reachable; the local system and the tests turn it on so a missing declaration shows before a
    deploy.
    """
    seen: list[str] = []
    with _LOCK:
        _WATCHERS.append(seen)
    try:
        yield seen
    finally:
        with _LOCK:
            _WATCHERS.remove(seen)


def check_call(entrypoint: str, service: str, operation: str) -> None:
    """Raise when enforcing and ``entrypoint`` does not declare ``service``'s ``operation``."""
    if not _WATCHERS or reach_of(entrypoint).allows(service, operation):
        return
    message = (
        f"{entrypoint} called {service}:{operation}, which tollgate.core.reach does not declare for it: "
        "declare it there (its grant, subnets and endpoint follow), or do not call it"
    )
    with _LOCK:
        for seen in _WATCHERS:
            seen.append(message)
    raise UndeclaredCall(message)
