"""Applies ``migrations/*.sql`` during deployment through a custom resource backed by functions/migrate.

The resource carries a digest of the SQL files, so CloudFormation calls the migrate Lambda again exactly
when a migration is added (or, against the rules, edited); other deployments leave the schema alone.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_rds as rds
from aws_cdk import custom_resources as cr
from constructs import Construct

from stacks.config import REPO_ROOT, StageConfig
from stacks.constructs.entrypoint_function import EntrypointFunction
from stacks.constructs.nag import acknowledge

MIGRATIONS_DIR = REPO_ROOT / "migrations"
RESOURCE_TYPE = "Custom::TollgateMigrations"


def migrations_digest(folder: Path = MIGRATIONS_DIR) -> str:
    """SHA-256 over the names and bytes of ``folder/*.sql`` in name order."""
    digest = hashlib.sha256()
    for path in sorted(folder.glob("*.sql")):
        # Names are hashed too: a renamed file is a different migration to the runner.
        digest.update(path.name.encode())
        digest.update(b"\0")
        digest.update(path.read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()


class DatabaseMigrations(Construct):
    """The migrate Lambda, its provider framework, and the custom resource that triggers it."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: StageConfig,
        code: lambda_.Code,
        layer: lambda_.ILayerVersion,
        vpc: ec2.IVpc,
        security_groups: Sequence[ec2.ISecurityGroup],
        cluster: rds.DatabaseCluster,
        migrations_dir: Path = MIGRATIONS_DIR,
    ) -> None:
        super().__init__(scope, construct_id)
        secret = cluster.secret
        if secret is None:
            raise ValueError("the cluster needs a generated secret for migrations to log in with")

        self.handler = EntrypointFunction(
            self,
            "Handler",
            config=config,
            entrypoint="migrate",
            description="Applies Tollgate's numbered SQL migrations",
            code=code,
            layer=layer,
            vpc=vpc,
            security_groups=security_groups,
            environment={
                "DATABASE_SECRET_ARN": secret.secret_arn,
                # DDL goes to the writer directly: RDS Proxy pins sessions that change settings and
                # adds nothing to a single run.
                "DATABASE_HOST": cluster.cluster_endpoint.hostname,
                "DATABASE_POOL_SIZE": "1",
                # A deployment may find a paused cluster.
                **config.database_wait_environment(),
            },
            # Below the provider framework's own 15-minute Lambda limit, so a slow migration fails
            # with its own error rather than a framework timeout.
            timeout=cdk.Duration.minutes(10),
        )
        secret.grant_read(self.handler.function)

        provider = cr.Provider(
            self,
            "Provider",
            on_event_handler=self.handler.function,
            log_group=logs.LogGroup(
                self,
                "ProviderLogs",
                retention=config.log_retention_days,
                removal_policy=config.cdk_removal_policy,
            ),
        )
        self._acknowledge_provider_findings(provider)

        self.resource = cdk.CustomResource(
            self,
            "Resource",
            service_token=provider.service_token,
            resource_type=RESOURCE_TYPE,
            properties={"MigrationsDigest": migrations_digest(migrations_dir)},
        )
        # The writer instance, not just the cluster resource, must be up before the first connection.
        self.resource.node.add_dependency(cluster)

    def _acknowledge_provider_findings(self, provider: cr.Provider) -> None:
        """The provider framework is CDK's own Lambda; these are its fixed permissions, not ours."""
        stack = cdk.Stack.of(self)
        handler_resource = self.handler.function.node.default_child
        assert isinstance(handler_resource, cdk.CfnResource)
        handler_logical_id = stack.resolve(stack.get_logical_id(handler_resource))
        acknowledge(
            provider,
            "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/"
            "AWSLambdaBasicExecutionRole]",
            "The custom-resource provider framework Lambda (CDK-owned) only writes its own logs with this "
            "AWS-maintained policy; it touches no Tollgate data.",
        )
        acknowledge(
            provider,
            f"AwsSolutions-IAM5[Resource::<{handler_logical_id}.Arn>:*]",
            "The provider framework may invoke any version or alias of the migrate function and nothing "
            "else; CDK generates this statement for every custom-resource provider.",
        )
