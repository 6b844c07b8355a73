"""DeliveryStack's template: the package's own dispatcher definition as a Standard state machine, logged and
traced, invoking only the attempt Lambda, which sends from the egress subnets; only the relay and the API may
start executions. The alarms on deliveries and endpoints are ObservabilityStack's (test_observability_stack)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from stacks.config import StageConfig
from stacks.delivery_stack import ATTEMPT_FUNCTION_PLACEHOLDER, DISPATCHER_DEFINITION
from tests.infrastructure.cfn import (
    as_list,
    function_by_handler,
    local_id,
    only,
    policy_statements,
    references,
    resources,
    subnet_groups,
)
from tests.infrastructure.synth import Synthesized
from tollgate_dev.local.stepfunctions import DEFINITION as LOCAL_DEFINITION

pytestmark = pytest.mark.infrastructure

Template = dict[str, Any]

ATTEMPT = "functions.webhook_attempt.handler.lambda_handler"
RELAY = "functions.outbox_relay.handler.lambda_handler"
API = "functions.api.handler.lambda_handler"
SCHEDULER = "functions.scheduler.handler.lambda_handler"
# What CDK grants a state machine for logging to CloudWatch Logs; none of it takes a resource ARN.
LOG_DELIVERY_ACTIONS = {
    "logs:CreateLogDelivery",
    "logs:DeleteLogDelivery",
    "logs:DescribeLogGroups",
    "logs:DescribeResourcePolicies",
    "logs:GetLogDelivery",
    "logs:ListLogDeliveries",
    "logs:PutResourcePolicy",
    "logs:UpdateLogDelivery",
}


def _dispatcher(template: Template) -> tuple[str, dict[str, Any]]:
    logical_id, state_machine = only(template, "AWS::StepFunctions::StateMachine")
    properties: dict[str, Any] = state_machine["Properties"]
    return logical_id, properties


def _deployed_definition(synthesized: Synthesized, template: Template) -> dict[str, Any]:
    """The definition file as synthesized into the cloud assembly, before CloudFormation's substitutions."""
    _, dispatcher = _dispatcher(template)
    assert "DefinitionString" not in dispatcher
    asset = synthesized.outdir / f"asset.{dispatcher['DefinitionS3Location']['Key']}"
    definition: dict[str, Any] = json.loads(asset.read_text())
    return definition


def _statements_of(template: Template, role_id: str) -> list[dict[str, Any]]:
    return [
        statement
        for policy_id, statement in policy_statements(template)
        if policy_id == role_id
        or {"Ref": role_id} in template["Resources"][policy_id]["Properties"].get("Roles", [])
    ]


def _function_role(template: Template, handler: str) -> str:
    _, function = function_by_handler(template, handler)
    return str(function["Properties"]["Role"]["Fn::GetAtt"][0])


def test_dispatcher_is_a_standard_state_machine(delivery_template: Template) -> None:
    _, dispatcher = _dispatcher(delivery_template)

    assert dispatcher["StateMachineType"] == "STANDARD"


def test_dispatcher_definition_is_the_packages_file_unchanged(
    synthesized: Synthesized, delivery_template: Template
) -> None:
    """The deployed states are the file the local stack runs, byte for byte in meaning: no copy, no rewrite."""
    deployed = _deployed_definition(synthesized, delivery_template)

    assert DISPATCHER_DEFINITION.resolve() == LOCAL_DEFINITION.resolve()
    assert deployed == json.loads(DISPATCHER_DEFINITION.read_text())
    assert set(deployed["States"]) == {"Attempt", "Decide", "Backoff", "Delivered", "GaveUp"}


def test_every_placeholder_becomes_the_attempt_lambdas_arn(
    synthesized: Synthesized, delivery_template: Template
) -> None:
    attempt_id, _ = function_by_handler(delivery_template, ATTEMPT)
    _, dispatcher = _dispatcher(delivery_template)
    placeholders = set(re.findall(r"\$\{(\w+)\}", DISPATCHER_DEFINITION.read_text()))

    assert placeholders == {ATTEMPT_FUNCTION_PLACEHOLDER}
    assert dispatcher["DefinitionSubstitutions"] == {
        ATTEMPT_FUNCTION_PLACEHOLDER: {"Fn::GetAtt": [attempt_id, "Arn"]}
    }
    tasks = [
        state
        for state in _deployed_definition(synthesized, delivery_template)["States"].values()
        if state["Type"] == "Task"
    ]
    assert [task["Resource"] for task in tasks] == ["arn:aws:states:::lambda:invoke"]
    assert [task["Parameters"]["FunctionName"] for task in tasks] == [f"${{{ATTEMPT_FUNCTION_PLACEHOLDER}}}"]


def test_dispatcher_logs_every_event_without_execution_data_and_traces(
    delivery_template: Template, config: StageConfig
) -> None:
    _, dispatcher = _dispatcher(delivery_template)
    logging_config = dispatcher["LoggingConfiguration"]
    (destination,) = logging_config["Destinations"]
    log_group_id = destination["CloudWatchLogsLogGroup"]["LogGroupArn"]["Fn::GetAtt"][0]
    log_group = delivery_template["Resources"][log_group_id]["Properties"]

    assert logging_config["Level"] == "ALL"
    assert logging_config["IncludeExecutionData"] is False
    assert dispatcher["TracingConfiguration"] == {"Enabled": True}
    # dev keeps TWO_WEEKS (cdk.json); Step Functions would not create a group, let alone expire it.
    assert config.log_retention == "TWO_WEEKS"
    assert log_group["RetentionInDays"] == 14
    assert log_group["LogGroupName"].startswith("/aws/vendedlogs/states/")


def test_the_dispatcher_invokes_the_attempt_lambda_and_nothing_else(delivery_template: Template) -> None:
    attempt_id, _ = function_by_handler(delivery_template, ATTEMPT)
    _, dispatcher = _dispatcher(delivery_template)
    role_id = dispatcher["RoleArn"]["Fn::GetAtt"][0]
    statements = _statements_of(delivery_template, role_id)
    invoked = [
        resource
        for statement in statements
        if "lambda:InvokeFunction" in as_list(statement["Action"])
        for resource in as_list(statement["Resource"])
    ]
    actions = {action for statement in statements for action in as_list(statement["Action"])}

    # The unqualified function and $LATEST, which is what the definition's unqualified ARN invokes.
    assert invoked == [
        {"Fn::GetAtt": [attempt_id, "Arn"]},
        {"Fn::Join": ["", [{"Fn::GetAtt": [attempt_id, "Arn"]}, ":$LATEST"]]},
    ]
    assert {action for action in actions if not action.startswith(("xray:", "logs:"))} == {
        "lambda:InvokeFunction"
    }


def test_no_permission_on_every_resource_except_tracing_and_log_delivery(delivery_template: Template) -> None:
    for policy_id, statement in policy_statements(delivery_template):
        if statement["Effect"] == "Allow" and "*" in as_list(statement["Resource"]):
            actions = as_list(statement["Action"])
            assert all(a.startswith("xray:") or a in LOG_DELIVERY_ACTIONS for a in actions), (
                policy_id,
                actions,
            )


def test_attempt_lambda_sends_from_the_egress_subnets_of_every_az(
    delivery_template: Template, data_template: Template
) -> None:
    _, function = function_by_handler(delivery_template, ATTEMPT)
    groups = subnet_groups(data_template)
    subnets = [local_id(subnet, data_template) for subnet in function["Properties"]["VpcConfig"]["SubnetIds"]]

    assert sorted(subnets) == sorted(sid for sid, group in groups.items() if group == "egress")


def test_attempt_lambda_may_reach_receivers_on_443_and_unprivileged_ports_only(
    delivery_template: Template, data_template: Template
) -> None:
    """The ports the sender's SSRF policy allows, and no others of its own; the database clients' group admits
    it to RDS Proxy and the endpoints. Nothing may connect to it."""
    _, function = function_by_handler(delivery_template, ATTEMPT)
    shared, own = function["Properties"]["VpcConfig"]["SecurityGroupIds"]
    own_group = delivery_template["Resources"][own["Fn::GetAtt"][0]]["Properties"]
    egress = {
        (rule["CidrIp"], rule["IpProtocol"], rule["FromPort"], rule["ToPort"])
        for rule in own_group["SecurityGroupEgress"]
    }

    assert local_id(shared, data_template).startswith("DatabaseClients")
    assert egress == {("0.0.0.0/0", "tcp", 443, 443), ("0.0.0.0/0", "tcp", 1024, 65535)}
    assert "SecurityGroupIngress" not in own_group
    assert not [
        rule
        for rule in resources(delivery_template, "AWS::EC2::SecurityGroupIngress").values()
        if references(rule["Properties"]["GroupId"], own["Fn::GetAtt"][0])
    ]


def test_attempt_lambda_outlasts_the_senders_own_cap(
    delivery_template: Template, config: StageConfig
) -> None:
    _, function = function_by_handler(delivery_template, ATTEMPT)
    properties = function["Properties"]

    assert properties["Timeout"] == config.webhook_attempt_timeout_seconds == 30
    assert properties["Timeout"] > config.webhooks.webhook_total_timeout_seconds
    assert properties["Architectures"] == ["arm64"]
    assert properties["TracingConfig"] == {"Mode": "Active"}


def test_attempt_lambda_reads_the_database_secret_and_nothing_else(delivery_template: Template) -> None:
    statements = _statements_of(delivery_template, _function_role(delivery_template, ATTEMPT))

    assert {action for statement in statements for action in as_list(statement["Action"])} == {
        "secretsmanager:DescribeSecret",
        "secretsmanager:GetSecretValue",
        "xray:PutTelemetryRecords",
        "xray:PutTraceSegments",
    }


def test_only_the_relay_the_scheduler_and_the_api_may_start_executions_and_only_of_the_dispatcher(
    delivery_template: Template,
    data_template: Template,
    pipeline_template: Template,
    api_template: Template,
    worker_template: Template,
) -> None:
    dispatcher_id, _ = _dispatcher(delivery_template)
    templates = {
        "data": data_template,
        "delivery": delivery_template,
        "pipeline": pipeline_template,
        "api": api_template,
        "worker": worker_template,
    }
    granted = [
        (name, role["Ref"], statement)
        for name, template in templates.items()
        for policy_id, statement in policy_statements(template)
        if any(action.startswith("states:") for action in as_list(statement["Action"]))
        for role in template["Resources"][policy_id]["Properties"]["Roles"]
    ]

    assert {(name, role) for name, role, _ in granted} == {
        ("pipeline", _function_role(pipeline_template, RELAY)),
        ("pipeline", _function_role(pipeline_template, SCHEDULER)),
        ("api", _function_role(api_template, API)),
    }
    for _, _, statement in granted:
        assert statement["Action"] == "states:StartExecution"
        assert local_id(statement["Resource"], delivery_template) == dispatcher_id


def test_the_relay_and_the_api_reach_step_functions_through_an_endpoint(
    delivery_template: Template, data_template: Template
) -> None:
    """Both run in the isolated subnets, whose only way to AWS is an interface endpoint."""
    endpoints = [
        endpoint["Properties"]
        for endpoint in resources(delivery_template, "AWS::EC2::VPCEndpoint").values()
        if json.dumps(endpoint["Properties"]["ServiceName"]).endswith('.states"]]}')
    ]
    (endpoint,) = endpoints
    groups = subnet_groups(data_template)
    (group,) = [g["Fn::GetAtt"][0] for g in endpoint["SecurityGroupIds"]]
    sources = [
        local_id(rule["Properties"]["SourceSecurityGroupId"], data_template)
        for rule in resources(delivery_template, "AWS::EC2::SecurityGroupIngress").values()
        if references(rule["Properties"]["GroupId"], group)
    ]

    assert endpoint["VpcEndpointType"] == "Interface"
    assert endpoint["PrivateDnsEnabled"] is True
    assert {groups[local_id(subnet, data_template)] for subnet in endpoint["SubnetIds"]} == {"isolated"}
    assert [source.startswith("DatabaseClients") for source in sources] == [True]


def test_outputs_name_the_dispatcher_and_the_attempt_lambda(delivery_template: Template) -> None:
    assert {"DispatcherArn", "AttemptFunctionName"} <= set(delivery_template["Outputs"])
