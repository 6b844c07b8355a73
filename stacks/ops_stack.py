"""OpsStack: owns the operations function, the only way into a deployed stage's data for people.

The database sits in isolated subnets with no bastion, no SSM endpoint and no ECS Exec. The support and
admin commands (``tollgate --stage <stage> tenants|jobs|dlq|deliveries|reviews|usage``) therefore run in a
Lambda inside the VPC, reached through a function URL whose auth type is AWS_IAM: Lambda checks each
request's SigV4 signature and the caller's ``lambda:InvokeFunctionUrl`` permission before the function
runs, and hands the function the caller's verified ARN, which is what the audit trail records. A plain
``lambda:Invoke`` would not tell the function who called.

It runs behind NAT (the egress subnets) in every stage shape, as stacks.reach derives from what it calls:
tenant creation puts the tenant's key on the API's usage plan through API Gateway's management API, which no
interface endpoint serves. The database, SQS, Secrets Manager and Step Functions it reaches as every other
Lambda does (through the database clients' group and, where the stage has them, the interface endpoints).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_secretsmanager as secretsmanager
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from stacks.api_stack import grant_usage_keys
from stacks.config import StageConfig
from stacks.constructs.documents_access import DocumentsReadAccess, ExportedDocumentsBucket
from stacks.constructs.entrypoint_function import EntrypointFunction
from stacks.constructs.job_queue import JobQueue
from stacks.constructs.lambda_packaging import DependenciesLayer, function_code, lambda_database_environment

# Longer than a paced redrive of the CLI's default 100 letters at 5 a second; the CLI waits as long.
OPS_TIMEOUT = cdk.Duration.minutes(5)


class OpsStack(cdk.Stack):
    """Exposes ``function`` and ``url``: operators need ``lambda:InvokeFunctionUrl`` on the function, and
    ``cloudformation:DescribeStacks`` on this stack to find the URL from the stage's name."""

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
        job_queues: Mapping[str, JobQueue],
        webhook_state_machine: sfn.IStateMachine,
        documents_bucket: ExportedDocumentsBucket,
        usage_plan: apigw.IUsagePlan,
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, construct_id, env=config.environment, **kwargs)
        self.config = config
        self.handler = EntrypointFunction(
            self,
            "Ops",
            config=config,
            entrypoint="ops",
            description="Tollgate operations: tenants, keys, jobs, dead letters, deliveries, reviews and "
            "usage for IAM-authenticated operators (function URL)",
            code=function_code(),
            layer=DependenciesLayer(self, "Dependencies", layer_dir=config.layer_dir).layer,
            vpc=vpc,
            # The database clients' group reaches the database and every interface endpoint (SQS, Secrets
            # Manager, Step Functions, logs, X-Ray), and HTTPS through NAT.
            security_groups=[database_clients],
            environment={
                # Work across tenants: OpsSettings' role default is tollgate_system.
                # One command at a time per instance.
                **lambda_database_environment(config, database_secret.secret_arn, database_endpoint),
                "JOB_QUEUE_URLS": self.to_json_string(
                    {name: pair.queue.queue_url for name, pair in job_queues.items()}
                ),
                "JOB_DLQ_URLS": self.to_json_string(
                    {name: pair.dead_letters.queue_url for name, pair in job_queues.items()}
                ),
                "WEBHOOK_STATE_MACHINE_ARN": webhook_state_machine.state_machine_arn,
                # `reviews show|decide` read a document too large for its row from here.
                "DOCUMENTS_BUCKET": documents_bucket.bucket_name,
                # `tenants create` puts each new tenant's API Gateway key on this plan.
                "USAGE_PLAN_ID": usage_plan.usage_plan_id,
            },
            timeout=OPS_TIMEOUT,
        )
        self.function = self.handler.function

        database_secret.grant_read(self.function)
        for pair in job_queues.values():
            # A redrive sends the letter back to its job type's queue; move-all reads both queues' ARNs.
            pair.queue.grant_send_messages(self.function)
            # Listing, showing and redriving receive, release (change visibility) and delete dead letters.
            pair.dead_letters.grant_consume_messages(self.function)
            # `dlq move-all` hands the DLQ to SQS's own move task.
            pair.dead_letters.grant(self.function, "sqs:StartMessageMoveTask")
        # `deliveries replay` starts the dispatcher under the delivery's webhook-id.
        webhook_state_machine.grant_start_execution(self.function)
        role = self.function.role
        assert role is not None
        DocumentsReadAccess(self, "Documents", documents_bucket=documents_bucket, role=role)
        # Find and make tenants' API Gateway keys, and add them to this stage's plan only.
        grant_usage_keys(self.function, usage_plan)

        # Lambda verifies the SigV4 signature and lambda:InvokeFunctionUrl before the function runs.
        self.url = self.function.add_function_url(auth_type=lambda_.FunctionUrlAuthType.AWS_IAM)

        # `tollgate --stage <stage>` reads this output to find the function.
        cdk.CfnOutput(self, "OpsFunctionUrl", value=self.url.url)
        # What an operator's policy grants lambda:InvokeFunctionUrl on.
        cdk.CfnOutput(self, "OpsFunctionArn", value=self.function.function_arn)
