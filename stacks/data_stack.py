"""DataStack: the network and everything that keeps state (Aurora PostgreSQL, RDS Proxy, documents bucket).

A stage may leave out RDS Proxy (``database_proxy``) and the interface endpoints (``interface_endpoints``);
``database_endpoint`` is what application clients connect to either way.

It also applies the SQL migrations on deploy, so a stack that depends on it finds the schema in place.
"""

from __future__ import annotations

import math
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import aws_rds as rds
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct

from stacks.config import IDLE_SESSION_TIMEOUT_SECONDS, StageConfig
from stacks.constructs.database_migrations import DatabaseMigrations
from stacks.constructs.documents_access import ExportedDocumentsBucket
from stacks.constructs.lambda_packaging import DependenciesLayer, function_code
from stacks.constructs.nag import acknowledge
from stacks.reach import INTERFACE_ENDPOINTS, interface_services
from tollgate.scheduler.retention import ARCHIVE_PREFIX

POSTGRES_ENGINE = rds.DatabaseClusterEngine.aurora_postgres(version=rds.AuroraPostgresEngineVersion.VER_17_9)
# PostgreSQL's default port on purpose: RDS Proxy always listens on 5432, and clients take the port from
# the secret, so the cluster must use the same one for the secret to work against both.
POSTGRES_PORT = 5432
DATABASE_NAME = "tollgate"
ADMIN_USER = "tollgate_admin"
ISOLATED = ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_ISOLATED)
EGRESS = ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS)
HTTPS = ec2.Port.tcp(443)
# Interface endpoints the declaration calls for that another stack creates, and why there.
ENDPOINTS_OWNED_ELSEWHERE = {
    "stepfunctions": "DeliveryStack: the dispatcher is all that is started, and its endpoint goes with it",
}
ROTATION_PERIOD = cdk.Duration.days(30)


class DataStack(cdk.Stack):
    """Owns the VPC, the database and the documents bucket; exposes what other stacks connect to."""

    def __init__(self, scope: Construct, construct_id: str, *, config: StageConfig, **kwargs: Any) -> None:
        super().__init__(scope, construct_id, env=config.environment, **kwargs)
        self.config = config

        self.vpc = self._network()
        # Two client groups: application code reaches PostgreSQL through the proxy (or, in a stage without
        # one, the writer endpoint); the migration runner alone always talks to the cluster directly.
        self.database_clients = ec2.SecurityGroup(
            self,
            "DatabaseClients",
            vpc=self.vpc,
            description="Tollgate compute that uses PostgreSQL through RDS Proxy",
            # Outbound: HTTPS (below) and PostgreSQL to the proxy or cluster (added with its ingress rule).
            allow_all_outbound=False,
        )
        # HTTPS to any address: the worker calls the LLM provider's public API (its addresses are not
        # fixed) through NAT, and every member calls AWS through the interface endpoints and the S3 gateway.
        # The Lambdas share the group from isolated subnets, where it leads no further than the VPC.
        self.database_clients.add_egress_rule(
            ec2.Peer.any_ipv4(), HTTPS, "HTTPS: the LLM provider through NAT, AWS through VPC endpoints"
        )
        self.migration_clients = ec2.SecurityGroup(
            self,
            "MigrationClients",
            vpc=self.vpc,
            description="The migration runner, which connects to the Aurora writer directly",
            allow_all_outbound=True,
        )
        proxy_security_group = (
            ec2.SecurityGroup(
                self, "ProxySecurityGroup", vpc=self.vpc, description="RDS Proxy in front of Aurora"
            )
            if config.database_proxy
            else None
        )

        self.secrets_manager_endpoint: ec2.InterfaceVpcEndpoint | None = None
        self.application_endpoints: dict[str, ec2.InterfaceVpcEndpoint] = {}
        if config.interface_endpoints:
            self._interface_endpoints(proxy_security_group)
        # The workers' provider budget is in DynamoDB and every attempt touches it: keep that off the NAT.
        self.vpc.add_gateway_endpoint(
            "DynamoDb", service=ec2.GatewayVpcEndpointAwsService.DYNAMODB, subnets=[EGRESS]
        )
        # In the worker's egress subnets too, so document reads and image layers (ECR serves them from S3)
        # bypass the NAT gateway and its per-gigabyte charge.
        self.vpc.add_gateway_endpoint(
            "S3", service=ec2.GatewayVpcEndpointAwsService.S3, subnets=[ISOLATED, EGRESS]
        )

        self.access_logs_bucket, self.documents_key, self.documents_bucket = self._storage()
        self.vpc.add_flow_log(
            "FlowLogs",
            destination=ec2.FlowLogDestination.to_s3(self.access_logs_bucket, "vpc-flow-logs/"),
            traffic_type=ec2.FlowLogTrafficType.ALL,
        )
        self.database_cluster = self._database()
        secret = self.database_cluster.secret
        assert secret is not None, "the cluster is created with a generated secret"
        self.database_secret: secretsmanager.ISecret = secret

        # What application clients put in DATABASE_HOST: the proxy, or without one the cluster's writer.
        self.database_proxy: rds.DatabaseProxy | None = None
        if proxy_security_group is not None:
            self.database_proxy = self.database_cluster.add_proxy(
                "Proxy",
                vpc=self.vpc,
                vpc_subnets=ISOLATED,
                secrets=[self.database_secret],
                require_tls=True,
                # Clients log in with the secret's password (DatabaseSettings), so proxy IAM auth stays off.
                iam_auth=False,
                security_groups=[proxy_security_group],
                debug_logging=False,
            )
            self.database_proxy.connections.allow_from(
                self.database_clients, ec2.Port.tcp(POSTGRES_PORT), "Tollgate compute"
            )
            self.database_cluster.connections.allow_default_port_from(self.database_proxy, "RDS Proxy")
            self.database_endpoint: str = self.database_proxy.endpoint
        else:
            self.database_cluster.connections.allow_from(
                self.database_clients, ec2.Port.tcp(POSTGRES_PORT), "Tollgate compute"
            )
            self.database_endpoint = self.database_cluster.cluster_endpoint.hostname
        self.database_cluster.connections.allow_default_port_from(self.migration_clients, "Migrations")

        self.migrations = DatabaseMigrations(
            self,
            "Migrations",
            config=config,
            code=function_code(),
            layer=DependenciesLayer(self, "Dependencies", layer_dir=config.layer_dir).layer,
            vpc=self.vpc,
            security_groups=[self.migration_clients],
            cluster=self.database_cluster,
        )

        # Other stacks import these (their grants and DOCUMENTS_BUCKET), so CloudFormation tracks the use.
        self.documents_exports = ExportedDocumentsBucket.export(self.documents_bucket, self.documents_key)
        cdk.CfnOutput(
            self,
            "DatabaseProxyEndpoint" if self.database_proxy is not None else "DatabaseEndpoint",
            value=self.database_endpoint,
        )

    def _interface_endpoints(self, proxy_security_group: ec2.SecurityGroup | None) -> None:
        """AWS APIs inside the VPC, for a stage whose Lambdas live in isolated subnets (interface_endpoints).

        One endpoint per service the entrypoints call (stacks.reach, from tollgate.core.reach), except those
        another stack owns; the Lambdas in isolated subnets have no other route, and the NAT subnets' callers
        (the worker, whose NAT route is for the LLM provider) reach them through private DNS too, with no NAT
        data charge. Endpoints admit our own security groups only, not the whole VPC CIDR.
        """
        self.application_endpoints = {
            service: self.vpc.add_interface_endpoint(name, service=endpoint, subnets=ISOLATED, open=False)
            for service, (name, endpoint) in INTERFACE_ENDPOINTS.items()
            if service in interface_services(self.config) and service not in ENDPOINTS_OWNED_ELSEWHERE
        }
        for endpoint in self.application_endpoints.values():
            endpoint.connections.allow_default_port_from(self.database_clients)
        # The rotation function and RDS Proxy read the database secret as well as our own code.
        self.secrets_manager_endpoint = self.application_endpoints["secretsmanager"]
        for group in [self.migration_clients, *([proxy_security_group] if proxy_security_group else [])]:
            self.secrets_manager_endpoint.connections.allow_default_port_from(group)
        # What the platform calls for our code rather than the code itself: logs and traces from every
        # client, and the worker's image (ECR's API and registry; the layers come through the S3 gateway).
        logs_endpoint = self.vpc.add_interface_endpoint(
            "CloudWatchLogs",
            service=ec2.InterfaceVpcEndpointAwsService.CLOUDWATCH_LOGS,
            subnets=ISOLATED,
            open=False,
        )
        # Traces leave isolated subnets only through an endpoint; the ECS worker's SDK needs it too.
        xray_endpoint = self.vpc.add_interface_endpoint(
            "XRay",
            service=ec2.InterfaceVpcEndpointAwsService.XRAY,
            subnets=ISOLATED,
            open=False,
        )
        for group in (self.database_clients, self.migration_clients):
            logs_endpoint.connections.allow_default_port_from(group)
            xray_endpoint.connections.allow_default_port_from(group)
        for name, service in (
            ("EcrApi", ec2.InterfaceVpcEndpointAwsService.ECR),
            ("EcrDocker", ec2.InterfaceVpcEndpointAwsService.ECR_DOCKER),
        ):
            endpoint = self.vpc.add_interface_endpoint(name, service=service, subnets=ISOLATED, open=False)
            endpoint.connections.allow_default_port_from(self.database_clients)

    def _network(self) -> ec2.Vpc:
        """Isolated subnets for the database, the proxy, the endpoints and every Lambda; egress subnets behind
        NAT for the ECS worker alone, which must reach the LLM provider; public subnets for the NAT gateways.

        CDK allocates CIDR blocks in this order, so the isolated subnets keep the ranges they were deployed
        with; new groups go at the end, largest mask first so every block stays aligned.
        """
        return ec2.Vpc(
            self,
            "Vpc",
            ip_addresses=ec2.IpAddresses.cidr(self.config.vpc_cidr),
            max_azs=self.config.max_azs,
            nat_gateways=self.config.nat_gateways,
            subnet_configuration=[
                ec2.SubnetConfiguration(
                    name="isolated", subnet_type=ec2.SubnetType.PRIVATE_ISOLATED, cidr_mask=22
                ),
                ec2.SubnetConfiguration(
                    name="egress", subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS, cidr_mask=22
                ),
                ec2.SubnetConfiguration(
                    name="public",
                    subnet_type=ec2.SubnetType.PUBLIC,
                    cidr_mask=24,
                    # Only the NAT gateways live here, each with its own Elastic IP; nothing launched in
                    # these subnets gets a public address by accident.
                    map_public_ip_on_launch=False,
                ),
            ],
        )

    def _storage(self) -> tuple[s3.Bucket, kms.Key, s3.Bucket]:
        removal_policy = self.config.cdk_removal_policy
        # CloudFormation cannot delete a bucket that holds objects (or old versions), so a stage that is
        # destroyed with its data empties both buckets first; a stage that retains data never deletes them.
        empty_on_destroy = not self.config.retains_data
        # Old versions outlive any job that may still read them (its deadline) plus a week for support
        # redrives; at least 30 days.
        max_deadline_days = math.ceil(self.config.jobs.max_deadline_seconds / 86_400)
        noncurrent_days = max(30, max_deadline_days + 7)
        access_logs = s3.Bucket(
            self,
            "AccessLogs",
            # S3 server access logging can only deliver to SSE-S3 buckets, not SSE-KMS.
            encryption=s3.BucketEncryption.S3_MANAGED,
            enforce_ssl=True,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            lifecycle_rules=[s3.LifecycleRule(expiration=cdk.Duration.days(365))],
            removal_policy=removal_policy,
            auto_delete_objects=empty_on_destroy,
        )
        key = kms.Key(
            self,
            "DocumentsKey",
            description="Encrypts tenants' documents in the Tollgate documents bucket",
            enable_key_rotation=True,
            removal_policy=removal_policy,
        )
        documents = s3.Bucket(
            self,
            "Documents",
            # Its deployed name, kept so the bucket is never replaced; other stacks import its name and key
            # through this stack's exports (DocumentsExports), never by rebuilding the name.
            bucket_name=self.config.documents_bucket_name,
            encryption=s3.BucketEncryption.KMS,
            encryption_key=key,
            # One data key per bucket instead of one KMS call per object.
            bucket_key_enabled=True,
            # A document's identity includes its version, so a retried job reads exactly what was submitted.
            versioned=True,
            enforce_ssl=True,
            minimum_tls_version=1.2,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            server_access_logs_bucket=access_logs,
            server_access_logs_prefix="documents/",
            # A current document version is never expired by age: several jobs share one by digest, and only
            # the scheduler's retention knows when none uses it any more; it deletes that exact version.
            lifecycle_rules=[
                s3.LifecycleRule(
                    id="NoncurrentVersions",
                    abort_incomplete_multipart_upload_after=cdk.Duration.days(1),
                    noncurrent_version_expiration=cdk.Duration.days(noncurrent_days),
                    # What an expired archive (below) leaves once its last version is gone.
                    expired_object_delete_marker=True,
                ),
                s3.LifecycleRule(
                    id="ResultsArchives",
                    prefix=ARCHIVE_PREFIX,
                    transitions=[
                        s3.Transition(
                            storage_class=s3.StorageClass.INFREQUENT_ACCESS,
                            transition_after=cdk.Duration.days(self.config.archive_infrequent_access_days),
                        )
                    ],
                    expiration=cdk.Duration.days(self.config.archive_expiration_days),
                ),
            ],
            removal_policy=removal_policy,
            auto_delete_objects=empty_on_destroy,
        )
        return access_logs, key, documents

    def _database(self) -> rds.DatabaseCluster:
        config = self.config
        cluster_identifier = f"tollgate-{config.stage}"
        # Created here rather than by RDS so the exported PostgreSQL log gets a retention period; the
        # name RDS writes to is fixed by the cluster identifier.
        postgres_log = logs.LogGroup(
            self,
            "PostgresLog",
            log_group_name=f"/aws/rds/cluster/{cluster_identifier}/postgresql",
            retention=config.log_retention_days,
            removal_policy=config.cdk_removal_policy,
        )
        parameters = {"rds.force_ssl": "1"}
        if config.auto_pause:
            # A warm Lambda environment keeps its pooled connection open while it lives, and any open
            # connection keeps the cluster from pausing; the server closes idle ones instead (milliseconds).
            parameters["idle_session_timeout"] = str(IDLE_SESSION_TIMEOUT_SECONDS * 1000)
        readers = [
            rds.ClusterInstance.serverless_v2(f"reader{index}", scale_with_writer=True)
            for index in range(1, config.aurora_readers + 1)
        ]
        cluster = rds.DatabaseCluster(
            self,
            "Database",
            cluster_identifier=cluster_identifier,
            engine=POSTGRES_ENGINE,
            writer=rds.ClusterInstance.serverless_v2("writer"),
            readers=readers,
            serverless_v2_min_capacity=config.aurora_min_acu,
            serverless_v2_max_capacity=config.aurora_max_acu,
            serverless_v2_auto_pause_duration=(
                cdk.Duration.seconds(config.aurora_auto_pause_seconds) if config.auto_pause else None
            ),
            vpc=self.vpc,
            vpc_subnets=ISOLATED,
            port=POSTGRES_PORT,
            default_database_name=DATABASE_NAME,
            credentials=rds.Credentials.from_generated_secret(ADMIN_USER),
            storage_encrypted=True,
            iam_authentication=config.iam_database_authentication,
            parameters=parameters,
            backup=rds.BackupProps(retention=cdk.Duration.days(config.backup_retention_days)),
            deletion_protection=config.retains_data,
            copy_tags_to_snapshot=True,
            cloudwatch_logs_exports=["postgresql"],
            # Kept in stages that retain data; elsewhere deleting the stack still leaves a final snapshot.
            removal_policy=cdk.RemovalPolicy.RETAIN if config.retains_data else cdk.RemovalPolicy.SNAPSHOT,
        )
        cluster.node.add_dependency(postgres_log)
        if not config.retains_data:
            acknowledge(
                cluster,
                "AwsSolutions-RDS10",
                f"Stage {config.stage} has removal_policy=destroy: its cluster is disposable and is "
                "snapshotted on delete. Stages with removal_policy=retain (prod) turn deletion protection "
                "on.",
            )
        self.rotation_clients = rotate_master_secret(
            cluster, vpc=self.vpc, secrets_manager_endpoint=self.secrets_manager_endpoint
        )
        return cluster


def rotate_master_secret(
    cluster: rds.DatabaseCluster,
    *,
    vpc: ec2.IVpc,
    secrets_manager_endpoint: ec2.IInterfaceVpcEndpoint | None,
    every: cdk.Duration = ROTATION_PERIOD,
) -> ec2.SecurityGroup:
    """Rotate the cluster's master secret with AWS's single-user rotation function, placed where it can reach
    both the cluster and Secrets Manager; returns the function's security group.

    The function calls Secrets Manager's API (get, put, describe the secret) and connects to PostgreSQL. With
    an interface endpoint it runs in the endpoint's subnets and the endpoint admits its security group; a
    stage without interface endpoints puts it in the egress subnets, where Secrets Manager's public endpoint
    is reached through NAT. Either way nothing else is open to it.
    """
    scope = cluster.stack
    rotation_clients = ec2.SecurityGroup(
        scope,
        "SecretRotationClients",
        vpc=vpc,
        description="Master secret rotation: PostgreSQL to the cluster, HTTPS to Secrets Manager",
        allow_all_outbound=False,
    )
    if secrets_manager_endpoint is not None:
        # Adds the endpoint's ingress on 443 from this group and this group's egress to the endpoint's.
        secrets_manager_endpoint.connections.allow_default_port_from(rotation_clients, "Secret rotation")
        subnets = ISOLATED
    else:
        rotation_clients.add_egress_rule(
            ec2.Peer.any_ipv4(), HTTPS, "Secrets Manager's public endpoint, through NAT"
        )
        subnets = EGRESS
    # The rotation adds the cluster's ingress on 5432 from this group (and this group's egress to it). It is
    # not given the endpoint: the function then calls secretsmanager.<region>.amazonaws.com, which the
    # endpoint's private DNS answers inside the VPC (and NAT outside it), rather than a hostname CDK derives
    # from the endpoint's id.
    cluster.add_rotation_single_user(
        automatically_after=every,
        vpc_subnets=subnets,
        security_group=rotation_clients,
    )
    return rotation_clients
