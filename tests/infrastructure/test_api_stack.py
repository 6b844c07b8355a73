"""ApiStack's template: every job route behind the authorizer, logged, traced, throttled, with problem+json errors."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from stacks.config import StageConfig
from tests.infrastructure.cfn import (
    as_list,
    export_of,
    function_by_handler,
    only,
    policy_statements,
    references,
    render,
    resources,
)
from tollgate.api.problems import PROBLEM_CONTENT_TYPE, PROBLEM_TYPE_BASE

pytestmark = pytest.mark.infrastructure

Template = dict[str, Any]

JOB_ROUTES = {
    ("POST", "/extraction-jobs"),
    ("GET", "/extraction-jobs"),
    ("GET", "/extraction-jobs/{id}"),
    ("GET", "/extraction-jobs/{id}/result"),
    ("POST", "/extraction-jobs/{id}/cancel"),
    ("GET", "/extraction-jobs/{id}/review"),
    ("POST", "/extraction-jobs/{id}/review"),
    ("GET", "/reviews"),
}
PUBLIC_ROUTES = {("GET", "/openapi.json")}


def _paths(template: Template) -> dict[str, str]:
    """Logical id of each API Gateway resource -> its full path."""
    api_resources = resources(template, "AWS::ApiGateway::Resource")

    def path_of(logical_id: str) -> str:
        properties = api_resources[logical_id]["Properties"]
        parent = properties["ParentId"]
        prefix = path_of(parent["Ref"]) if "Ref" in parent else ""
        return f"{prefix}/{properties['PathPart']}"

    return {logical_id: path_of(logical_id) for logical_id in api_resources}


def _routes(template: Template) -> dict[tuple[str, str], dict[str, Any]]:
    paths = _paths(template)
    return {
        (method["Properties"]["HttpMethod"], paths[method["Properties"]["ResourceId"]["Ref"]]): method[
            "Properties"
        ]
        for method in resources(template, "AWS::ApiGateway::Method").values()
    }


def test_the_api_serves_exactly_the_documented_routes(api_template: Template) -> None:
    assert set(_routes(api_template)) == JOB_ROUTES | PUBLIC_ROUTES


def test_every_job_route_goes_through_the_token_authorizer(api_template: Template) -> None:
    authorizer_id, authorizer = only(api_template, "AWS::ApiGateway::Authorizer")
    routes = _routes(api_template)

    assert authorizer["Properties"]["Type"] == "TOKEN"
    assert authorizer["Properties"]["IdentitySource"] == "method.request.header.Authorization"
    assert authorizer["Properties"]["AuthorizerResultTtlInSeconds"] == 300
    authorizer_function, _ = function_by_handler(api_template, "functions.authorizer.handler.lambda_handler")
    assert references(authorizer["Properties"]["AuthorizerUri"], authorizer_function)
    for route in JOB_ROUTES:
        assert routes[route]["AuthorizationType"] == "CUSTOM", route
        assert routes[route]["AuthorizerId"] == {"Ref": authorizer_id}, route


def test_authorizer_refuses_malformed_headers_before_invoking_the_lambda(api_template: Template) -> None:
    _, authorizer = only(api_template, "AWS::ApiGateway::Authorizer")
    pattern = re.compile(authorizer["Properties"]["IdentityValidationExpression"])

    assert pattern.match("Bearer tg_live_abc123")
    assert pattern.match("bearer tg_live_abc123")
    assert not pattern.match("Basic dXNlcjpwYXNz")
    assert not pattern.match("Bearer ")


def test_only_the_openapi_document_is_public(api_template: Template) -> None:
    routes = _routes(api_template)

    for route in PUBLIC_ROUTES:
        assert routes[route]["AuthorizationType"] == "NONE"
        assert "AuthorizerId" not in routes[route]


def test_usage_plan_keys_follow_the_stage_setting(api_template: Template, config: StageConfig) -> None:
    routes = _routes(api_template)
    _, api = only(api_template, "AWS::ApiGateway::RestApi")

    assert api["Properties"]["ApiKeySourceType"] == "AUTHORIZER"
    for route in JOB_ROUTES:
        assert routes[route]["ApiKeyRequired"] is config.enforce_usage_plan
    for route in PUBLIC_ROUTES:
        assert routes[route]["ApiKeyRequired"] is False


def test_every_route_is_a_proxy_integration_of_the_api_lambda(api_template: Template) -> None:
    function_id, _ = function_by_handler(api_template, "functions.api.handler.lambda_handler")

    for route, method in _routes(api_template).items():
        assert method["Integration"]["Type"] == "AWS_PROXY", route
        assert references(method["Integration"]["Uri"], function_id), route


def test_stage_logs_traces_and_throttles(api_template: Template, config: StageConfig) -> None:
    _, stage = only(api_template, "AWS::ApiGateway::Stage")
    properties = stage["Properties"]
    access_log_groups = [
        logical_id
        for logical_id in resources(api_template, "AWS::Logs::LogGroup")
        if references(properties["AccessLogSetting"]["DestinationArn"], logical_id)
    ]

    assert len(access_log_groups) == 1
    fields = json.loads(properties["AccessLogSetting"]["Format"])
    assert {"requestId", "status", "tenantId", "authorizerError", "errorType"} <= fields.keys()
    assert properties["TracingEnabled"] is True
    (settings,) = properties["MethodSettings"]
    assert settings["ThrottlingRateLimit"] == config.api_throttle_rate
    assert settings["ThrottlingBurstLimit"] == config.api_throttle_burst
    assert settings["DataTraceEnabled"] is False


def test_usage_plan_throttles_and_caps_each_tenant(api_template: Template, config: StageConfig) -> None:
    _, plan = only(api_template, "AWS::ApiGateway::UsagePlan")
    stage_id, _ = only(api_template, "AWS::ApiGateway::Stage")

    assert plan["Properties"]["Throttle"] == {
        "RateLimit": config.usage_plan_rate,
        "BurstLimit": config.usage_plan_burst,
    }
    assert plan["Properties"]["Quota"] == {"Limit": config.usage_plan_daily_quota, "Period": "DAY"}
    assert [api_stage["Stage"] for api_stage in plan["Properties"]["ApiStages"]] == [{"Ref": stage_id}]


@pytest.mark.parametrize(
    ("response_type", "status"),
    [
        ("UNAUTHORIZED", 401),
        ("ACCESS_DENIED", 403),
        ("THROTTLED", 429),
        ("QUOTA_EXCEEDED", 429),
        ("MISSING_AUTHENTICATION_TOKEN", 404),
        ("AUTHORIZER_FAILURE", 503),
        ("DEFAULT_4XX", None),
        ("DEFAULT_5XX", None),
    ],
)
def test_gateway_errors_are_problem_details(
    api_template: Template, response_type: str, status: int | None
) -> None:
    _, response = only(api_template, "AWS::ApiGateway::GatewayResponse", ResponseType=response_type)
    properties = response["Properties"]

    assert (
        properties["ResponseParameters"]["gatewayresponse.header.Content-Type"] == f"'{PROBLEM_CONTENT_TYPE}'"
    )
    assert properties.get("StatusCode") == (None if status is None else str(status))
    # API Gateway substitutes these; messageString arrives quoted, like any JSON string.
    body = properties["ResponseTemplates"]["application/json"].replace(
        "$context.error.messageString", '"message"'
    )
    problem = json.loads(body)
    assert problem["type"].startswith(PROBLEM_TYPE_BASE)
    assert problem["title"] and problem["detail"]
    # A catch-all cannot know the status it answers with, so it leaves the advisory member out.
    assert problem.get("status") == status
    if status == 503:
        assert properties["ResponseParameters"]["gatewayresponse.header.Retry-After"] == "'5'"


def test_both_functions_run_in_the_vpc_with_tracing(api_template: Template) -> None:
    for handler in ("functions.api.handler.lambda_handler", "functions.authorizer.handler.lambda_handler"):
        _, function = function_by_handler(api_template, handler)
        properties = function["Properties"]
        assert properties["TracingConfig"] == {"Mode": "Active"}
        assert len(properties["VpcConfig"]["SubnetIds"]) >= 2
        assert len(properties["VpcConfig"]["SecurityGroupIds"]) == 1


def _actions_of(template: Template, function_handler: str) -> set[str]:
    _, function = function_by_handler(template, function_handler)
    role_id = function["Properties"]["Role"]["Fn::GetAtt"][0]
    return {
        action
        for policy_id, statement in policy_statements(template)
        if {"Ref": role_id} in resources(template, "AWS::IAM::Policy")[policy_id]["Properties"]["Roles"]
        for action in as_list(statement["Action"])
    }


def test_api_lambda_reads_and_writes_documents_but_cannot_delete_them(api_template: Template) -> None:
    actions = _actions_of(api_template, "functions.api.handler.lambda_handler")

    assert {
        "s3:GetObject*",
        "s3:PutObject",
        "kms:GenerateDataKey*",
        "secretsmanager:GetSecretValue",
    } <= actions
    assert not [action for action in actions if action.startswith("s3:Delete")]


def test_api_lambda_may_invoke_the_relay_and_only_its_latest_version(api_template: Template) -> None:
    _, function = function_by_handler(api_template, "functions.api.handler.lambda_handler")
    role_id = function["Properties"]["Role"]["Fn::GetAtt"][0]
    (invoke,) = [
        statement
        for policy_id, statement in policy_statements(api_template)
        if {"Ref": role_id} in resources(api_template, "AWS::IAM::Policy")[policy_id]["Properties"]["Roles"]
        and "lambda:InvokeFunction" in as_list(statement["Action"])
    ]
    relay_name = function["Properties"]["Environment"]["Variables"]["RELAY_FUNCTION_NAME"]

    assert as_list(invoke["Action"]) == ["lambda:InvokeFunction"]
    relay_arn, latest = as_list(invoke["Resource"])
    # The unqualified function and $LATEST, which is what an unqualified name invokes; no ":*" wildcard.
    assert latest == {"Fn::Join": ["", [relay_arn, ":$LATEST"]]}
    # The same relay the environment names, both read from the pipeline stack's outputs.
    assert relay_arn["Fn::GetStackOutput"]["StackName"] == relay_name["Fn::GetStackOutput"]["StackName"]
    assert relay_arn["Fn::GetStackOutput"]["OutputName"].startswith(
        "PublishOutputFnGetAttOutboxRelayFunction"
    )


def test_authorizer_reads_the_database_secret_and_nothing_else(api_template: Template) -> None:
    actions = _actions_of(api_template, "functions.authorizer.handler.lambda_handler")

    assert actions == {
        "secretsmanager:DescribeSecret",
        "secretsmanager:GetSecretValue",
        "xray:PutTelemetryRecords",
        "xray:PutTraceSegments",
    }


def test_documents_policy_names_the_data_stacks_bucket(
    api_template: Template, data_template: Template
) -> None:
    (bucket_id,) = [
        logical_id
        for logical_id, b in resources(data_template, "AWS::S3::Bucket").items()
        if "BucketName" in b["Properties"]
    ]
    # Imported from DataStack's export, so CloudFormation knows this stack uses the bucket.
    bucket_name = "${Import:" + export_of(data_template, bucket_id) + "}"
    _, function = function_by_handler(api_template, "functions.api.handler.lambda_handler")
    s3_resources = {
        render(resource)
        for _, statement in policy_statements(api_template)
        if any(action.startswith("s3:") for action in as_list(statement["Action"]))
        for resource in as_list(statement["Resource"])
    }

    assert render(function["Properties"]["Environment"]["Variables"]["DOCUMENTS_BUCKET"]) == bucket_name
    bucket_arn = "arn:${AWS::Partition}:s3:::" + bucket_name
    assert s3_resources == {bucket_arn, bucket_arn + "/*"}


@pytest.mark.parametrize("template_name", ["api_template", "data_template", "pipeline_template"])
def test_no_permission_on_every_resource_except_tracing_and_logging(
    template_name: str, request: pytest.FixtureRequest
) -> None:
    template: Template = request.getfixturevalue(template_name)

    for policy_id, statement in policy_statements(template):
        if statement["Effect"] == "Allow" and "*" in as_list(statement["Resource"]):
            actions = as_list(statement["Action"])
            assert all(action.startswith("xray:") for action in actions), (policy_id, actions)
