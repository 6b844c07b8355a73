"""OpsStack's template: the operations function in the VPC (behind NAT, for API Gateway's management API),
behind a function URL that only IAM-signed requests reach, with exactly the permissions its commands use,
each on a named resource."""

from __future__ import annotations

from typing import Any

import pytest

from tests.infrastructure.cfn import as_list, function_by_handler, policy_statements, references, resources
from tollgate.jobtypes.registry import JOB_TYPES

pytestmark = pytest.mark.infrastructure

Template = dict[str, Any]
OPS = "functions.ops.handler.lambda_handler"
# What its commands need, and nothing else (X-Ray's two actions come with every traced function).
EXPECTED_ACTIONS = {
    "secretsmanager:GetSecretValue",
    "secretsmanager:DescribeSecret",
    "sqs:SendMessage",
    "sqs:GetQueueAttributes",
    "sqs:GetQueueUrl",
    "sqs:ReceiveMessage",
    "sqs:ChangeMessageVisibility",
    "sqs:DeleteMessage",
    "sqs:StartMessageMoveTask",
    "states:StartExecution",
    # Tenants' API Gateway keys on the stage's usage plan (GET, POST /apikeys; POST on the plan's /keys).
    "apigateway:GET",
    "apigateway:POST",
    "xray:PutTraceSegments",
    "xray:PutTelemetryRecords",
}


def _ops_statements(template: Template) -> list[dict[str, Any]]:
    _, function = function_by_handler(template, OPS)
    role = function["Properties"]["Role"]["Fn::GetAtt"][0]
    owners = {
        logical_id
        for logical_id, policy in resources(template, "AWS::IAM::Policy").items()
        if any(references(r, role) for r in policy["Properties"]["Roles"])
    }
    return [statement for owner, statement in policy_statements(template) if owner in owners | {role}]


def test_the_function_runs_in_the_vpc_behind_nat_with_the_database_clients_group(
    ops_template: Template,
) -> None:
    _, function = function_by_handler(ops_template, OPS)
    vpc = function["Properties"]["VpcConfig"]

    assert vpc["SubnetIds"], "the ops function must run in the VPC to reach the database"
    assert all("egresssubnet" in str(subnet).lower() for subnet in vpc["SubnetIds"])
    (group,) = vpc["SecurityGroupIds"]
    assert "DatabaseClients" in str(group)


def test_the_function_url_admits_only_iam_signed_requests(ops_template: Template) -> None:
    function_id, _ = function_by_handler(ops_template, OPS)
    (url,) = resources(ops_template, "AWS::Lambda::Url").values()

    assert url["Properties"]["AuthType"] == "AWS_IAM"
    assert references(url["Properties"]["TargetFunctionArn"], function_id)
    # An open URL needs a resource policy letting "*" invoke it; there must be none.
    for permission in resources(ops_template, "AWS::Lambda::Permission").values():
        assert permission["Properties"].get("Principal") != "*"
        assert permission["Properties"].get("FunctionUrlAuthType") != "NONE"


def test_the_url_and_the_function_arn_are_outputs_for_the_cli_and_operators_policies(
    ops_template: Template,
) -> None:
    outputs = ops_template["Outputs"]
    (url,) = resources(ops_template, "AWS::Lambda::Url")
    function_id, _ = function_by_handler(ops_template, OPS)

    assert outputs["OpsFunctionUrl"]["Value"] == {"Fn::GetAtt": [url, "FunctionUrl"]}
    assert references(outputs["OpsFunctionArn"]["Value"], function_id)


def test_the_role_holds_exactly_the_commands_actions(ops_template: Template) -> None:
    actions = {
        action
        for statement in _ops_statements(ops_template)
        if statement["Effect"] == "Allow"
        for action in as_list(statement["Action"])
        if not action.startswith(("s3:", "kms:"))
    }

    assert actions == EXPECTED_ACTIONS


def test_no_action_is_a_wildcard_and_only_xray_is_on_every_resource(ops_template: Template) -> None:
    for statement in _ops_statements(ops_template):
        actions = as_list(statement["Action"])
        assert not any(action == "*" or action.endswith(":*") for action in actions), actions
        if "*" in as_list(statement["Resource"]):
            assert set(actions) <= {"xray:PutTraceSegments", "xray:PutTelemetryRecords"}, actions


def test_usage_keys_are_added_to_the_stages_own_plan_only(ops_template: Template) -> None:
    statements = [s for s in _ops_statements(ops_template) if "apigateway:POST" in as_list(s["Action"])]
    resources_granted = [str(r) for s in statements for r in as_list(s["Resource"])]

    assert len(resources_granted) == 2
    assert any("/apikeys" in r for r in resources_granted)
    assert any("/usageplans/" in r and "/keys" in r for r in resources_granted)


def test_move_tasks_are_granted_on_the_dead_letter_queues_only(ops_template: Template) -> None:
    def granted(action: str) -> list[Any]:
        return [
            resource
            for statement in _ops_statements(ops_template)
            if action in as_list(statement["Action"])
            for resource in as_list(statement["Resource"])
        ]

    moves, sends = granted("sqs:StartMessageMoveTask"), granted("sqs:SendMessage")

    assert len(moves) == len(JOB_TYPES)
    assert all("DeadLetters" in str(resource) for resource in moves)
    assert len(sends) == len(JOB_TYPES)
    assert not any("DeadLetters" in str(resource) for resource in sends), "redrive sends to the job queue"
