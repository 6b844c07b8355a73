"""DataStack's template: a network whose only way out is the worker's NAT, encrypted Aurora behind a TLS-only
proxy, a locked-down bucket."""

from __future__ import annotations

import ipaddress
import json
from typing import Any
from uuid import uuid4

import pytest

from stacks.config import StageConfig
from stacks.constructs.database_migrations import RESOURCE_TYPE, migrations_digest
from tests.infrastructure.cfn import (
    as_list,
    export_of,
    function_by_handler,
    imports,
    only,
    references,
    render,
    resources,
    route_table_of,
    routes_of_subnet,
    subnet_groups,
)
from tollgate.core.documents import tenant_prefix
from tollgate.scheduler.retention import ARCHIVE_PREFIX

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


def _group(template: Template, name: str) -> list[str]:
    return sorted(subnet for subnet, group in subnet_groups(template).items() if group == name)


def test_each_az_has_an_isolated_an_egress_and_a_public_subnet(
    data_template: Template, config: StageConfig
) -> None:
    groups = subnet_groups(data_template)

    assert sorted(groups.values()) == sorted(["isolated", "egress", "public"] * config.max_azs)


def test_isolated_subnets_keep_the_ranges_and_ids_they_were_deployed_with(
    data_template: Template, config: StageConfig
) -> None:
    """Moving a deployed subnet replaces it and everything in it: the database, the proxy, the Lambdas."""
    subnets = resources(data_template, "AWS::EC2::Subnet")
    first_blocks = list(ipaddress.IPv4Network(config.vpc_cidr).subnets(new_prefix=22))[: config.max_azs]

    isolated = _group(data_template, "isolated")

    assert [subnets[subnet]["Properties"]["CidrBlock"] for subnet in isolated] == [
        str(block) for block in first_blocks
    ]
    assert all(subnet.startswith(f"VpcisolatedSubnet{n + 1}Subnet") for n, subnet in enumerate(isolated))


def test_subnet_ranges_do_not_overlap(data_template: Template, config: StageConfig) -> None:
    vpc = ipaddress.IPv4Network(config.vpc_cidr)
    blocks = [
        ipaddress.IPv4Network(subnet["Properties"]["CidrBlock"])
        for subnet in resources(data_template, "AWS::EC2::Subnet").values()
    ]

    assert all(block.subnet_of(vpc) for block in blocks)
    assert not [(a, b) for i, a in enumerate(blocks) for b in blocks[i + 1 :] if a.overlaps(b)]


def test_isolated_subnets_have_no_route_out(data_template: Template) -> None:
    for subnet in _group(data_template, "isolated"):
        assert routes_of_subnet(data_template, subnet) == []


def test_egress_subnets_route_out_through_nat_gateways_in_public_subnets(
    data_template: Template, config: StageConfig
) -> None:
    nat_gateways = resources(data_template, "AWS::EC2::NatGateway")
    public = _group(data_template, "public")

    assert len(nat_gateways) == config.nat_gateways
    assert all(nat["Properties"]["SubnetId"]["Ref"] in public for nat in nat_gateways.values())
    used = set()
    for subnet in _group(data_template, "egress"):
        (route,) = routes_of_subnet(data_template, subnet)
        assert route["DestinationCidrBlock"] == "0.0.0.0/0"
        assert route["NatGatewayId"]["Ref"] in nat_gateways
        used.add(route["NatGatewayId"]["Ref"])
    # Every NAT gateway carries traffic: with one per AZ, each AZ leaves through its own.
    assert used == set(nat_gateways)


def test_only_public_subnets_route_to_the_internet_gateway(data_template: Template) -> None:
    (gateway,) = resources(data_template, "AWS::EC2::InternetGateway")

    for subnet, group in subnet_groups(data_template).items():
        gateways = [route.get("GatewayId") for route in routes_of_subnet(data_template, subnet)]
        assert (gateways == [{"Ref": gateway}]) is (group == "public"), subnet


def test_no_subnet_hands_out_public_addresses(data_template: Template) -> None:
    for subnet in resources(data_template, "AWS::EC2::Subnet").values():
        assert subnet["Properties"].get("MapPublicIpOnLaunch", False) is False


def _gateway_endpoint(template: Template, service: str) -> dict[str, Any]:
    (endpoint,) = [
        endpoint["Properties"]
        for endpoint in resources(template, "AWS::EC2::VPCEndpoint").values()
        if endpoint["Properties"].get("VpcEndpointType") == "Gateway"
        and service in render(endpoint["Properties"]["ServiceName"])
    ]
    return endpoint


def test_dynamodb_gateway_serves_the_egress_subnets(data_template: Template) -> None:
    """Every provider call touches the budget table twice: that traffic must not pay for NAT."""
    endpoint = _gateway_endpoint(data_template, "dynamodb")
    assert {table["Ref"] for table in endpoint["RouteTableIds"]} == {
        route_table_of(data_template, subnet) for subnet in _group(data_template, "egress")
    }


def test_s3_gateway_serves_the_isolated_and_egress_subnets(data_template: Template) -> None:
    """The worker's document reads and image layers must not go through (and pay for) NAT."""
    endpoint = _gateway_endpoint(data_template, ".s3")
    private = _group(data_template, "isolated") + _group(data_template, "egress")

    assert {table["Ref"] for table in endpoint["RouteTableIds"]} == {
        route_table_of(data_template, subnet) for subnet in private
    }


def test_database_proxy_endpoints_and_migrations_stay_in_the_isolated_subnets(
    data_template: Template,
) -> None:
    isolated = [{"Ref": subnet} for subnet in _group(data_template, "isolated")]
    _, subnet_group = only(data_template, "AWS::RDS::DBSubnetGroup")
    _, proxy = only(data_template, "AWS::RDS::DBProxy")
    _, migrate = function_by_handler(data_template, "functions.migrate.handler.lambda_handler")
    (rotation,) = resources(data_template, "AWS::Serverless::Application").values()

    assert subnet_group["Properties"]["SubnetIds"] == isolated
    assert proxy["Properties"]["VpcSubnetIds"] == isolated
    assert migrate["Properties"]["VpcConfig"]["SubnetIds"] == isolated
    assert rotation["Properties"]["Parameters"]["vpcSubnetIds"] == {
        "Fn::Join": ["", [isolated[0], *[part for subnet in isolated[1:] for part in (",", subnet)]]]
    }
    for endpoint in resources(data_template, "AWS::EC2::VPCEndpoint").values():
        if endpoint["Properties"].get("VpcEndpointType") == "Interface":
            assert endpoint["Properties"]["SubnetIds"] == isolated


def test_database_clients_send_only_https_and_postgresql_to_the_proxy(data_template: Template) -> None:
    """The worker's group: HTTPS anywhere (the LLM provider through NAT, AWS through the endpoints) and
    PostgreSQL to RDS Proxy. No other port leaves, so a compromised task cannot reach arbitrary services."""
    (group_id,) = [
        gid
        for gid in resources(data_template, "AWS::EC2::SecurityGroup")
        if gid.startswith("DatabaseClients")
    ]
    group = resources(data_template, "AWS::EC2::SecurityGroup")[group_id]
    _, proxy = only(data_template, "AWS::RDS::DBProxy")
    (proxy_group,) = [g["Fn::GetAtt"][0] for g in proxy["Properties"]["VpcSecurityGroupIds"]]
    endpoint_groups = {
        g["Fn::GetAtt"][0]
        for endpoint in resources(data_template, "AWS::EC2::VPCEndpoint").values()
        for g in endpoint["Properties"].get("SecurityGroupIds", [])
    }

    (anywhere,) = group["Properties"]["SecurityGroupEgress"]
    to_groups = {
        (rule["Properties"]["DestinationSecurityGroupId"]["Fn::GetAtt"][0], rule["Properties"]["FromPort"])
        for rule in resources(data_template, "AWS::EC2::SecurityGroupEgress").values()
        if references(rule["Properties"]["GroupId"], group_id)
    }

    assert anywhere == {
        "CidrIp": "0.0.0.0/0",
        "Description": anywhere["Description"],
        "FromPort": 443,
        "IpProtocol": "tcp",
        "ToPort": 443,
    }
    assert (proxy_group, 5432) in to_groups
    assert {(target, port) for target, port in to_groups if target != proxy_group} <= {
        (target, 443) for target in endpoint_groups
    }


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
    """What the worker (image pull, queue), the relay (queue) and the API (relay nudge) call, never via NAT."""
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


def _rotation(template: Template) -> dict[str, Any]:
    """The parameters of the rotation function's serverless application (AWS's single-user rotation)."""
    (application,) = resources(template, "AWS::Serverless::Application").values()
    parameters: dict[str, Any] = application["Properties"]["Parameters"]
    return parameters


def _joined_refs(value: Any) -> list[str]:
    """The logical ids in a comma-joined list of Refs (how SecretRotation passes its subnets)."""
    _, parts = value["Fn::Join"]
    return [part["Ref"] for part in parts if isinstance(part, dict)]


def _rules_between(template: Template, kind: str, group: str, other: str) -> list[dict[str, Any]]:
    """Ingress rules of ``group`` from ``other`` (kind ``Ingress``) or egress rules of ``group`` to ``other``."""
    peer = "SourceSecurityGroupId" if kind == "Ingress" else "DestinationSecurityGroupId"
    return [
        rule["Properties"]
        for rule in resources(template, f"AWS::EC2::SecurityGroup{kind}").values()
        if references(rule["Properties"]["GroupId"], group)
        and references(rule["Properties"].get(peer), other)
    ]


def test_the_rotation_function_reaches_secrets_manager_through_its_endpoint(data_template: Template) -> None:
    """Followed from the rotation application to the Secrets Manager endpoint: the function's own group is
    admitted on 443, may send there, and runs in the endpoint's subnets; the isolated subnets have no other
    way to Secrets Manager, so without this every rotation would time out."""
    parameters = _rotation(data_template)
    (rotation_group,) = [parameters["vpcSecurityGroupIds"]["Fn::GetAtt"][0]]
    endpoint = next(
        endpoint["Properties"]
        for endpoint in resources(data_template, "AWS::EC2::VPCEndpoint").values()
        if "secretsmanager" in json.dumps(endpoint["Properties"]["ServiceName"])
    )
    (endpoint_group,) = [group["Fn::GetAtt"][0] for group in endpoint["SecurityGroupIds"]]

    admitted = _rules_between(data_template, "Ingress", endpoint_group, rotation_group)
    sent = _rules_between(data_template, "Egress", rotation_group, endpoint_group)

    assert [(rule["IpProtocol"], rule["FromPort"], rule["ToPort"]) for rule in admitted] == [
        ("tcp", 443, 443)
    ]
    assert [(rule["IpProtocol"], rule["FromPort"], rule["ToPort"]) for rule in sent] == [("tcp", 443, 443)]
    assert [{"Ref": subnet} for subnet in _joined_refs(parameters["vpcSubnetIds"])] == endpoint["SubnetIds"]
    # The function calls Secrets Manager's regional name, which this endpoint's private DNS answers in the VPC.
    assert render(parameters["endpoint"]).startswith("https://secretsmanager.${AWS::Region}.")
    assert endpoint["PrivateDnsEnabled"] is True


def test_the_rotation_function_reaches_the_cluster_and_nothing_else(data_template: Template) -> None:
    parameters = _rotation(data_template)
    rotation_group = parameters["vpcSecurityGroupIds"]["Fn::GetAtt"][0]
    group = resources(data_template, "AWS::EC2::SecurityGroup")[rotation_group]
    (cluster_id, cluster) = only(data_template, "AWS::RDS::DBCluster")
    (cluster_group,) = [g["Fn::GetAtt"][0] for g in cluster["Properties"]["VpcSecurityGroupIds"]]

    destinations = sorted(
        rule["Properties"]["DestinationSecurityGroupId"]["Fn::GetAtt"][0]
        for rule in resources(data_template, "AWS::EC2::SecurityGroupEgress").values()
        if references(rule["Properties"]["GroupId"], rotation_group)
    )

    # No egress to any address range: only the separate rules to the cluster's and the endpoint's groups.
    assert group["Properties"].get("SecurityGroupEgress", []) == []
    assert cluster_group in destinations and len(destinations) == 2
    (admitted,) = _rules_between(data_template, "Ingress", cluster_group, rotation_group)
    assert references(admitted["FromPort"], cluster_id)


def _standalone_rotation(endpoint: bool) -> Template:
    """A VPC shaped like DataStack's, a cluster, and rotate_master_secret, with or without an endpoint."""
    import aws_cdk as cdk
    from aws_cdk import aws_ec2 as ec2
    from aws_cdk import aws_rds as rds
    from aws_cdk.assertions import Template as CdkTemplate

    from stacks.data_stack import ISOLATED, POSTGRES_ENGINE, rotate_master_secret

    stack = cdk.Stack(cdk.App(), "Rotation")
    vpc = ec2.Vpc(
        stack,
        "Vpc",
        max_azs=2,
        nat_gateways=1,
        subnet_configuration=[
            ec2.SubnetConfiguration(name="isolated", subnet_type=ec2.SubnetType.PRIVATE_ISOLATED),
            ec2.SubnetConfiguration(name="egress", subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS),
            ec2.SubnetConfiguration(name="public", subnet_type=ec2.SubnetType.PUBLIC),
        ],
    )
    cluster = rds.DatabaseCluster(
        stack,
        "Database",
        engine=POSTGRES_ENGINE,
        writer=rds.ClusterInstance.serverless_v2("writer"),
        vpc=vpc,
        vpc_subnets=ISOLATED,
    )
    secrets_manager = (
        vpc.add_interface_endpoint(
            "SecretsManager",
            service=ec2.InterfaceVpcEndpointAwsService.SECRETS_MANAGER,
            subnets=ISOLATED,
            open=False,
        )
        if endpoint
        else None
    )
    rotate_master_secret(cluster, vpc=vpc, secrets_manager_endpoint=secrets_manager)
    template: Template = CdkTemplate.from_stack(stack).to_json()
    return template


def test_without_an_endpoint_the_rotation_function_runs_behind_nat() -> None:
    """A stage without interface endpoints: the function runs in the egress subnets and may send HTTPS out,
    which reaches Secrets Manager's public endpoint through NAT; it still reaches PostgreSQL."""
    template = _standalone_rotation(endpoint=False)
    parameters = _rotation(template)
    rotation_group = parameters["vpcSecurityGroupIds"]["Fn::GetAtt"][0]
    group = resources(template, "AWS::EC2::SecurityGroup")[rotation_group]

    assert set(_joined_refs(parameters["vpcSubnetIds"])) == set(_group(template, "egress"))
    for subnet in _joined_refs(parameters["vpcSubnetIds"]):
        assert any("NatGatewayId" in route for route in routes_of_subnet(template, subnet))
    (anywhere,) = group["Properties"]["SecurityGroupEgress"]
    assert (anywhere["CidrIp"], anywhere["FromPort"], anywhere["ToPort"]) == ("0.0.0.0/0", 443, 443)
    assert render(parameters["endpoint"]).startswith("https://secretsmanager.")
    (_, cluster) = only(template, "AWS::RDS::DBCluster")
    (cluster_group,) = [g["Fn::GetAtt"][0] for g in cluster["Properties"]["VpcSecurityGroupIds"]]
    assert len(_rules_between(template, "Ingress", cluster_group, rotation_group)) == 1


def test_with_an_endpoint_the_standalone_rotation_matches_the_stage() -> None:
    """The same helper with an endpoint gives the shape the dev stage has: isolated subnets, admitted on 443."""
    template = _standalone_rotation(endpoint=True)
    parameters = _rotation(template)
    rotation_group = parameters["vpcSecurityGroupIds"]["Fn::GetAtt"][0]
    (endpoint,) = resources(template, "AWS::EC2::VPCEndpoint").values()
    (endpoint_group,) = [g["Fn::GetAtt"][0] for g in endpoint["Properties"]["SecurityGroupIds"]]

    assert set(_joined_refs(parameters["vpcSubnetIds"])) == set(_group(template, "isolated"))
    assert len(_rules_between(template, "Ingress", endpoint_group, rotation_group)) == 1


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
        source == proxy_group or source.startswith(("MigrationClients", "SecretRotationClients"))
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


def _lifecycle_rules(template: Template) -> dict[str, dict[str, Any]]:
    _, bucket = _documents_bucket(template)
    return {rule["Id"]: rule for rule in bucket["Properties"]["LifecycleConfiguration"]["Rules"]}


def test_document_versions_are_never_expired_by_age_only_superseded_ones(data_template: Template) -> None:
    """Jobs share a document by digest and only retention knows when none uses it; S3 only clears noncurrent
    versions and the delete markers an expired archive leaves."""
    rules = _lifecycle_rules(data_template)

    everywhere = [rule for rule in rules.values() if "Prefix" not in rule and "Filter" not in rule]
    assert [rule["Id"] for rule in everywhere] == ["NoncurrentVersions"]
    (noncurrent,) = everywhere
    assert "ExpirationInDays" not in noncurrent and "Transitions" not in noncurrent
    assert noncurrent["NoncurrentVersionExpiration"]["NoncurrentDays"] >= 30
    assert noncurrent["ExpiredObjectDeleteMarker"] is True


def test_results_archives_move_to_infrequent_access_and_expire(
    data_template: Template, config: StageConfig
) -> None:
    archives = _lifecycle_rules(data_template)["ResultsArchives"]

    assert archives["Prefix"] == ARCHIVE_PREFIX
    assert archives["Transitions"] == [
        {"StorageClass": "STANDARD_IA", "TransitionInDays": config.archive_infrequent_access_days}
    ]
    assert archives["ExpirationInDays"] == config.archive_expiration_days
    # Archives live outside tenants' prefixes, so a tenant can never name one as a document.
    assert not ARCHIVE_PREFIX.startswith(tenant_prefix(uuid4()).split("/")[0])


def _auto_deleted_buckets(template: Template) -> set[str]:
    """Buckets that a Custom::S3AutoDeleteObjects resource empties when the stack deletes them."""
    return {
        resource["Properties"]["BucketName"]["Ref"]
        for resource in resources(template, "Custom::S3AutoDeleteObjects").values()
    }


@pytest.fixture(scope="module")
def prod_data_template(tmp_path_factory: pytest.TempPathFactory) -> Template:
    """DataStack alone, for the prod stage (removal_policy retain)."""
    import aws_cdk as cdk
    from aws_cdk.assertions import Template as CdkTemplate

    from app import cdk_json_context
    from stacks.data_stack import DataStack

    app = cdk.App(
        outdir=str(tmp_path_factory.mktemp("cdk.out.prod-data")),
        context={**cdk_json_context(), "stage": "prod", "layer_dir": str(tmp_path_factory.mktemp("layer"))},
    )
    config = StageConfig.from_node(app.node)
    assert config.retains_data
    template: Template = CdkTemplate.from_stack(
        DataStack(app, config.stack_name("Data"), config=config)
    ).to_json()
    return template


def test_a_destroyed_stage_empties_every_bucket_before_deleting_it(
    data_template: Template, config: StageConfig
) -> None:
    """CloudFormation cannot delete a bucket with objects or old versions in it; `cdk destroy` of a dev stage
    would stop at the documents bucket."""
    buckets = resources(data_template, "AWS::S3::Bucket")

    assert config.removal_policy == "destroy"
    assert _auto_deleted_buckets(data_template) == set(buckets)
    assert {bucket["DeletionPolicy"] for bucket in buckets.values()} == {"Delete"}


def test_a_stage_that_retains_data_never_empties_a_bucket(prod_data_template: Template) -> None:
    buckets = resources(prod_data_template, "AWS::S3::Bucket")

    assert buckets
    assert _auto_deleted_buckets(prod_data_template) == set()
    assert resources(prod_data_template, "Custom::S3AutoDeleteObjects") == {}
    assert {bucket["DeletionPolicy"] for bucket in buckets.values()} == {"Retain"}


def test_other_stacks_import_the_documents_bucket_from_this_stacks_exports(data_template: Template) -> None:
    bucket_id, _ = _documents_bucket(data_template)
    (key_id,) = resources(data_template, "AWS::KMS::Key")
    outputs = data_template["Outputs"]

    assert outputs["DocumentsBucketName"] == {
        "Value": {"Ref": bucket_id},
        "Export": {"Name": "Tollgate-dev-Data:DocumentsBucketName"},
    }
    assert outputs["DocumentsKeyArn"] == {
        "Value": {"Fn::GetAtt": [key_id, "Arn"]},
        "Export": {"Name": "Tollgate-dev-Data:DocumentsKeyArn"},
    }


@pytest.mark.parametrize("consumer", ["api_template", "pipeline_template", "worker_template"])
def test_consumers_import_the_documents_bucket_and_never_rebuild_its_name(
    consumer: str, data_template: Template, request: pytest.FixtureRequest
) -> None:
    """With an import, CloudFormation refuses to replace or remove the bucket's export while a stack uses it;
    a name rebuilt from the stage would go on pointing at whatever bucket has that name."""
    template: Template = request.getfixturevalue(consumer)
    bucket_id, _ = _documents_bucket(data_template)
    (key_id,) = resources(data_template, "AWS::KMS::Key")

    assert {export_of(data_template, bucket_id), export_of(data_template, key_id)} <= imports(template)
    assert "-documents-" not in json.dumps(template)
