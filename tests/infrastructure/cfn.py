"""Small readers for synthesized CloudFormation templates, shared by the infrastructure tests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from tollgate_dev.costs import references

__all__ = ["references"]

Template = dict[str, Any]


def resources(template: Template, resource_type: str) -> dict[str, dict[str, Any]]:
    """Logical id -> resource, for every resource of one type."""
    return {
        logical_id: resource
        for logical_id, resource in template["Resources"].items()
        if resource["Type"] == resource_type
    }


def only(template: Template, resource_type: str, **properties: Any) -> tuple[str, dict[str, Any]]:
    """The single resource of a type whose properties include ``properties``."""
    matches = [
        (logical_id, resource)
        for logical_id, resource in resources(template, resource_type).items()
        if all(resource.get("Properties", {}).get(key) == value for key, value in properties.items())
    ]
    assert len(matches) == 1, f"expected one {resource_type} with {properties}, found {len(matches)}"
    return matches[0]


def function_by_handler(template: Template, handler: str) -> tuple[str, dict[str, Any]]:
    return only(template, "AWS::Lambda::Function", Handler=handler)


def policy_statements(template: Template) -> Iterator[tuple[str, dict[str, Any]]]:
    """(owner logical id, statement) for every identity-based statement: policies and inline role policies."""
    for logical_id, policy in resources(template, "AWS::IAM::Policy").items():
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            yield logical_id, statement
    for logical_id, role in resources(template, "AWS::IAM::Role").items():
        for policy in role["Properties"].get("Policies", []):
            for statement in policy["PolicyDocument"]["Statement"]:
                yield logical_id, statement


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def render(value: Any) -> str:
    """A readable string for a value made of Fn::Join, Ref and Fn::ImportValue, e.g.
    ``arn:${AWS::Partition}:s3:::${Import:Stack:Name}``."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and "Ref" in value:
        return "${" + value["Ref"] + "}"
    if isinstance(value, dict) and isinstance(value.get("Fn::ImportValue"), str):
        return "${Import:" + value["Fn::ImportValue"] + "}"
    if isinstance(value, dict) and "Fn::Join" in value:
        separator, parts = value["Fn::Join"]
        return str(separator).join(render(part) for part in parts)
    raise ValueError(f"cannot render {value!r}")


def local_id(value: Any, producer: Template) -> str:
    """The logical id in ``producer`` that ``value`` names: a ``Ref`` or ``Fn::GetAtt`` within the producer's
    own template, or a cross-stack reference (``Fn::GetStackOutput``, CDK's weak references) to one of its
    outputs."""
    if isinstance(value, dict) and "Fn::GetStackOutput" in value:
        value = producer["Outputs"][value["Fn::GetStackOutput"]["OutputName"]]["Value"]
    if isinstance(value, dict) and isinstance(value.get("Ref"), str):
        return str(value["Ref"])
    if isinstance(value, dict) and isinstance(value.get("Fn::GetAtt"), list):
        return str(value["Fn::GetAtt"][0])
    raise ValueError(f"not a reference to a resource of the producer: {value!r}")


def export_of(producer: Template, logical_id: str) -> str:
    """The name of the producer's export whose value is the resource ``logical_id`` (its Ref or an attribute)."""
    (name,) = [
        output["Export"]["Name"]
        for output in producer.get("Outputs", {}).values()
        if "Export" in output and local_id(output["Value"], producer) == logical_id
    ]
    return str(name)


def imports(consumer: Template) -> set[str]:
    """The export names a template imports anywhere (``Fn::ImportValue``)."""
    found: set[str] = set()

    def visit(value: Any) -> None:
        if isinstance(value, dict):
            if isinstance(value.get("Fn::ImportValue"), str):
                found.add(value["Fn::ImportValue"])
            for item in value.values():
                visit(item)
        elif isinstance(value, list):
            for item in value:
                visit(item)

    visit(consumer)
    return found


def subnet_groups(template: Template) -> dict[str, str]:
    """Subnet logical id -> the name of its CDK subnet group (``isolated``, ``egress``, ``public``)."""
    return {
        logical_id: next(
            tag["Value"] for tag in subnet["Properties"]["Tags"] if tag["Key"] == "aws-cdk:subnet-name"
        )
        for logical_id, subnet in resources(template, "AWS::EC2::Subnet").items()
    }


def route_table_of(template: Template, subnet_id: str) -> str:
    """The logical id of the route table associated with a subnet."""
    (route_table,) = [
        str(association["Properties"]["RouteTableId"]["Ref"])
        for association in resources(template, "AWS::EC2::SubnetRouteTableAssociation").values()
        if association["Properties"]["SubnetId"] == {"Ref": subnet_id}
    ]
    return route_table


def routes_of_subnet(template: Template, subnet_id: str) -> list[dict[str, Any]]:
    """The properties of every route in the route table associated with a subnet."""
    route_table = route_table_of(template, subnet_id)
    return [
        route["Properties"]
        for route in resources(template, "AWS::EC2::Route").values()
        if route["Properties"]["RouteTableId"] == {"Ref": route_table}
    ]


def type_queues(pipeline: Template, stage: str = "dev") -> dict[str, tuple[str, str]]:
    """Job type -> (queue, dead-letter queue) logical ids, found by the names the stack gives them
    (``tollgate-<stage>-<queue>.fifo`` and ``...-dlq.fifo``)."""
    from tollgate.jobtypes.registry import JOB_TYPES

    by_name = {
        queue["Properties"].get("QueueName"): logical_id
        for logical_id, queue in resources(pipeline, "AWS::SQS::Queue").items()
    }
    return {
        name: (
            by_name[f"tollgate-{stage}-{job_type.queue}.fifo"],
            by_name[f"tollgate-{stage}-{job_type.queue}-dlq.fifo"],
        )
        for name, job_type in JOB_TYPES.items()
    }


def with_stand_ins(value: Any, stand_in: str = "resolved-at-deploy") -> str:
    """A value as the process would read it, with every reference resolved at deploy replaced by
    ``stand_in``: a JSON map joined from queue URLs stays valid JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and "Fn::Join" in value:
        separator, parts = value["Fn::Join"]
        return str(separator).join(with_stand_ins(part, stand_in) for part in parts)
    return stand_in
