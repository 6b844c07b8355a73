"""DeliveryStack: webhook delivery, from a started execution to a signed POST at the tenant's endpoint.

It owns the dispatcher (Step Functions Standard, one execution per delivery, defined by the same
``tollgate/delivery/dispatcher.asl.json`` the local stack runs), the attempt Lambda each step invokes, the
Step Functions endpoint the relay and the API start executions through. The alarms on deliveries that gave
up and on endpoints that keep failing watch these from ObservabilityStack.
"""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_logs as logs
from aws_cdk import aws_secretsmanager as secretsmanager
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from stacks.config import StageConfig, settings_environment
from stacks.constructs.entrypoint_function import EntrypointFunction
from stacks.constructs.lambda_packaging import DependenciesLayer, function_code, lambda_database_environment
from stacks.constructs.nag import acknowledge
from stacks.reach import interface_services
from tollgate.delivery import DISPATCHER_DEFINITION
from tollgate.delivery.ssrf import FIRST_UNPRIVILEGED_PORT, HTTPS_PORT

# The one placeholder in that file; the local stack substitutes the same name with moto's function ARN.
ATTEMPT_FUNCTION_PLACEHOLDER = "WebhookAttemptFunctionArn"

ISOLATED = ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_ISOLATED)


class DeliveryStack(cdk.Stack):
    """Exposes ``state_machine`` (the relay starts one execution per delivery, the API starts replays) and
    ``attempt`` (ObservabilityStack reads its log group for endpoint alerts)."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: StageConfig,
        vpc: ec2.IVpc,
        database_endpoint: str,
        database_secret: secretsmanager.ISecret,
        database_clients: ec2.ISecurityGroup,
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, construct_id, env=config.environment, **kwargs)
        self.config = config

        self.attempt = self._attempt_function(
            config, vpc, database_endpoint, database_secret, database_clients
        )
        self.state_machine = self._dispatcher(config)
        # Without interface endpoints (stage config) the relay and the API reach Step Functions through NAT.
        self.start_endpoint = (
            self._start_endpoint(vpc, database_clients)
            if "stepfunctions" in interface_services(config)
            else None
        )

        cdk.CfnOutput(self, "DispatcherArn", value=self.state_machine.state_machine_arn)
        cdk.CfnOutput(self, "AttemptFunctionName", value=self.attempt.function.function_name)

    def _attempt_function(
        self,
        config: StageConfig,
        vpc: ec2.IVpc,
        database_endpoint: str,
        database_secret: secretsmanager.ISecret,
        database_clients: ec2.ISecurityGroup,
    ) -> EntrypointFunction:
        # The database clients' group admits it to RDS Proxy and the VPC endpoints; this one lets out exactly
        # the ports the sender may call (tollgate.delivery.ssrf): 443 and the unprivileged ones. Which
        # addresses may be called is decided per request by the sender's SSRF check, since a security group
        # cannot tell public addresses from private ones.
        self.receivers = ec2.SecurityGroup(
            self,
            "WebhookReceivers",
            vpc=vpc,
            description="Tollgate webhook attempts: tenant receivers through NAT",
            allow_all_outbound=False,
        )
        for port, what in (
            (ec2.Port.tcp(HTTPS_PORT), "HTTPS"),
            (ec2.Port.tcp_range(FIRST_UNPRIVILEGED_PORT, 65535), "unprivileged ports"),
        ):
            self.receivers.add_egress_rule(ec2.Peer.any_ipv4(), port, f"Tenant webhook receivers: {what}")
        attempt = EntrypointFunction(
            self,
            "WebhookAttempt",
            config=config,
            entrypoint="webhook_attempt",
            description="Tollgate webhook attempt: signs, sends and records one delivery attempt",
            code=function_code(),
            layer=DependenciesLayer(self, "Dependencies", layer_dir=config.layer_dir).layer,
            vpc=vpc,
            security_groups=[database_clients, self.receivers],
            environment={
                # One attempt per execution environment.
                **lambda_database_environment(config, database_secret.secret_arn, database_endpoint),
                **settings_environment(config.webhooks),
            },
            # Above the sender's own total cap plus the database work around it, so a slow receiver ends
            # as a recorded failed attempt, never as a killed invocation that records nothing.
            timeout=cdk.Duration.seconds(config.webhook_attempt_timeout_seconds),
        )
        database_secret.grant_read(attempt.function)
        return attempt

    def _dispatcher(self, config: StageConfig) -> sfn.StateMachine:
        # Vended-log prefix: Step Functions then needs one account-wide log resource policy for every log
        # group under it, instead of growing that size-limited policy by one entry per state machine.
        self.dispatcher_logs = logs.LogGroup(
            self,
            "DispatcherLogs",
            log_group_name=f"/aws/vendedlogs/states/tollgate-{config.stage}-webhook-dispatcher",
            retention=config.log_retention_days,
            removal_policy=config.cdk_removal_policy,
        )
        state_machine = sfn.StateMachine(
            self,
            "Dispatcher",
            state_machine_type=sfn.StateMachineType.STANDARD,
            definition_body=sfn.DefinitionBody.from_file(str(DISPATCHER_DEFINITION)),
            definition_substitutions={ATTEMPT_FUNCTION_PLACEHOLDER: self.attempt.function.function_arn},
            logs=sfn.LogOptions(
                destination=self.dispatcher_logs,
                level=sfn.LogLevel.ALL,
                # Inputs and outputs hold a delivery id and the attempt's outcome, never a payload; off all
                # the same, so a later change to the definition cannot start logging tenants' data.
                include_execution_data=False,
            ),
            tracing_enabled=True,
        )
        # The definition invokes the unqualified ARN, so no version or alias (no ":*" wildcard) is granted.
        self.attempt.function.grant_invoke_latest_version(state_machine)
        acknowledge(
            state_machine.role,
            "AwsSolutions-IAM5[Resource::*]",
            "Only CloudWatch Logs delivery (logs:CreateLogDelivery and the other *LogDelivery actions, "
            "logs:PutResourcePolicy, logs:DescribeResourcePolicies, logs:DescribeLogGroups) and X-Ray "
            "tracing are granted on '*': neither supports resource-level permissions. An infrastructure "
            "test fails if any other action appears with Resource '*'.",
        )
        return state_machine

    def _start_endpoint(
        self, vpc: ec2.IVpc, database_clients: ec2.ISecurityGroup
    ) -> ec2.InterfaceVpcEndpoint:
        """Step Functions' API inside the VPC: the relay and the API Lambda start executions from the isolated
        subnets, which have no other route to AWS. Here rather than in DataStack because only delivery needs
        it, and it goes away with the dispatcher."""
        endpoint = ec2.InterfaceVpcEndpoint(
            self,
            "StepFunctionsEndpoint",
            vpc=vpc,
            service=ec2.InterfaceVpcEndpointAwsService.STEP_FUNCTIONS,
            subnets=ISOLATED,
            private_dns_enabled=True,
            open=False,
        )
        endpoint.connections.allow_default_port_from(database_clients)
        return endpoint
