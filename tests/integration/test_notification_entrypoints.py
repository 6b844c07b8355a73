"""The live notifications' Lambda entrypoints, imported as Lambda imports them (settings from the environment)
against the real database and moto (the connections table, API Gateway's management API): the authorizer
admits a jobs:read key and refuses others; $connect, subscribe and $disconnect do what they say; the notifier
posts a state change the relay queued, and its scheduled run sweeps revoked keys."""

from __future__ import annotations

import importlib
import json
import secrets
import sys
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import boto3
import pytest
from moto.apigatewaymanagementapi.models import apigatewaymanagementapi_backends
from moto.core import DEFAULT_ACCOUNT_ID

from tests.integration.test_notify_connections import create_table
from tests.support import invoice_request
from tollgate.core.clock import new_id
from tollgate.outbox.notifications import TenantNews
from tollgate.tenants.keys import Scope, create_key

pytestmark = pytest.mark.integration

METHOD_ARN = "arn:aws:execute-api:eu-west-1:123456789012:abc123/v1/$connect"
ENTRYPOINTS = (
    "functions.websocket_authorizer.handler",
    "functions.websocket.handler",
    "functions.notifier.handler",
)


@pytest.fixture
def handlers(
    clean_db: str, local_aws: Any, monkeypatch: pytest.MonkeyPatch
) -> Iterator[dict[str, ModuleType]]:
    table = f"connections-{secrets.token_hex(4)}"
    create_table(boto3.client("dynamodb"), table)
    monkeypatch.setenv("DATABASE_URL", clean_db)
    monkeypatch.setenv("CONNECTIONS_TABLE", table)
    monkeypatch.setenv("WEBSOCKET_ENDPOINT", local_aws.endpoint_url)
    modules = {name.split(".")[1]: importlib.import_module(name) for name in ENTRYPOINTS}
    yield modules
    modules["websocket_authorizer"].resolver._db.close()
    modules["websocket"].deps.db.close()
    modules["notifier"].deps.db.close()
    for name in ENTRYPOINTS:
        sys.modules.pop(name, None)


def posted(connection_id: str) -> list[dict[str, Any]]:
    backend = apigatewaymanagementapi_backends[DEFAULT_ACCOUNT_ID]["eu-west-1"]
    data = backend.connections[connection_id].data.decode()
    return [json.loads(line) for line in data.replace("}{", "}\n{").splitlines()]


def route(handlers, route_key: str, connection_id: str, body: str | None = None, authorizer=None) -> Any:
    event = {
        "requestContext": {"routeKey": route_key, "connectionId": connection_id, "authorizer": authorizer}
    }
    if body is not None:
        event["body"] = body
    return handlers["websocket"].lambda_handler(event, Context())


class Context:
    function_name = "test"
    memory_limit_in_mb = 128
    invoked_function_arn = "arn:aws:lambda:eu-west-1:123456789012:function:test"
    aws_request_id = "request"


def test_the_authorizer_admits_a_jobs_read_key_and_refuses_others(handlers, tenant, system_db):
    authorize = handlers["websocket_authorizer"].lambda_handler
    policy = authorize(
        {"headers": {"Authorization": f"Bearer {tenant.api_key}"}, "methodArn": METHOD_ARN}, Context()
    )
    assert policy["context"]["tenant_id"] == str(tenant.tenant_id)
    assert policy["policyDocument"]["Statement"][0]["Resource"].endswith("abc123/v1/*")

    writer = create_key(system_db, tenant.tenant_id, new_id, scopes=frozenset({Scope.JOBS_WRITE}))
    for header in (f"Bearer {writer.api_key}", "Bearer tg_not_a_key", None):
        with pytest.raises(Exception, match="Unauthorized"):
            authorize(
                {"headers": {"Authorization": header} if header else {}, "methodArn": METHOD_ARN}, Context()
            )


def test_connect_subscribe_notify_and_disconnect_through_the_entrypoints(handlers, tenant, clean_db):
    authorize = handlers["websocket_authorizer"].lambda_handler
    context = authorize(
        {"headers": {"authorization": f"Bearer {tenant.api_key}"}, "methodArn": METHOD_ARN}, Context()
    )["context"]
    assert route(handlers, "$connect", "conn-1", authorizer=context) == {"statusCode": 200}
    assert route(handlers, "subscribe", "conn-1", json.dumps({"action": "subscribe", "cursor": 0})) == {
        "statusCode": 200
    }
    job_id = tenant.client.submit(invoice_request("INVOICE\nTotal: 1.00 EUR"), "k1").json["job_id"]

    # The relay would queue the tenant's news; the notifier takes the queue's batch.
    body = TenantNews(tenant_id=tenant.tenant_id, sequence=1).model_dump_json()
    assert handlers["notifier"].lambda_handler({"Records": [{"body": body}]}, Context()) == {
        "batchItemFailures": []
    }

    messages = posted("conn-1")
    assert [m["type"] for m in messages] == ["subscribed", "job.state_changed"]
    assert (messages[1]["job_id"], messages[1]["state"], messages[1]["sequence"]) == (job_id, "READY", 1)
    assert route(handlers, "$default", "conn-1", "hello")["statusCode"] == 200
    assert posted("conn-1")[-1]["type"] == "error"
    assert route(handlers, "$disconnect", "conn-1") == {"statusCode": 200}
    assert handlers["websocket"].deps.connections.get("conn-1") is None
    assert handlers["notifier"].lambda_handler({"source": "tollgate.sweep-connections"}, Context()) == {
        "closed": 0
    }


def test_the_sweep_opens_no_database_connection_while_no_client_is_connected(handlers, tenant):
    """An idle stage's sweep runs every minute: were it to connect, a paused Aurora cluster would resume each
    time and never pause again (README's idle costs count on it)."""
    notifier = handlers["notifier"]
    sweep = {"source": "tollgate.sweep-connections"}
    pool = notifier.deps.db.pool
    pool.wait(timeout=5)  # whatever the pool opens at start is open by now

    # Given no connection, when the sweep runs, then PostgreSQL is not asked for anything
    assert notifier.lambda_handler(sweep, Context()) == {"closed": 0}
    assert pool.get_stats().get("connections_num", 0) == 0

    # Given a connected client whose key is due for its check, when the sweep runs, then it reads the key
    context = handlers["websocket_authorizer"].lambda_handler(
        {"headers": {"Authorization": f"Bearer {tenant.api_key}"}, "methodArn": METHOD_ARN}, Context()
    )["context"]
    assert route(handlers, "$connect", "conn-1", authorizer=context) == {"statusCode": 200}
    notifier.deps.connections.mark_key_checked("conn-1", 0.0)
    assert notifier.lambda_handler(sweep, Context()) == {"closed": 0}
    assert pool.get_stats().get("connections_num", 0) == 1
