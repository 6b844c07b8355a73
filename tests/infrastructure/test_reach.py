"""Every stage can do what its code calls: each entrypoint's declared AWS services are reachable from its subnets
(an interface endpoint that admits its security group, a gateway endpoint on its route table, or a NAT route),
and each declared IAM action is in its role's policies. Read from the synthesized dev, staging and prod
templates as cdk.json configures them; the declaration itself is held to the code by tollgate.core.reach's
guard (tests/unit/test_reach_guard.py and every test that runs the local system)."""

from __future__ import annotations

import copy
import fnmatch
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from stacks.reach import ENDPOINT_SERVICE
from tests.infrastructure.cfn import as_list, resources, route_table_of, routes_of_subnet
from tests.infrastructure.synth import StageSynth
from tollgate.core.reach import ENTRYPOINTS

pytestmark = pytest.mark.infrastructure

Template = dict[str, Any]
STAGES = ("dev", "staging", "prod")
# (stack concern, logical id): a resource anywhere in the stage.
Resource = tuple[str, str]
LAMBDA_HANDLER_PREFIX = "functions."


@dataclass(frozen=True)
class Compute:
    """One running copy of an entrypoint: a Lambda function or a worker tier's ECS service."""

    entrypoint: str
    where: Resource
    subnets: tuple[Resource, ...]
    security_groups: tuple[Resource, ...]
    role: Resource


def resolve(value: Any, concern: str, templates: dict[str, Template]) -> Resource:
    """A Ref or Fn::GetAtt in ``concern``'s template, or a weak cross-stack reference (Fn::GetStackOutput) to
    another stack's output, as the resource it names."""
    if isinstance(value, dict) and "Fn::GetStackOutput" in value:
        reference = value["Fn::GetStackOutput"]
        producer = reference["StackName"].rsplit("-", 1)[1]
        return resolve(templates[producer]["Outputs"][reference["OutputName"]]["Value"], producer, templates)
    if isinstance(value, dict) and isinstance(value.get("Ref"), str):
        return concern, value["Ref"]
    if isinstance(value, dict) and isinstance(value.get("Fn::GetAtt"), list):
        return concern, value["Fn::GetAtt"][0]
    raise ValueError(f"not a reference to a resource: {value!r}")


def computes(templates: dict[str, Template]) -> Iterator[Compute]:
    for concern, template in templates.items():
        for logical_id, function in resources(template, "AWS::Lambda::Function").items():
            handler = function["Properties"].get("Handler", "")
            if not handler.startswith(LAMBDA_HANDLER_PREFIX):
                continue  # CDK's own (custom resource providers, bucket emptying) and AWS's rotation function
            vpc = function["Properties"]["VpcConfig"]
            yield Compute(
                entrypoint=handler.split(".")[1],
                where=(concern, logical_id),
                subnets=tuple(resolve(s, concern, templates) for s in vpc["SubnetIds"]),
                security_groups=tuple(resolve(g, concern, templates) for g in vpc["SecurityGroupIds"]),
                role=resolve(function["Properties"]["Role"], concern, templates),
            )
        tasks = resources(template, "AWS::ECS::TaskDefinition")
        for logical_id, service in resources(template, "AWS::ECS::Service").items():
            network = service["Properties"]["NetworkConfiguration"]["AwsvpcConfiguration"]
            task = tasks[resolve(service["Properties"]["TaskDefinition"], concern, templates)[1]]
            yield Compute(
                entrypoint="worker",
                where=(concern, logical_id),
                subnets=tuple(resolve(s, concern, templates) for s in network["Subnets"]),
                security_groups=tuple(resolve(g, concern, templates) for g in network["SecurityGroups"]),
                role=resolve(task["Properties"]["TaskRoleArn"], concern, templates),
            )


def endpoint_service(endpoint: dict[str, Any]) -> str:
    """``com.amazonaws.<region>.events`` -> ``events``."""
    parts = endpoint["Properties"]["ServiceName"]["Fn::Join"][1]
    return str(parts[-1]).removeprefix(".")


def admitted(group: Resource, templates: dict[str, Template]) -> set[Resource]:
    """The security groups that ``group`` admits on HTTPS."""
    found: set[Resource] = set()
    for concern, template in templates.items():
        for ingress in resources(template, "AWS::EC2::SecurityGroupIngress").values():
            rule = ingress["Properties"]
            low, high = rule.get("FromPort"), rule.get("ToPort")
            https = isinstance(low, int) and isinstance(high, int) and low <= 443 <= high
            if "SourceSecurityGroupId" not in rule or not https:
                continue
            if resolve(rule["GroupId"], concern, templates) == group:
                found.add(resolve(rule["SourceSecurityGroupId"], concern, templates))
    return found


def reachable(compute: Compute, service: str, templates: dict[str, Template]) -> bool:
    """Whether every subnet of ``compute`` reaches ``service`` ("internet" for anything outside AWS)."""
    data = templates["Data"]
    named = ENDPOINT_SERVICE.get(service, service) if service != "internet" else None
    interface_admits: set[Resource] = set()
    gateway_tables: set[str] = set()
    for concern, template in templates.items():
        for endpoint in resources(template, "AWS::EC2::VPCEndpoint").values():
            if named is None or endpoint_service(endpoint) != named:
                continue
            properties = endpoint["Properties"]
            if properties.get("VpcEndpointType") == "Gateway":
                gateway_tables |= {resolve(t, concern, templates)[1] for t in properties["RouteTableIds"]}
            elif properties.get("PrivateDnsEnabled"):
                for group in properties["SecurityGroupIds"]:
                    interface_admits |= admitted(resolve(group, concern, templates), templates)
    for concern, subnet in compute.subnets:
        assert concern == "Data", f"{compute.where} names a subnet outside the Data stack"
        nat = any("NatGatewayId" in route for route in routes_of_subnet(data, subnet))
        through_endpoint = bool(interface_admits & set(compute.security_groups)) or (
            route_table_of(data, subnet) in gateway_tables
        )
        if not (nat or through_endpoint):
            return False
    return True


def unreachable(templates: dict[str, Template]) -> set[tuple[str, str]]:
    """(entrypoint, service) for every declared call some copy of the entrypoint cannot reach."""
    found: set[tuple[str, str]] = set()
    for compute in computes(templates):
        reach = ENTRYPOINTS[compute.entrypoint]
        needs = set(reach.services) | ({"internet"} if reach.internet else set())
        found |= {
            (compute.entrypoint, service) for service in needs if not reachable(compute, service, templates)
        }
    return found


def granted_actions(role: Resource, templates: dict[str, Template]) -> set[str]:
    """Every action an Allow statement of a policy attached to ``role`` names (wildcards as written)."""
    actions: set[str] = set()
    for concern, template in templates.items():
        for policy in resources(template, "AWS::IAM::Policy").values():
            roles = {resolve(r, concern, templates) for r in policy["Properties"].get("Roles", [])}
            if role not in roles:
                continue
            for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
                if statement["Effect"] == "Allow":
                    actions |= set(as_list(statement["Action"]))
    owner, logical_id = role
    for policy in templates[owner]["Resources"][logical_id]["Properties"].get("Policies", []):
        for statement in policy["PolicyDocument"]["Statement"]:
            if statement["Effect"] == "Allow":
                actions |= set(as_list(statement["Action"]))
    return actions


def ungranted(templates: dict[str, Template]) -> set[tuple[str, str]]:
    """(entrypoint, action) for every declared action some copy of the entrypoint's role is not granted."""
    found: set[tuple[str, str]] = set()
    for compute in computes(templates):
        granted = granted_actions(compute.role, templates)
        for action in ENTRYPOINTS[compute.entrypoint].actions:
            if not any(fnmatch.fnmatchcase(action.lower(), pattern.lower()) for pattern in granted):
                found.add((compute.entrypoint, action))
    return found


@pytest.mark.parametrize("stage", STAGES)
def test_every_entrypoint_reaches_every_service_it_calls(
    stage_synth: Callable[[str], StageSynth], stage: str
) -> None:
    """A call to a service with no endpoint and no NAT route hangs until its connect timeout: the relay's
    PutEvents in a stage without an events endpoint ran into the Lambda's own timeout."""
    templates = stage_synth(stage).templates

    assert unreachable(templates) == set()


@pytest.mark.parametrize("stage", STAGES)
def test_every_entrypoint_is_declared_and_deployed(
    stage_synth: Callable[[str], StageSynth], stage: str
) -> None:
    templates = stage_synth(stage).templates

    assert {compute.entrypoint for compute in computes(templates)} == set(ENTRYPOINTS)


@pytest.mark.parametrize("stage", STAGES)
def test_every_declared_action_is_granted(stage_synth: Callable[[str], StageSynth], stage: str) -> None:
    templates = stage_synth(stage).templates

    assert ungranted(templates) == set()


def test_the_reachability_check_catches_a_missing_endpoint(stage_synth: Callable[[str], StageSynth]) -> None:
    """Given staging without its events endpoint, as it was before the declaration decided the endpoints."""
    templates = stage_synth("staging").templates
    planted = copy.deepcopy(templates)
    endpoints = resources(planted["Data"], "AWS::EC2::VPCEndpoint")
    (events,) = [logical_id for logical_id, e in endpoints.items() if endpoint_service(e) == "events"]
    del planted["Data"]["Resources"][events]

    assert unreachable(planted) == {("outbox_relay", "events")}


def test_the_reachability_check_catches_a_function_cut_off_from_nat(
    stage_synth: Callable[[str], StageSynth],
) -> None:
    """Given the webhook attempt Lambda moved into the isolated subnets, where tenants' endpoints are out of
    reach."""
    templates = stage_synth("prod").templates
    planted = copy.deepcopy(templates)
    (attempt,) = [c for c in computes(planted) if c.entrypoint == "webhook_attempt"]
    (relay,) = [c for c in computes(planted) if c.entrypoint == "outbox_relay"]
    relay_vpc = planted[relay.where[0]]["Resources"][relay.where[1]]["Properties"]["VpcConfig"]
    function = planted[attempt.where[0]]["Resources"][attempt.where[1]]
    function["Properties"]["VpcConfig"]["SubnetIds"] = relay_vpc["SubnetIds"]

    assert unreachable(planted) == {("webhook_attempt", "internet")}


def test_the_grants_check_catches_a_missing_grant(stage_synth: Callable[[str], StageSynth]) -> None:
    """Given the relay's role without events:PutEvents, as a refactor of the results bus's grant might leave
    it."""
    templates = stage_synth("prod").templates
    planted = copy.deepcopy(templates)
    (relay,) = [c for c in computes(planted) if c.entrypoint == "outbox_relay"]
    for policy in resources(planted[relay.role[0]], "AWS::IAM::Policy").values():
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            kept = [a for a in as_list(statement["Action"]) if a != "events:PutEvents"]
            statement["Action"] = kept or ["sqs:Nothing"]

    assert ungranted(planted) == {("outbox_relay", "events:PutEvents")}
