"""NotificationsStack's template: a WebSocket API whose $connect alone is authorized (by the tenant's key in
the Authorization header), four routes to one route Lambda, a throttled and access-logged stage, a connections
table with a TTL and a by-tenant index, and a notifier fed by Pipeline's notifications queue; every grant is
the least its function needs."""

from __future__ import annotations

import json
from typing import Any

import pytest

from stacks.config import StageConfig
from stacks.constructs.database_wakes import METADATA_KEY, WHILE_CLIENTS_CONNECTED
from stacks.notifications_stack import (
    CONNECTION_KEY,
    IDENTITY_SOURCE,
    ROUTES,
    STAGE_NAME,
    TENANT_INDEX,
    TENANT_KEY,
    TTL_ATTRIBUTE,
)
from tests.infrastructure.cfn import (
    as_list,
    function_by_handler,
    local_id,
    only,
    policy_statements,
    render,
    resources,
)

pytestmark = pytest.mark.infrastructure

Template = dict[str, Any]

AUTHORIZER = "functions.websocket_authorizer.handler.lambda_handler"
ROUTE_HANDLER = "functions.websocket.handler.lambda_handler"
NOTIFIER = "functions.notifier.handler.lambda_handler"


def _role_of(template: Template, handler: str) -> str:
    _, function = function_by_handler(template, handler)
    return local_id(function["Properties"]["Role"], template)


def _granted(template: Template, handler: str) -> dict[str, list[Any]]:
    """Action -> resources granted to a function's role (its default policy)."""
    role = _role_of(template, handler)
    granted: dict[str, list[Any]] = {}
    for _, policy in resources(template, "AWS::IAM::Policy").items():
        if {"Ref": role} not in policy["Properties"]["Roles"]:
            continue
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            assert statement["Effect"] == "Allow"
            for action in as_list(statement["Action"]):
                granted.setdefault(action, []).extend(as_list(statement["Resource"]))
    return granted


def test_the_api_is_a_websocket_api_routed_by_the_messages_action(notifications_template: Template) -> None:
    _, api = only(notifications_template, "AWS::ApiGatewayV2::Api")

    assert api["Properties"]["ProtocolType"] == "WEBSOCKET"
    assert api["Properties"]["RouteSelectionExpression"] == "$request.body.action"
    assert api["Properties"]["Name"] == "tollgate-dev-notifications"


def test_every_route_goes_to_the_route_lambda_and_only_connect_is_authorized(
    notifications_template: Template,
) -> None:
    routes = {
        route["Properties"]["RouteKey"]: route["Properties"]
        for route in resources(notifications_template, "AWS::ApiGatewayV2::Route").values()
    }
    integrations = resources(notifications_template, "AWS::ApiGatewayV2::Integration")
    route_handler, _ = function_by_handler(notifications_template, ROUTE_HANDLER)
    authorizer_id, _ = only(notifications_template, "AWS::ApiGatewayV2::Authorizer")

    assert set(routes) == set(ROUTES) == {"$connect", "$disconnect", "subscribe", "$default"}
    for key, route in routes.items():
        integration_id = render(route["Target"]).removeprefix("integrations/${").removesuffix("}")
        integration = integrations[integration_id]["Properties"]
        assert integration["IntegrationType"] == "AWS_PROXY"
        assert route_handler in json.dumps(integration["IntegrationUri"])
        if key == "$connect":
            assert route["AuthorizationType"] == "CUSTOM"
            assert route["AuthorizerId"] == {"Ref": authorizer_id}
        else:
            assert route["AuthorizationType"] == "NONE"


def test_connect_is_authorized_by_the_websocket_authorizer_on_the_authorization_header(
    notifications_template: Template,
) -> None:
    _, authorizer = only(notifications_template, "AWS::ApiGatewayV2::Authorizer")
    function_id, _ = function_by_handler(notifications_template, AUTHORIZER)
    permissions = [
        permission["Properties"]
        for permission in resources(notifications_template, "AWS::Lambda::Permission").values()
        if permission["Properties"]["FunctionName"] == {"Fn::GetAtt": [function_id, "Arn"]}
    ]

    assert authorizer["Properties"]["AuthorizerType"] == "REQUEST"
    assert authorizer["Properties"]["IdentitySource"] == [IDENTITY_SOURCE]
    assert IDENTITY_SOURCE == "route.request.header.Authorization"
    assert function_id in json.dumps(authorizer["Properties"]["AuthorizerUri"])
    # Only API Gateway may invoke it, and only for this API.
    assert [p["Principal"] for p in permissions] == ["apigateway.amazonaws.com"]
    (api_id, _) = only(notifications_template, "AWS::ApiGatewayV2::Api")
    assert api_id in json.dumps(permissions[0]["SourceArn"])


def test_the_stage_deploys_itself_is_throttled_and_access_logged(
    notifications_template: Template, config: StageConfig
) -> None:
    _, stage = only(notifications_template, "AWS::ApiGatewayV2::Stage")
    properties = stage["Properties"]
    log_group_id = local_id(properties["AccessLogSettings"]["DestinationArn"], notifications_template)
    log_group = resources(notifications_template, "AWS::Logs::LogGroup")[log_group_id]["Properties"]
    fields = json.loads(properties["AccessLogSettings"]["Format"])

    assert properties["StageName"] == STAGE_NAME
    assert properties["AutoDeploy"] is True
    assert properties["DefaultRouteSettings"] == {
        "ThrottlingRateLimit": config.notifications.throttle_rate,
        "ThrottlingBurstLimit": config.notifications.throttle_burst,
    }
    assert {"connectionId", "routeKey", "status", "error"} <= set(fields)
    assert not [value for value in fields.values() if "body" in value.lower()]
    assert log_group["RetentionInDays"] > 0


def test_the_connections_table_expires_records_and_finds_them_by_tenant(
    notifications_template: Template,
) -> None:
    _, table = only(notifications_template, "AWS::DynamoDB::Table")
    properties = table["Properties"]
    (index,) = properties["GlobalSecondaryIndexes"]

    assert properties["KeySchema"] == [{"AttributeName": CONNECTION_KEY, "KeyType": "HASH"}]
    assert properties["BillingMode"] == "PAY_PER_REQUEST"
    assert properties["TimeToLiveSpecification"] == {"AttributeName": TTL_ATTRIBUTE, "Enabled": True}
    assert (CONNECTION_KEY, TENANT_KEY, TENANT_INDEX, TTL_ATTRIBUTE) == (
        "connection_id",
        "tenant_id",
        "by_tenant",
        "expires_at",
    )
    assert index == {
        "IndexName": TENANT_INDEX,
        "KeySchema": [{"AttributeName": TENANT_KEY, "KeyType": "HASH"}],
        "Projection": {"ProjectionType": "ALL"},
    }
    assert properties["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
    assert properties["SSESpecification"] == {"SSEEnabled": True}


def test_the_route_lambda_and_the_notifier_read_and_write_connections_and_post_on_this_stage_only(
    notifications_template: Template,
) -> None:
    table_id, _ = only(notifications_template, "AWS::DynamoDB::Table")
    api_id, _ = only(notifications_template, "AWS::ApiGatewayV2::Api")
    for handler in (ROUTE_HANDLER, NOTIFIER):
        granted = _granted(notifications_template, handler)
        (manage,) = granted["execute-api:ManageConnections"]

        assert render(manage).endswith(f"${{{api_id}}}/{STAGE_NAME}/*/@connections/*")
        for action in ("dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:DeleteItem", "dynamodb:Query"):
            assert {
                local_id(arn, notifications_template) for arn in granted[action] if "Ref" in str(arn)
            } <= {table_id}
            assert {"Fn::GetAtt": [table_id, "Arn"]} in granted[action]
        assert "secretsmanager:GetSecretValue" in granted


def test_the_authorizer_reads_the_database_secret_and_nothing_of_the_stacks_own(
    notifications_template: Template,
) -> None:
    granted = _granted(notifications_template, AUTHORIZER)

    assert "secretsmanager:GetSecretValue" in granted
    assert not [action for action in granted if action.split(":")[0] in {"dynamodb", "execute-api", "sqs"}]


def test_the_notifier_consumes_the_pipelines_notifications_queue_with_partial_batch_responses(
    notifications_template: Template, pipeline_template: Template, config: StageConfig
) -> None:
    _, mapping = only(notifications_template, "AWS::Lambda::EventSourceMapping")
    notifier_id, _ = function_by_handler(notifications_template, NOTIFIER)
    (queue_id,) = [
        logical_id
        for logical_id, queue in resources(pipeline_template, "AWS::SQS::Queue").items()
        if queue["Properties"]["QueueName"] == "tollgate-dev-notifications.fifo"
    ]
    source = mapping["Properties"]["EventSourceArn"]["Fn::GetStackOutput"]

    assert mapping["Properties"]["FunctionName"] == {"Ref": notifier_id}
    assert mapping["Properties"]["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert mapping["Properties"]["BatchSize"] <= 10
    assert mapping["Properties"]["ScalingConfig"] == {
        "MaximumConcurrency": config.notifications.notifier_max_concurrency
    }
    assert source["StackName"] == "Tollgate-dev-Pipeline"
    assert pipeline_template["Outputs"][source["OutputName"]]["Value"] == {"Fn::GetAtt": [queue_id, "Arn"]}
    granted = _granted(notifications_template, NOTIFIER)
    assert "sqs:ReceiveMessage" in granted and "sqs:SendMessage" not in granted
    assert not [
        action for action in _granted(notifications_template, ROUTE_HANDLER) if action.startswith("sqs:")
    ]


def test_route_and_notifier_functions_know_the_table_and_the_stages_management_endpoint(
    notifications_template: Template, config: StageConfig
) -> None:
    table_id, _ = only(notifications_template, "AWS::DynamoDB::Table")
    api_id, _ = only(notifications_template, "AWS::ApiGatewayV2::Api")
    for handler in (ROUTE_HANDLER, NOTIFIER):
        _, function = function_by_handler(notifications_template, handler)
        variables = function["Properties"]["Environment"]["Variables"]

        assert variables["CONNECTIONS_TABLE"] == {"Ref": table_id}
        assert render(variables["WEBSOCKET_ENDPOINT"]).startswith(f"https://${{{api_id}}}.execute-api.")
        assert render(variables["WEBSOCKET_ENDPOINT"]).endswith(f"/{STAGE_NAME}")
        # The per-tenant cap is enforced in code, at $connect: the stage passes it.
        assert variables["MAX_CONNECTIONS_PER_TENANT"] == str(config.notifications.max_connections_per_tenant)


def test_no_statement_grants_anything_but_xray_on_every_resource(notifications_template: Template) -> None:
    for _, statement in policy_statements(notifications_template):
        if "*" in as_list(statement["Resource"]):
            assert set(as_list(statement["Action"])) <= {"xray:PutTraceSegments", "xray:PutTelemetryRecords"}


def test_outputs_name_the_websocket_url_and_the_table(notifications_template: Template) -> None:
    outputs = notifications_template["Outputs"]

    assert render(outputs["WebSocketUrl"]["Value"]).startswith("wss://")
    assert {"WebSocketUrl", "ConnectionsTableName"} <= set(outputs)


def test_a_throttle_burst_below_its_rate_is_refused() -> None:
    with pytest.raises(ValueError, match="throttle_burst"):
        StageConfig(stage="dev", notifications={"throttle_rate": 50, "throttle_burst": 10})


def test_a_sweep_every_minute_closes_the_connections_of_revoked_keys(
    notifications_template: Template,
) -> None:
    rules = resources(notifications_template, "AWS::Events::Rule")
    [rule] = [r["Properties"] for r in rules.values() if "revoked" in r["Properties"]["Description"]]
    assert rule["ScheduleExpression"] == "rate(1 minute)"
    [target] = rule["Targets"]
    assert json.loads(target["Input"]) == {"source": "tollgate.sweep-connections"}
    notifier, _ = function_by_handler(notifications_template, NOTIFIER)
    assert target["Arn"] == {"Fn::GetAtt": [notifier, "Arn"]}


def test_the_sweep_is_declared_to_reach_the_database_only_while_clients_are_connected(
    notifications_template: Template, config: StageConfig
) -> None:
    """The idle cost model reads this declaration: an idle stage's sweep does not keep Aurora awake."""
    rules = resources(notifications_template, "AWS::Events::Rule")
    [rule] = [r for r in rules.values() if "revoked" in r["Properties"]["Description"]]

    assert rule["Metadata"][METADATA_KEY] == {
        "Wakes": WHILE_CLIENTS_CONNECTED,
        "EverySeconds": max(60, config.notifications.key_check_seconds),
    }
