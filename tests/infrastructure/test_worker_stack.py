"""WorkerStack's template and image: an ARM64 Fargate service in the egress subnets (out through NAT, with no
public IP), a non-root image built from an allow-listed context, the OpenAI key injected as a secret, a
graceful stop, least-privilege roles, and scaling on the scheduler's backlog metrics."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest

from layers.database_ca import LAYER_RELATIVE_PATH
from stacks.config import REPO_ROOT, StageConfig
from stacks.worker_stack import DOCKERFILE
from tests.infrastructure.cfn import (
    as_list,
    export_of,
    local_id,
    only,
    policy_statements,
    references,
    resources,
    routes_of_subnet,
    subnet_groups,
    type_queues,
    with_stand_ins,
)
from tests.infrastructure.synth import Synthesized
from tests.layout import missing_imports, tree_bytes
from tollgate.jobtypes.registry import JOB_TYPES

pytestmark = pytest.mark.infrastructure

Template = dict[str, Any]

# What the image needs from the repository, and nothing else: of build/, only the database CA bundle that
# layers/build.py writes (absent until it has run, as in this suite).
IMAGE_CONTEXT = {"pyproject.toml", "uv.lock", "tollgate", "worker", "migrations", "build"}
DATABASE_CA_FILE = Path("build/layer/python") / LAYER_RELATIVE_PATH


def _container(template: Template) -> dict[str, Any]:
    _, task = only(template, "AWS::ECS::TaskDefinition")
    (container,) = task["Properties"]["ContainerDefinitions"]
    definition: dict[str, Any] = container
    return definition


def _dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of worker/Dockerfile, with continuation lines joined and comments dropped."""
    text = (REPO_ROOT / DOCKERFILE).read_text()
    joined = re.sub(r"\\\n", " ", text)
    instructions = []
    for line in joined.splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            keyword, _, arguments = stripped.partition(" ")
            instructions.append((keyword.upper(), arguments.strip()))
    return instructions


def _final_stage(instructions: list[tuple[str, str]]) -> list[tuple[str, str]]:
    last_from = max(index for index, (keyword, _) in enumerate(instructions) if keyword == "FROM")
    return instructions[last_from:]


def test_cluster_has_container_insights(worker_template: Template) -> None:
    _, cluster = only(worker_template, "AWS::ECS::Cluster")

    assert {"Name": "containerInsights", "Value": "enabled"} in cluster["Properties"]["ClusterSettings"]


def test_task_runs_on_fargate_arm64_with_the_stage_size(
    worker_template: Template, config: StageConfig
) -> None:
    _, task = only(worker_template, "AWS::ECS::TaskDefinition")
    properties = task["Properties"]

    assert properties["RuntimePlatform"] == {"CpuArchitecture": "ARM64", "OperatingSystemFamily": "LINUX"}
    assert properties["RequiresCompatibilities"] == ["FARGATE"]
    assert properties["NetworkMode"] == "awsvpc"
    assert properties["Cpu"] == str(config.worker_cpu)
    assert properties["Memory"] == str(config.worker_memory_mib)


def test_image_is_built_for_arm64_from_the_allow_listed_context(
    synthesized: Synthesized, worker_template: Template
) -> None:
    manifest = json.loads(
        (synthesized.outdir / f"{synthesized.worker_stack.artifact_id}.assets.json").read_text()
    )
    ((asset_hash, image),) = manifest["dockerImages"].items()
    staged = synthesized.outdir / image["source"]["directory"]
    entries = {path.name for path in staged.iterdir()}

    assert image["source"]["platform"] == "linux/arm64"
    assert image["source"]["dockerFile"] == DOCKERFILE
    assert asset_hash in json.dumps(_container(worker_template)["Image"])
    # .dockerignore itself is kept by CDK; everything else must be on the allow-list.
    assert entries - {".dockerignore"} - {"build"} == IMAGE_CONTEXT - {"build"}
    built = [path.relative_to(staged) for path in (staged / "build").rglob("*") if path.is_file()]
    assert built in ([], [DATABASE_CA_FILE])
    assert not list(staged.rglob("__pycache__"))
    assert (staged / "tollgate" / "settings.py").is_file() and (staged / "worker" / "main.py").is_file()


def test_image_runs_the_worker_without_the_development_package(synthesized: Synthesized) -> None:
    """The build context has no harness module, and everything the worker entrypoint imports is in it."""
    manifest = json.loads(
        (synthesized.outdir / f"{synthesized.worker_stack.artifact_id}.assets.json").read_text()
    )
    ((_, image),) = manifest["dockerImages"].items()
    staged = synthesized.outdir / image["source"]["directory"]

    assert not (staged / "tollgate_dev").exists()
    assert "tollgate_dev" not in IMAGE_CONTEXT
    assert missing_imports(staged, [staged / "worker" / "main.py"]) == {}
    assert tree_bytes(staged / "tollgate") == tree_bytes(REPO_ROOT / "tollgate")


def test_dockerfile_copies_only_what_the_context_admits() -> None:
    sources = {
        Path(part).parts[0]
        for keyword, arguments in _dockerfile_instructions()
        if keyword == "COPY" and "--from=" not in arguments
        for part in shlex.split(arguments)[:-1]
        if not part.startswith("--")
    }

    assert sources <= IMAGE_CONTEXT


def test_dockerfile_installs_locked_runtime_dependencies_only() -> None:
    runs = [arguments for keyword, arguments in _dockerfile_instructions() if keyword == "RUN"]
    (sync,) = [run for run in runs if "uv sync" in run]

    assert "--frozen" in sync
    assert "--no-default-groups" in sync
    assert "--extra" not in sync and "--all-groups" not in sync


def test_dockerfile_runs_the_worker_on_python_3_13_slim_as_a_non_root_user() -> None:
    instructions = _dockerfile_instructions()
    final = _final_stage(instructions)
    users = [arguments for keyword, arguments in final if keyword == "USER"]
    (cmd,) = [arguments for keyword, arguments in final if keyword == "CMD"]
    default_image = next(
        arguments.split("=", 1)[1]
        for keyword, arguments in instructions
        if keyword == "ARG" and "PYTHON_IMAGE" in arguments
    )

    assert default_image.startswith("python:3.13-slim")
    assert users, "the final stage must switch away from root"
    user, _, group = users[-1].partition(":")
    assert user not in {"root", "0"} and group not in {"root", "0"}
    assert json.loads(cmd) == ["python", "-m", "worker.main"]


def test_container_stops_gracefully(worker_template: Template) -> None:
    container = _container(worker_template)

    assert container["StopTimeout"] == 120
    assert container["LinuxParameters"]["InitProcessEnabled"] is True
    assert container["Essential"] is True


def test_openai_key_is_an_ecs_secret_not_an_environment_variable(worker_template: Template) -> None:
    container = _container(worker_template)
    secret_id, secret = only(worker_template, "AWS::SecretsManager::Secret")

    assert container["Secrets"] == [{"Name": "OPENAI_API_KEY", "ValueFrom": {"Ref": secret_id}}]
    assert "OPENAI_API_KEY" not in {variable["Name"] for variable in container["Environment"]}
    # Created by the stack, filled by the operator; the output tells them where.
    assert secret["Properties"]["Name"] == "tollgate/dev/openai-api-key"
    assert "SecretString" not in secret["Properties"]
    assert worker_template["Outputs"]["OpenAiApiKeySecretName"]["Value"] == "tollgate/dev/openai-api-key"


def test_only_the_execution_role_reads_the_openai_key(worker_template: Template) -> None:
    secret_id, _ = only(worker_template, "AWS::SecretsManager::Secret")
    _, task = only(worker_template, "AWS::ECS::TaskDefinition")
    execution_role = task["Properties"]["ExecutionRoleArn"]["Fn::GetAtt"][0]

    readers = {
        role["Ref"]
        for policy in resources(worker_template, "AWS::IAM::Policy").values()
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
        if references(statement["Resource"], secret_id)
        for role in policy["Properties"]["Roles"]
    }

    assert readers == {execution_role}


def test_logs_go_to_a_log_group_with_retention(worker_template: Template) -> None:
    logging = _container(worker_template)["LogConfiguration"]
    group_id = logging["Options"]["awslogs-group"]["Ref"]
    group = resources(worker_template, "AWS::Logs::LogGroup")[group_id]

    assert logging["LogDriver"] == "awslogs"
    assert logging["Options"]["mode"] == "non-blocking"
    # dev keeps TWO_WEEKS (cdk.json); the default group would keep logs forever.
    assert group["Properties"]["RetentionInDays"] == 14


def _service_network(worker_template: Template) -> dict[str, Any]:
    _, service = only(worker_template, "AWS::ECS::Service")
    network: dict[str, Any] = service["Properties"]["NetworkConfiguration"]["AwsvpcConfiguration"]
    return network


def test_service_runs_in_the_egress_subnets_of_every_az(
    worker_template: Template, data_template: Template, config: StageConfig
) -> None:
    groups = subnet_groups(data_template)

    subnets = [local_id(subnet, data_template) for subnet in _service_network(worker_template)["Subnets"]]

    assert sorted(subnets) == sorted(subnet for subnet, group in groups.items() if group == "egress")
    assert len(subnets) == config.max_azs


def test_service_reaches_the_internet_only_through_nat(
    worker_template: Template, data_template: Template
) -> None:
    """The LLM provider is a public API: the tasks' subnets route out through a NAT gateway, and the tasks
    themselves get no public address, so nothing on the internet can connect to them."""
    nat_gateways = resources(data_template, "AWS::EC2::NatGateway")
    network = _service_network(worker_template)

    assert network["AssignPublicIp"] == "DISABLED"
    for subnet in network["Subnets"]:
        (route,) = routes_of_subnet(data_template, local_id(subnet, data_template))
        assert route["DestinationCidrBlock"] == "0.0.0.0/0"
        assert route["NatGatewayId"]["Ref"] in nat_gateways
        assert "GatewayId" not in route


def test_service_joins_the_database_clients_and_deploys_without_a_gap(
    worker_template: Template, config: StageConfig
) -> None:
    _, service = only(worker_template, "AWS::ECS::Service")
    network = service["Properties"]["NetworkConfiguration"]["AwsvpcConfiguration"]
    deployment = service["Properties"]["DeploymentConfiguration"]

    assert service["Properties"]["LaunchType"] == "FARGATE"
    # The group that RDS Proxy and the VPC endpoints admit.
    (group,) = network["SecurityGroups"]
    assert "DatabaseClients" in json.dumps(group)
    assert deployment["DeploymentCircuitBreaker"] == {"Enable": True, "Rollback": True}
    assert deployment["MinimumHealthyPercent"] == 100
    assert service["Properties"]["DesiredCount"] == config.worker_min_tasks
    assert service["Properties"]["EnableExecuteCommand"] is False


def _actions_of(template: Template, role_id: str) -> dict[str, list[Any]]:
    granted: dict[str, list[Any]] = {}
    for policy in resources(template, "AWS::IAM::Policy").values():
        if {"Ref": role_id} in policy["Properties"]["Roles"]:
            for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
                for action in as_list(statement["Action"]):
                    granted.setdefault(action, []).extend(as_list(statement["Resource"]))
    return granted


def test_task_role_consumes_every_types_queue_and_reads_documents_only(
    worker_template: Template, pipeline_template: Template, data_template: Template
) -> None:
    _, task = only(worker_template, "AWS::ECS::TaskDefinition")
    granted = _actions_of(worker_template, task["Properties"]["TaskRoleArn"]["Fn::GetAtt"][0])
    queues = {queue for queue, _ in type_queues(pipeline_template).values()}

    for action in ("sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:ChangeMessageVisibility"):
        consumed = [local_id(arn, pipeline_template) for arn in granted[action]]
        assert sorted(consumed) == sorted(queues), f"{action}: each type's queue, never a DLQ"
    assert "sqs:SendMessage" not in granted
    assert {"s3:GetObject*", "kms:Decrypt", "secretsmanager:GetSecretValue"} <= granted.keys()
    assert not [action for action in granted if action.startswith(("s3:Put", "s3:Delete", "kms:Encrypt"))]
    (bucket_id,) = [
        logical_id
        for logical_id, bucket in resources(data_template, "AWS::S3::Bucket").items()
        if "BucketName" in bucket["Properties"]
    ]
    documents = {"Fn::ImportValue": export_of(data_template, bucket_id)}
    assert all(
        json.dumps(documents) in json.dumps(granted[action]) for action in granted if action.startswith("s3:")
    )


def test_no_permission_on_every_resource_except_the_ecr_token(worker_template: Template) -> None:
    for policy_id, statement in policy_statements(worker_template):
        if statement["Effect"] == "Allow" and "*" in as_list(statement["Resource"]):
            assert as_list(statement["Action"]) == ["ecr:GetAuthorizationToken"], policy_id


def test_environment_points_at_every_types_queue_and_the_proxy(
    worker_template: Template, pipeline_template: Template
) -> None:
    environment = {
        variable["Name"]: variable["Value"] for variable in _container(worker_template)["Environment"]
    }
    _, parts = environment["JOB_QUEUE_URLS"]["Fn::Join"]
    named = {local_id(part, pipeline_template) for part in parts if not isinstance(part, str)}

    assert named == {queue for queue, _ in type_queues(pipeline_template).values()}
    assert set(json.loads(with_stand_ins(environment["JOB_QUEUE_URLS"]))) == set(JOB_TYPES)
    assert "DatabaseProxy" in json.dumps(environment["DATABASE_HOST"])
    assert int(environment["DATABASE_POOL_SIZE"]) > int(environment["EXECUTION_SLOTS"])


def _scaling_alarms(template: Template) -> dict[str, list[dict[str, Any]]]:
    """Metric name -> the alarms that drive a scaling policy of the worker's scalable target."""
    target_id, _ = only(template, "AWS::ApplicationAutoScaling::ScalableTarget")
    policies = {
        policy_id
        for policy_id, policy in resources(template, "AWS::ApplicationAutoScaling::ScalingPolicy").items()
        if policy["Properties"]["ScalingTargetId"] == {"Ref": target_id}
    }
    alarms: dict[str, list[dict[str, Any]]] = {}
    for alarm in resources(template, "AWS::CloudWatch::Alarm").values():
        actions = {action["Ref"] for action in alarm["Properties"].get("AlarmActions", [])}
        if actions & policies:
            alarms.setdefault(alarm["Properties"]["MetricName"], []).append(alarm["Properties"])
    return alarms


def test_scaling_bounds_come_from_the_stage(worker_template: Template, config: StageConfig) -> None:
    _, target = only(worker_template, "AWS::ApplicationAutoScaling::ScalableTarget")

    assert target["Properties"]["MinCapacity"] == config.worker_min_tasks
    assert target["Properties"]["MaxCapacity"] == config.worker_max_tasks
    assert target["Properties"]["ScalableDimension"] == "ecs:service:DesiredCount"


def test_scaling_follows_the_schedulers_backlog_metrics(
    worker_template: Template, config: StageConfig
) -> None:
    alarms = _scaling_alarms(worker_template)

    assert set(alarms) == {"RunnableJobs", "OldestEligibleJobAge"}
    for alarm in (alarm for group in alarms.values() for alarm in group):
        assert alarm["Namespace"] == "Tollgate"
        assert alarm["Dimensions"] == [{"Name": "service", "Value": "tollgate-scheduler"}]
    backlog = {alarm["ComparisonOperator"]: alarm["Threshold"] for alarm in alarms["RunnableJobs"]}
    # Out when the backlog is large, in only when nothing is runnable.
    assert backlog == {
        "GreaterThanOrEqualToThreshold": config.worker_scale_out_runnable_jobs,
        "LessThanOrEqualToThreshold": 0,
    }
    (age,) = alarms["OldestEligibleJobAge"]
    assert age["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"
    assert age["Threshold"] == config.worker_scale_out_job_age_seconds


def test_scale_in_waits_longer_than_scale_out(worker_template: Template) -> None:
    alarms = _scaling_alarms(worker_template)
    periods = {alarm["ComparisonOperator"]: alarm["EvaluationPeriods"] for alarm in alarms["RunnableJobs"]}

    assert periods["LessThanOrEqualToThreshold"] > periods["GreaterThanOrEqualToThreshold"]


def test_the_provider_budget_table_is_shared_by_every_task(worker_template):
    from tests.infrastructure.cfn import only

    _, table = only(worker_template, "AWS::DynamoDB::Table")
    props = table["Properties"]
    assert props["BillingMode"] == "PAY_PER_REQUEST"
    assert props["KeySchema"] == [{"AttributeName": "pk", "KeyType": "HASH"}]
    assert props["TimeToLiveSpecification"] == {"AttributeName": "expires_at", "Enabled": True}
    assert props["PointInTimeRecoverySpecification"]["PointInTimeRecoveryEnabled"] is True
    _, task = only(worker_template, "AWS::ECS::TaskDefinition")
    environment = {
        v["Name"]: v["Value"] for v in task["Properties"]["ContainerDefinitions"][0]["Environment"]
    }
    assert "LIMITER_TABLE" in environment


def test_the_provider_pools_structured_output_comes_from_the_stage(
    worker_template: Template, config: StageConfig
) -> None:
    environment = {
        variable["Name"]: variable["Value"] for variable in _container(worker_template)["Environment"]
    }

    assert environment["PROVIDER_STRUCTURED_OUTPUT"] == config.worker.provider_structured_output.value
