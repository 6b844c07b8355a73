"""DataStack's template: private network, encrypted Aurora behind a TLS-only proxy, a locked-down bucket."""

from __future__ import annotations

import json
from typing import Any

import pytest

from stacks.config import StageConfig
from stacks.constructs.database_migrations import RESOURCE_TYPE, migrations_digest
from tests.infrastructure.cfn import as_list, function_by_handler, only, references, resources

pytestmark = pytest.mark.infrastructure

Template = dict[str, Any]


def _documents_bucket(template: Template) -> tuple[str, dict[str, Any]]:
    (match,) = [
        (logical_id, bucket)
        for logical_id, bucket in resources(template, "AWS::S3::Bucket").items()
        if "VersioningConfiguration" in bucket["Properties"]
    ]
    return match


def _bucket_policy(template: Template, bucket_id: str) -> list[dict[str, Any]]:
    (policy,) = [
        p
        for p in resources(template, "AWS::S3::BucketPolicy").values()
        if p["Properties"]["Bucket"] == {"Ref": bucket_id}
    ]
    statements: list[dict[str, Any]] = policy["Properties"]["PolicyDocument"]["Statement"]
    return statements


def test_network_has_no_route_to_the_internet(data_template: Template) -> None:
    assert resources(data_template, "AWS::EC2::InternetGateway") == {}
    assert resources(data_template, "AWS::EC2::NatGateway") == {}
    for subnet in resources(data_template, "AWS::EC2::Subnet").values():
        assert subnet["Properties"].get("MapPublicIpOnLaunch", False) is False


def test_vpc_endpoints_cover_s3_secrets_manager_logs_and_xray(data_template: Template) -> None:
    endpoints = resources(data_template, "AWS::EC2::VPCEndpoint").values()
    services = {
        (str(endpoint["Properties"]["ServiceName"]), endpoint["Properties"].get("VpcEndpointType"))
        for endpoint in endpoints
    }

    assert any("secretsmanager" in name and kind == "Interface" for name, kind in services)
    assert any("logs" in name and kind == "Interface" for name, kind in services)
    assert any("xray" in name and kind == "Interface" for name, kind in services)
    assert any(".s3" in name and kind == "Gateway" for name, kind in services)


@pytest.mark.parametrize("service", ["ecr.api", "ecr.dkr", "sqs", "lambda"])
def test_application_endpoints_admit_the_database_clients(data_template: Template, service: str) -> None:
    """What the worker (image pull, queue), the relay (queue) and the API (relay nudge) call, with no NAT."""
    (endpoint,) = [
        endpoint["Properties"]
        for endpoint in resources(data_template, "AWS::EC2::VPCEndpoint").values()
        if json.dumps(endpoint["Properties"]["ServiceName"]).endswith(f'.{service}"]]}}')
    ]
    (group,) = [group["Fn::GetAtt"][0] for group in endpoint["SecurityGroupIds"]]
    # Ingress rules are separate resources only (test_nothing_is_reachable_from_an_ip_range).
    sources = {
        rule["Properties"]["SourceSecurityGroupId"]["Fn::GetAtt"][0]
        for rule in resources(data_template, "AWS::EC2::SecurityGroupIngress").values()
        if references(rule["Properties"]["GroupId"], group)
    }

    assert endpoint["VpcEndpointType"] == "Interface"
    assert endpoint["PrivateDnsEnabled"] is True
    assert [source.startswith("DatabaseClients") for source in sources] == [True]


def test_nothing_is_reachable_from_an_ip_range(data_template: Template) -> None:
    """Every ingress rule names a source security group: no CIDR, not even the VPC's own."""
    for group in resources(data_template, "AWS::EC2::SecurityGroup").values():
        assert "SecurityGroupIngress" not in group["Properties"]
    for rule in resources(data_template, "AWS::EC2::SecurityGroupIngress").values():
        assert "SourceSecurityGroupId" in rule["Properties"]


def test_vpc_flow_logs_are_on(data_template: Template) -> None:
    _, flow_log = only(data_template, "AWS::EC2::FlowLog")

    assert flow_log["Properties"]["TrafficType"] == "ALL"


def test_documents_bucket_is_versioned_encrypted_private_and_logged(data_template: Template) -> None:
    _, bucket = _documents_bucket(data_template)
    properties = bucket["Properties"]

    assert properties["VersioningConfiguration"] == {"Status": "Enabled"}
    assert properties["PublicAccessBlockConfiguration"] == {
        "BlockPublicAcls": True,
        "BlockPublicPolicy": True,
        "IgnorePublicAcls": True,
        "RestrictPublicBuckets": True,
    }
    (encryption,) = properties["BucketEncryption"]["ServerSideEncryptionConfiguration"]
    assert encryption["ServerSideEncryptionByDefault"]["SSEAlgorithm"] == "aws:kms"
    (key_id,) = resources(data_template, "AWS::KMS::Key")
    assert references(encryption["ServerSideEncryptionByDefault"]["KMSMasterKeyID"], key_id)
    assert resources(data_template, "AWS::KMS::Key")[key_id]["Properties"]["EnableKeyRotation"] is True
    assert "DestinationBucketName" in properties["LoggingConfiguration"]


def test_buckets_refuse_requests_without_tls(data_template: Template) -> None:
    for bucket_id, bucket in resources(data_template, "AWS::S3::Bucket").items():
        statements = _bucket_policy(data_template, bucket_id)
        assert {
            "Action": "s3:*",
            "Condition": {"Bool": {"aws:SecureTransport": "false"}},
            "Effect": "Deny",
            "Principal": {"AWS": "*"},
        }.items() <= next(s for s in statements if s["Effect"] == "Deny").items()
        assert bucket["Properties"]["PublicAccessBlockConfiguration"]["RestrictPublicBuckets"] is True


def test_documents_bucket_refuses_tls_before_1_2(data_template: Template) -> None:
    bucket_id, _ = _documents_bucket(data_template)

    conditions = [
        s.get("Condition", {}) for s in _bucket_policy(data_template, bucket_id) if s["Effect"] == "Deny"
    ]

    assert {"NumericLessThan": {"s3:TlsVersion": 1.2}} in conditions


def test_aurora_is_encrypted_serverless_v2_and_backed_up(
    data_template: Template, config: StageConfig
) -> None:
    _, cluster = only(data_template, "AWS::RDS::DBCluster")
    properties = cluster["Properties"]

    assert properties["Engine"] == "aurora-postgresql"
    assert properties["StorageEncrypted"] is True
    assert properties["ServerlessV2ScalingConfiguration"] == {
        "MinCapacity": config.aurora_min_acu,
        "MaxCapacity": config.aurora_max_acu,
    }
    assert properties["BackupRetentionPeriod"] == config.backup_retention_days
    assert properties["DeletionProtection"] is config.retains_data
    assert properties["EnableIAMDatabaseAuthentication"] is config.iam_database_authentication
    for instance in resources(data_template, "AWS::RDS::DBInstance").values():
        assert instance["Properties"]["DBInstanceClass"] == "db.serverless"
        assert instance["Properties"]["PubliclyAccessible"] is False


def test_aurora_refuses_connections_without_tls(data_template: Template) -> None:
    _, parameters = only(data_template, "AWS::RDS::DBClusterParameterGroup")

    assert parameters["Properties"]["Parameters"]["rds.force_ssl"] == "1"


def test_master_secret_rotates(data_template: Template) -> None:
    (secret_id,) = resources(data_template, "AWS::SecretsManager::Secret")
    (attachment_id,) = resources(data_template, "AWS::SecretsManager::SecretTargetAttachment")
    _, schedule = only(data_template, "AWS::SecretsManager::RotationSchedule")

    assert references(schedule["Properties"]["SecretId"], attachment_id)
    assert "ScheduleExpression" in schedule["Properties"]["RotationRules"]
    assert resources(data_template, "AWS::SecretsManager::SecretTargetAttachment")[attachment_id][
        "Properties"
    ]["SecretId"] == {"Ref": secret_id}


def test_proxy_requires_tls_and_uses_the_master_secret(data_template: Template) -> None:
    (attachment_id,) = resources(data_template, "AWS::SecretsManager::SecretTargetAttachment")
    _, proxy = only(data_template, "AWS::RDS::DBProxy")

    assert proxy["Properties"]["RequireTLS"] is True
    assert proxy["Properties"]["EngineFamily"] == "POSTGRESQL"
    (auth,) = proxy["Properties"]["Auth"]
    assert auth["AuthScheme"] == "SECRETS"
    assert references(auth["SecretArn"], attachment_id)


def test_application_code_reaches_the_cluster_only_through_the_proxy(data_template: Template) -> None:
    _, cluster = only(data_template, "AWS::RDS::DBCluster")
    (cluster_group,) = [group["Fn::GetAtt"][0] for group in cluster["Properties"]["VpcSecurityGroupIds"]]
    _, proxy = only(data_template, "AWS::RDS::DBProxy")
    (proxy_group,) = [group["Fn::GetAtt"][0] for group in proxy["Properties"]["VpcSecurityGroupIds"]]

    cluster_sources = {
        rule["Properties"]["SourceSecurityGroupId"]["Fn::GetAtt"][0]
        for rule in resources(data_template, "AWS::EC2::SecurityGroupIngress").values()
        if references(rule["Properties"]["GroupId"], cluster_group)
    }
    proxy_sources = {
        rule["Properties"]["SourceSecurityGroupId"]["Fn::GetAtt"][0]
        for rule in resources(data_template, "AWS::EC2::SecurityGroupIngress").values()
        if references(rule["Properties"]["GroupId"], proxy_group)
    }

    assert proxy_group in cluster_sources
    assert all(
        source == proxy_group or source.startswith(("MigrationClients", "DatabaseRotationSingleUser"))
        for source in cluster_sources
    )
    assert [source.startswith("DatabaseClients") for source in proxy_sources] == [True]


def test_migrations_run_when_the_sql_files_change(data_template: Template) -> None:
    _, migrations = only(data_template, RESOURCE_TYPE)
    _, function = function_by_handler(data_template, "functions.migrate.handler.lambda_handler")
    environment = function["Properties"]["Environment"]["Variables"]
    _, cluster_resource = only(data_template, "AWS::RDS::DBCluster")
    (cluster_id,) = resources(data_template, "AWS::RDS::DBCluster")

    assert migrations["Properties"]["MigrationsDigest"] == migrations_digest()
    assert "Databasewriter" in " ".join(as_list(migrations.get("DependsOn", [])))
    # DDL goes to the writer endpoint, not through the proxy.
    assert environment["DATABASE_HOST"] == {"Fn::GetAtt": [cluster_id, "Endpoint.Address"]}
    assert cluster_resource["Properties"]["Port"] == 5432


def test_migrations_digest_follows_names_and_content(tmp_path: Any) -> None:
    (tmp_path / "0001_a.sql").write_text("create table a();")
    first = migrations_digest(tmp_path)
    (tmp_path / "0002_b.sql").write_text("create table b();")
    second = migrations_digest(tmp_path)
    (tmp_path / "notes.txt").write_text("not a migration")

    assert first != second
    assert migrations_digest(tmp_path) == second
