"""Where an entrypoint runs and which interface endpoints a stage needs, both read from what the code calls
(tollgate.core.reach).

A Lambda goes in the isolated subnets when everything it calls is reachable there, and behind NAT otherwise;
a stage with interface endpoints gets one for every called service that has one, so calls from the NAT
subnets stay off the NAT gateway too (private DNS answers them VPC-wide).
"""

from __future__ import annotations

from aws_cdk import aws_ec2 as ec2

from stacks.config import StageConfig
from tollgate.core.reach import ENTRYPOINTS, reach_of

# boto3 service -> the interface endpoint that serves its API, with the id DataStack has always given it (a
# new id would replace a deployed endpoint).
INTERFACE_ENDPOINTS: dict[str, tuple[str, ec2.InterfaceVpcEndpointAwsService]] = {
    "secretsmanager": ("SecretsManager", ec2.InterfaceVpcEndpointAwsService.SECRETS_MANAGER),
    "sqs": ("Sqs", ec2.InterfaceVpcEndpointAwsService.SQS),
    "lambda": ("Lambda", ec2.InterfaceVpcEndpointAwsService.LAMBDA_),
    "events": ("Events", ec2.InterfaceVpcEndpointAwsService.EVENTBRIDGE),
    "stepfunctions": ("StepFunctionsEndpoint", ec2.InterfaceVpcEndpointAwsService.STEP_FUNCTIONS),
}
# Gateway endpoints (free) and the subnets DataStack routes them from: DynamoDB only from the egress subnets.
GATEWAY_ENDPOINTS: dict[str, frozenset[ec2.SubnetType]] = {
    "s3": frozenset({ec2.SubnetType.PRIVATE_ISOLATED, ec2.SubnetType.PRIVATE_WITH_EGRESS}),
    "dynamodb": frozenset({ec2.SubnetType.PRIVATE_WITH_EGRESS}),
}
# No VPC endpoint serves these: API Gateway's management API, and a WebSocket stage's @connections (a private
# execute-api endpoint serves private REST APIs only). Only NAT reaches them.
WITHOUT_ENDPOINT = frozenset({"apigateway", "apigatewaymanagementapi"})
# boto3 service -> the name in its endpoint's service (com.amazonaws.<region>.<name>) where they differ; None
# for a service without one.
ENDPOINT_SERVICE: dict[str, str | None] = {
    "stepfunctions": "states",
    **dict.fromkeys(WITHOUT_ENDPOINT),
}


def _known(service: str) -> None:
    if service not in INTERFACE_ENDPOINTS.keys() | GATEWAY_ENDPOINTS.keys() | WITHOUT_ENDPOINT:
        raise ValueError(
            f"stacks.reach does not know whether {service!r} has a VPC endpoint: add it to "
            "INTERFACE_ENDPOINTS, GATEWAY_ENDPOINTS or WITHOUT_ENDPOINT"
        )


def reachable_from_isolated(service: str) -> bool:
    _known(service)
    if service in GATEWAY_ENDPOINTS:
        return ec2.SubnetType.PRIVATE_ISOLATED in GATEWAY_ENDPOINTS[service]
    return service in INTERFACE_ENDPOINTS


def subnet_type(entrypoint: str, config: StageConfig) -> ec2.SubnetType:
    """Isolated when the stage has interface endpoints and each service the entrypoint calls has one there;
    behind NAT when it calls anything outside AWS, or a service without an endpoint, or the stage has none."""
    reach = reach_of(entrypoint)
    if (
        config.interface_endpoints
        and not reach.internet
        and all(reachable_from_isolated(service) for service in reach.services)
    ):
        return ec2.SubnetType.PRIVATE_ISOLATED
    return ec2.SubnetType.PRIVATE_WITH_EGRESS


def interface_services(config: StageConfig) -> frozenset[str]:
    """The boto3 services a stage needs interface endpoints for: every one any entrypoint calls that has one,
    or none in a stage without interface endpoints (every Lambda is then behind NAT)."""
    if not config.interface_endpoints:
        return frozenset()
    called = {service for reach in ENTRYPOINTS.values() for service in reach.services}
    for service in called:
        _known(service)
    return frozenset(called & INTERFACE_ENDPOINTS.keys())
