"""A Lambda for one ``functions/<name>/handler.py`` entrypoint, set up the way every Tollgate Lambda is.

ARM64, the pinned Python runtime, the shared code asset and dependency layer, the subnets that reach what it
calls (stacks.reach: isolated where interface endpoints serve every call, else behind NAT), X-Ray tracing,
and a log group with the stage's retention.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from stacks.config import StageConfig
from stacks.constructs.lambda_packaging import LAMBDA_ARCHITECTURE, LAMBDA_RUNTIME, lambda_handler
from stacks.constructs.nag import acknowledge
from stacks.reach import subnet_type

METRICS_NAMESPACE = "Tollgate"

# Read by Powertools itself, not by a Tollgate settings model; the infrastructure tests allow exactly these.
POWERTOOLS_VARIABLES = frozenset(
    {"POWERTOOLS_SERVICE_NAME", "POWERTOOLS_LOG_LEVEL", "POWERTOOLS_METRICS_NAMESPACE"}
)


def service_name(entrypoint: str) -> str:
    """The Powertools service of an entrypoint: its logs' ``service`` key and its metrics' one dimension."""
    return f"tollgate-{entrypoint.replace('_', '-')}"


class EntrypointFunction(Construct):
    """``function`` runs ``functions.<entrypoint>.handler.lambda_handler``; ``log_group`` holds its logs."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: StageConfig,
        entrypoint: str,
        description: str,
        code: lambda_.Code,
        layer: lambda_.ILayerVersion,
        vpc: ec2.IVpc,
        security_groups: Sequence[ec2.ISecurityGroup],
        environment: Mapping[str, str],
        timeout: cdk.Duration,
        memory_size: int = 512,
    ) -> None:
        super().__init__(scope, construct_id)
        clashes = POWERTOOLS_VARIABLES & environment.keys()
        if clashes:
            raise ValueError(f"{sorted(clashes)} are set by EntrypointFunction itself")

        # An explicit log group gets retention and a removal policy; Lambda's implicit one keeps logs forever.
        self.log_group = logs.LogGroup(
            self,
            "Logs",
            retention=config.log_retention_days,
            removal_policy=config.cdk_removal_policy,
        )
        self.function = lambda_.Function(
            self,
            "Function",
            description=description,
            runtime=LAMBDA_RUNTIME,
            architecture=LAMBDA_ARCHITECTURE,
            handler=lambda_handler(entrypoint),
            code=code,
            layers=[layer],
            vpc=vpc,
            # From what the entrypoint calls (tollgate.core.reach): isolated when endpoints serve all of it.
            vpc_subnets=ec2.SubnetSelection(subnet_type=subnet_type(entrypoint, config)),
            security_groups=list(security_groups),
            environment={
                "POWERTOOLS_SERVICE_NAME": service_name(entrypoint),
                "POWERTOOLS_LOG_LEVEL": config.log_level,
                "POWERTOOLS_METRICS_NAMESPACE": METRICS_NAMESPACE,
                **environment,
            },
            tracing=lambda_.Tracing.ACTIVE,
            timeout=timeout,
            memory_size=memory_size,
            log_group=self.log_group,
        )
        self._acknowledge_platform_findings()

    def _acknowledge_platform_findings(self) -> None:
        """Findings that come with every VPC Lambda on this runtime, not with what the function may do."""
        role = self.function.role
        assert role is not None, "a Function without an explicit role creates one"
        acknowledgements = {
            "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/"
            "AWSLambdaBasicExecutionRole]": (
                "AWS-maintained minimum for a Lambda: create log streams and put events. It adds no data "
                "access; everything else this function may do is granted inline through grant_* methods."
            ),
            "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/"
            "AWSLambdaVPCAccessExecutionRole]": (
                "AWS-maintained minimum for a Lambda in a VPC: manage its own network interfaces. The EC2 "
                "network-interface actions it holds do not support resource-level scoping."
            ),
            "AwsSolutions-IAM5[Resource::*]": (
                "Only X-Ray tracing (xray:PutTraceSegments, xray:PutTelemetryRecords) is granted on '*': "
                "X-Ray has no resource-level permissions. An infrastructure test fails if any other "
                "action appears with Resource '*'."
            ),
        }
        for rule, reason in acknowledgements.items():
            acknowledge(role, rule, reason)
        acknowledge(
            self.function,
            "AwsSolutions-L1",
            f"Pinned to {LAMBDA_RUNTIME.name} on purpose: the dependency layer holds compiled wheels "
            "(pydantic-core, psycopg-binary) resolved for exactly this CPython version by layers/build.py, "
            "so the runtime only moves together with that build and a test run.",
        )
