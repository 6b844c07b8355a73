"""ApiStack's template: every job route behind the authorizer, logged, traced, throttled, with problem+json errors."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from stacks.config import REPO_ROOT, StageConfig
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
from tests.infrastructure.synth import StageSynth
from tollgate.api.problems import PROBLEM_CONTENT_TYPE, PROBLEM_TYPE_BASE
from tollgate.api.surface import http_surface

pytestmark = pytest.mark.infrastructure

Template = dict[str, Any]

# The routes come from the app's own route table (tollgate.api.surface); these tests read it, never a list.
SURFACE = http_surface()
JOB_ROUTES = {(operation.method, operation.path) for operation in SURFACE if operation.public is None}
PUBLIC_ROUTES = {(operation.method, operation.path) for operation in SURFACE if operation.public is not None}


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


def test_the_api_serves_exactly_the_apps_routes(api_template: Template) -> None:
    assert set(_routes(api_template)) == JOB_ROUTES | PUBLIC_ROUTES
    assert ("GET", "/openapi.json") in PUBLIC_ROUTES and len(JOB_ROUTES) >= 19


def _any_parameter(path: str) -> str:
    return re.sub(r"\{[^{}/]+\}", "{}", path)


def _openapi_operations() -> set[tuple[str, str]]:
    document = json.loads((REPO_ROOT / "openapi.json").read_text())
    return {
        (method.upper(), path)
        for path, operations in document["paths"].items()
        for method in operations
        if method in {"get", "put", "post", "delete", "patch"}
    }


@pytest.mark.parametrize("stage", ["dev", "staging", "prod"])
def test_every_documented_operation_is_routed_through_the_authorizer_in_every_stage(
    stage: str, stage_synth: Callable[[str], StageSynth]
) -> None:
    """What a tenant reads in openapi.json is what each stage's API Gateway routes to the API Lambda, behind
    the authorizer: no operation answered by API Gateway before any Lambda runs."""
    synth = stage_synth(stage)
    config, api = synth.config, synth.templates["Api"]
    authorizer_id, _ = only(api, "AWS::ApiGateway::Authorizer")
    function_id, _ = function_by_handler(api, "functions.api.handler.lambda_handler")
    # A path parameter's name does not change what API Gateway routes: /jobs/{id} serves /jobs/{job_id}.
    routes = {(method, _any_parameter(path)): route for (method, path), route in _routes(api).items()}
    documented = {(method, _any_parameter(path)) for method, path in _openapi_operations()}

    unrouted = sorted(documented - set(routes))
    assert not unrouted, f"{stage}: documented but not routed by API Gateway: {unrouted}"
    for route in documented:
        method = routes[route]
        assert method["AuthorizationType"] == "CUSTOM", route
        assert method["AuthorizerId"] == {"Ref": authorizer_id}, route
        assert method["ApiKeyRequired"] is config.enforce_usage_plan, route
        assert references(method["Integration"]["Uri"], function_id), route


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


def test_the_stage_sets_the_accounts_cloudwatch_role_and_waits_for_it(
    api_template: Template, config: StageConfig
) -> None:
    assert config.api_gateway_cloudwatch_role
    account_id, account = only(api_template, "AWS::ApiGateway::Account")
    role_id = account["Properties"]["CloudWatchRoleArn"]["Fn::GetAtt"][0]
    role = resources(api_template, "AWS::IAM::Role")[role_id]
    stage_id, stage = only(api_template, "AWS::ApiGateway::Stage")

    assert role["Properties"]["AssumeRolePolicyDocument"]["Statement"][0]["Principal"] == {
        "Service": "apigateway.amazonaws.com"
    }
    assert "AmazonAPIGatewayPushToCloudWatchLogs" in json.dumps(role["Properties"]["ManagedPolicyArns"])
    # An account-and-region singleton: deleting this stage must not cut off other stages' logging.
    assert account["DeletionPolicy"] == role["DeletionPolicy"] == "Retain"
    assert account["UpdateReplacePolicy"] == role["UpdateReplacePolicy"] == "Retain"
    # A first deploy in a fresh account: the stage's logging settings are refused until the role is set.
    assert account_id in as_list(stage.get("DependsOn", []))
    assert stage_id


def test_the_stage_logs_execution_errors_without_bodies_into_a_group_with_retention(
    api_template: Template, config: StageConfig
) -> None:
    stage_id, stage = only(api_template, "AWS::ApiGateway::Stage")
    (settings,) = stage["Properties"]["MethodSettings"]
    execution_logs = [
        (logical_id, group)
        for logical_id, group in resources(api_template, "AWS::Logs::LogGroup").items()
        if "API-Gateway-Execution-Logs_" in json.dumps(group["Properties"].get("LogGroupName", ""))
    ]

    assert settings["LoggingLevel"] == "ERROR"
    assert settings["DataTraceEnabled"] is False
    assert (settings["HttpMethod"], settings["ResourcePath"]) == ("*", "/*")
    ((group_id, group),) = execution_logs
    assert group["Properties"]["RetentionInDays"] > 0
    assert render(group["Properties"]["LogGroupName"]).endswith(f"/{stage['Properties']['StageName']}")
    assert group_id in as_list(stage.get("DependsOn", []))
    assert stage_id


def test_a_stage_without_a_firewall_says_why_and_has_none(
    api_template: Template, config: StageConfig, validation_report: dict[str, Any]
) -> None:
    assert not config.waf_enabled
    assert not resources(api_template, "AWS::WAFv2::WebACL")
    assert not resources(api_template, "AWS::WAFv2::WebACLAssociation")
    assert "waf_enabled" in json.dumps(validation_report)


def _bare_api_template(tmp_path: Path, **overrides: Any) -> Template:
    """The REST API (and firewall) of ApiStack built in a bare stack, for settings the session's dev stage
    does not have; quick, since nothing else is synthesized. The synth checks the template against
    CloudFormation's resource schemas (cdk.json's feature flags), as the real one does."""
    import aws_cdk as cdk
    from aws_cdk import aws_apigateway as apigw
    from aws_cdk import aws_logs as logs

    from app import cdk_json_context
    from stacks.api_stack import api_firewall, rest_api

    config = StageConfig(stage="dev", **overrides)
    app = cdk.App(outdir=str(tmp_path), context=cdk_json_context())
    stack = cdk.Stack(app, "Bare")
    api = rest_api(stack, config, logs.LogGroup(stack, "AccessLogs"))
    api.root.add_method("GET", apigw.MockIntegration())
    api_firewall(stack, config, api)
    assembly = app.synth()
    template: Template = assembly.get_stack_by_name("Bare").template
    return template


def test_a_stage_that_does_not_own_the_cloudwatch_role_leaves_the_account_setting_alone(
    tmp_path: Path,
) -> None:
    template = _bare_api_template(tmp_path, api_gateway_cloudwatch_role=False)

    assert not resources(template, "AWS::ApiGateway::Account")
    assert not resources(template, "AWS::IAM::Role")
    # It still logs: through the role another stage (or the account's owner) set.
    _, stage = only(template, "AWS::ApiGateway::Stage")
    assert stage["Properties"]["MethodSettings"][0]["LoggingLevel"] == "ERROR"


def test_an_enabled_firewall_rate_limits_each_address_before_the_common_rules(tmp_path: Path) -> None:
    template = _bare_api_template(tmp_path, waf_enabled=True, waf_rate_limit=4321)
    acl_id, acl = only(template, "AWS::WAFv2::WebACL")
    _, association = only(template, "AWS::WAFv2::WebACLAssociation")
    stage_id, _ = only(template, "AWS::ApiGateway::Stage")
    rate, common = sorted(acl["Properties"]["Rules"], key=lambda rule: rule["Priority"])

    assert acl["Properties"]["Scope"] == "REGIONAL"
    assert association["Properties"]["WebACLArn"] == {"Fn::GetAtt": [acl_id, "Arn"]}
    assert references(association["Properties"]["ResourceArn"], stage_id)
    assert stage_id in as_list(association.get("DependsOn", []))

    statement = rate["Statement"]["RateBasedStatement"]
    assert (statement["Limit"], statement["AggregateKeyType"]) == (4321, "IP")
    response = rate["Action"]["Block"]["CustomResponse"]
    assert response["ResponseCode"] == 429
    problem = json.loads(
        acl["Properties"]["CustomResponseBodies"][response["CustomResponseBodyKey"]]["Content"]
    )
    assert problem["type"].startswith(PROBLEM_TYPE_BASE) and problem["status"] == 429

    managed = common["Statement"]["ManagedRuleGroupStatement"]
    assert (managed["VendorName"], managed["Name"]) == ("AWS", "AWSManagedRulesCommonRuleSet")
    # Inline documents are larger than the rule set's 8 KB body limit; the API enforces its own limit.
    assert managed["RuleActionOverrides"] == [{"Name": "SizeRestrictions_BODY", "ActionToUse": {"Count": {}}}]
    for visibility in [acl["Properties"]["VisibilityConfig"]] + [
        r["VisibilityConfig"] for r in (rate, common)
    ]:
        assert visibility["CloudWatchMetricsEnabled"] is True


def test_a_firewall_rate_below_a_tenants_plan_is_refused() -> None:
    with pytest.raises(ValueError, match="waf_rate_limit"):
        StageConfig(stage="dev", usage_plan_rate=10, waf_rate_limit=2999)


def test_tenant_provisioning_may_make_keys_and_add_them_to_this_plan_only(tmp_path: Path) -> None:
    import aws_cdk as cdk
    from aws_cdk import aws_apigateway as apigw
    from aws_cdk import aws_iam as iam
    from aws_cdk.assertions import Template as CdkTemplate

    from stacks.api_stack import grant_usage_keys

    stack = cdk.Stack(cdk.App(outdir=str(tmp_path)), "Bare")
    plan = apigw.UsagePlan(stack, "Plan")
    role = iam.Role(stack, "Ops", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))
    grant_usage_keys(role, plan)
    template: Template = CdkTemplate.from_stack(stack).to_json()
    plan_id, _ = only(template, "AWS::ApiGateway::UsagePlan")

    granted = {
        render(resource): sorted(as_list(statement["Action"]))
        for _, statement in policy_statements(template)
        for resource in as_list(statement["Resource"])
    }
    assert granted == {
        "arn:${AWS::Partition}:apigateway:${AWS::Region}::/apikeys": ["apigateway:GET", "apigateway:POST"],
        "arn:${AWS::Partition}:apigateway:${AWS::Region}::/usageplans/${" + plan_id + "}/keys": [
            "apigateway:POST"
        ],
    }
