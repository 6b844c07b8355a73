"""The low-idle shape, as cdk.json's dev stage configures it: no interface endpoints and no RDS Proxy, Aurora at
0 ACU with auto-pause, workers that scale to zero and start on a waiting message, ticks far enough apart for
the cluster to pause. Synthesized once per session with cdk-nag on (stage_templates); the session's main synth
checks the normal shape."""

from __future__ import annotations

from typing import Any

import pytest

from stacks.config import (
    IDLE_SESSION_TIMEOUT_SECONDS,
    RESUMING_DATABASE_WAIT_SECONDS,
    WORKER_COLD_START_SECONDS,
    StageConfig,
)
from tests.infrastructure.cfn import local_id, only, resources, subnet_groups, type_queues
from tests.infrastructure.synth import StageTemplates

pytestmark = pytest.mark.infrastructure

Template = dict[str, Any]


@pytest.fixture(scope="module")
def low_idle(stage_templates: StageTemplates) -> tuple[StageConfig, dict[str, Template]]:
    """Dev as cdk.json has it; stack concern ("Data", "Worker", ...) -> template."""
    return stage_templates("dev")


def _all(templates: dict[str, Template], resource_type: str) -> list[dict[str, Any]]:
    return [
        resource
        for template in templates.values()
        for resource in resources(template, resource_type).values()
    ]


def _database_functions(templates: dict[str, Template]) -> list[tuple[str, dict[str, Any]]]:
    """(stack concern, function) for every Lambda that connects to PostgreSQL."""
    return [
        (concern, function)
        for concern, template in templates.items()
        for function in resources(template, "AWS::Lambda::Function").values()
        if "DATABASE_HOST" in function["Properties"].get("Environment", {}).get("Variables", {})
    ]


def test_dev_is_the_low_idle_stage(low_idle: tuple[StageConfig, dict[str, Template]]) -> None:
    config, _ = low_idle

    assert config.stage == "dev" and config.auto_pause
    assert not config.database_proxy and not config.interface_endpoints


def test_there_is_no_interface_endpoint_and_the_free_gateway_endpoints_stay(
    low_idle: tuple[StageConfig, dict[str, Template]],
) -> None:
    _, templates = low_idle
    endpoints = _all(templates, "AWS::EC2::VPCEndpoint")

    assert [e for e in endpoints if e["Properties"].get("VpcEndpointType") == "Interface"] == []
    services = sorted(render_service(e["Properties"]["ServiceName"]) for e in endpoints)
    assert services == ["dynamodb", "s3"]


def render_service(name: Any) -> str:
    """``com.amazonaws.<region>.s3`` as a Fn::Join -> ``s3``."""
    _, parts = name["Fn::Join"]
    return str(parts[-1]).rsplit(".", 1)[-1]


def test_there_is_no_rds_proxy(low_idle: tuple[StageConfig, dict[str, Template]]) -> None:
    _, templates = low_idle

    assert _all(templates, "AWS::RDS::DBProxy") == []
    assert _all(templates, "AWS::RDS::DBProxyTargetGroup") == []


def test_aurora_scales_to_zero_and_pauses_and_closes_idle_sessions(
    low_idle: tuple[StageConfig, dict[str, Template]],
) -> None:
    config, templates = low_idle
    _, cluster = only(templates["Data"], "AWS::RDS::DBCluster")
    _, parameters = only(templates["Data"], "AWS::RDS::DBClusterParameterGroup")

    assert cluster["Properties"]["ServerlessV2ScalingConfiguration"] == {
        "MinCapacity": 0,
        "MaxCapacity": config.aurora_max_acu,
        "SecondsUntilAutoPause": config.aurora_auto_pause_seconds,
    }
    # Otherwise a warm Lambda's pooled connection keeps the cluster awake for as long as the Lambda lives.
    assert parameters["Properties"]["Parameters"]["idle_session_timeout"] == str(
        IDLE_SESSION_TIMEOUT_SECONDS * 1000
    )
    assert parameters["Properties"]["Parameters"]["rds.force_ssl"] == "1"


def test_every_database_client_connects_to_the_writer_and_waits_out_a_resume(
    low_idle: tuple[StageConfig, dict[str, Template]],
) -> None:
    _, templates = low_idle
    data = templates["Data"]
    cluster_id, _ = only(data, "AWS::RDS::DBCluster")
    functions = _database_functions(templates)
    containers = [
        {v["Name"]: v["Value"] for v in task["Properties"]["ContainerDefinitions"][0]["Environment"]}
        for task in resources(templates["Worker"], "AWS::ECS::TaskDefinition").values()
    ]

    # api, authorizer, relay, scheduler, webhook attempt, migrations, operations, and the WebSocket API's
    # authorizer, route Lambda and notifier
    assert {concern for concern, _ in functions} == {
        "Api",
        "Pipeline",
        "Delivery",
        "Data",
        "Ops",
        "Notifications",
    }
    assert len(functions) == 10
    environments = [f["Properties"]["Environment"]["Variables"] for _, f in functions] + containers
    for environment in environments:
        host = environment["DATABASE_HOST"]
        assert host == {"Fn::GetAtt": [cluster_id, "Endpoint.Address"]} or local_id(host, data) == cluster_id
        assert environment["DATABASE_WAIT_SECONDS"] == str(RESUMING_DATABASE_WAIT_SECONDS)


def test_the_authorizer_outlasts_a_resume(low_idle: tuple[StageConfig, dict[str, Template]]) -> None:
    _, templates = low_idle
    _, authorizer = only(
        templates["Api"], "AWS::Lambda::Function", Handler="functions.authorizer.handler.lambda_handler"
    )

    assert authorizer["Properties"]["Timeout"] > RESUMING_DATABASE_WAIT_SECONDS


def test_database_clients_reach_the_cluster_directly(
    low_idle: tuple[StageConfig, dict[str, Template]],
) -> None:
    _, templates = low_idle
    data = templates["Data"]
    (clients,) = [g for g in resources(data, "AWS::EC2::SecurityGroup") if g.startswith("DatabaseClients")]
    _, cluster = only(data, "AWS::RDS::DBCluster")
    (cluster_group,) = [g["Fn::GetAtt"][0] for g in cluster["Properties"]["VpcSecurityGroupIds"]]

    ingress = [
        rule["Properties"]
        for rule in resources(data, "AWS::EC2::SecurityGroupIngress").values()
        if rule["Properties"]["GroupId"] == {"Fn::GetAtt": [cluster_group, "GroupId"]}
        and rule["Properties"].get("SourceSecurityGroupId") == {"Fn::GetAtt": [clients, "GroupId"]}
    ]
    egress = [
        rule["Properties"]
        for rule in resources(data, "AWS::EC2::SecurityGroupEgress").values()
        if rule["Properties"]["GroupId"] == {"Fn::GetAtt": [clients, "GroupId"]}
    ]

    assert [(rule["FromPort"], rule["ToPort"]) for rule in ingress] == [(5432, 5432)]
    assert [(rule["DestinationSecurityGroupId"], rule["FromPort"]) for rule in egress] == [
        ({"Fn::GetAtt": [cluster_group, "GroupId"]}, 5432)
    ]


def test_every_lambda_in_the_vpc_runs_behind_nat(low_idle: tuple[StageConfig, dict[str, Template]]) -> None:
    """Without interface endpoints the isolated subnets lead nowhere: a Lambda there could not read its
    database secret."""
    _, templates = low_idle
    data = templates["Data"]
    groups = subnet_groups(data)
    in_vpc = [
        function
        for template in templates.values()
        for function in resources(template, "AWS::Lambda::Function").values()
        if "VpcConfig" in function["Properties"]
    ]

    assert len(in_vpc) == 10
    for function in in_vpc:
        subnets = {
            groups[local_id(subnet, data)] for subnet in function["Properties"]["VpcConfig"]["SubnetIds"]
        }
        assert subnets == {"egress"}


def test_the_worker_scales_to_zero_and_starts_on_a_waiting_message(
    low_idle: tuple[StageConfig, dict[str, Template]],
) -> None:
    _, templates = low_idle
    worker = templates["Worker"]
    target_id, target = only(worker, "AWS::ApplicationAutoScaling::ScalableTarget")
    (service,) = resources(worker, "AWS::ECS::Service").values()
    policies = {
        policy_id: policy["Properties"]
        for policy_id, policy in resources(worker, "AWS::ApplicationAutoScaling::ScalingPolicy").items()
        if policy["Properties"]["ScalingTargetId"] == {"Ref": target_id}
    }
    alarms = {
        action["Ref"]: alarm["Properties"]
        for alarm in resources(worker, "AWS::CloudWatch::Alarm").values()
        for action in alarm["Properties"]["AlarmActions"]
    }
    (from_zero,) = [
        policy_id for policy_id in policies if policy_id.startswith("ServiceTaskCountTargetScaleOutFromZero")
    ]
    alarm = alarms[from_zero]
    queue_metrics = [m for m in alarm["Metrics"] if "MetricStat" in m]

    assert target["Properties"]["MinCapacity"] == 0
    assert service["Properties"]["DesiredCount"] == 0
    # SQS's own depth metric, which exists while no task runs, for every job type's queue.
    assert {m["MetricStat"]["Metric"]["MetricName"] for m in queue_metrics} == {
        "ApproximateNumberOfMessagesVisible"
    }
    assert len(queue_metrics) == len(type_queues(templates["Pipeline"]))
    assert alarm["ComparisonOperator"] == "GreaterThanOrEqualToThreshold" and alarm["Threshold"] == 1
    steps = policies[from_zero]["StepScalingPolicyConfiguration"]["StepAdjustments"]
    assert {"MetricIntervalLowerBound": 0, "ScalingAdjustment": 1} in steps


def test_the_last_task_stops_only_when_no_job_runs(low_idle: tuple[StageConfig, dict[str, Template]]) -> None:
    _, templates = low_idle
    worker = templates["Worker"]
    (idle,) = [
        alarm["Properties"]
        for alarm in resources(worker, "AWS::CloudWatch::Alarm").values()
        if alarm["Properties"].get("ComparisonOperator") == "LessThanOrEqualToThreshold"
    ]

    (expression,) = [m["Expression"] for m in idle["Metrics"] if "Expression" in m]
    names = {m["MetricStat"]["Metric"]["MetricName"] for m in idle["Metrics"] if "MetricStat" in m}

    assert expression == "runnable + running"
    assert names == {"RunnableJobs", "RunningJobs"}
    assert idle["Threshold"] == 0


def test_the_queue_age_alarm_allows_a_worker_to_start(
    low_idle: tuple[StageConfig, dict[str, Template]],
) -> None:
    _, templates = low_idle
    queue_ages = [
        alarm["Properties"]
        for alarm in resources(templates["Observability"], "AWS::CloudWatch::Alarm").values()
        if alarm["Properties"].get("MetricName") == "ApproximateAgeOfOldestMessage"
    ]

    assert queue_ages
    assert all(alarm["Threshold"] >= WORKER_COLD_START_SECONDS for alarm in queue_ages)


def test_ticks_and_the_gauges_built_on_them_share_the_stages_period(
    low_idle: tuple[StageConfig, dict[str, Template]],
) -> None:
    config, templates = low_idle
    rules = [
        rule["Properties"]["ScheduleExpression"]
        for rule in resources(templates["Pipeline"], "AWS::Events::Rule").values()
        if "ScheduleExpression" in rule["Properties"]
    ]
    gauge_periods = {
        alarm["Properties"]["Period"]
        for template in (templates["Observability"], templates["Worker"])
        for alarm in resources(template, "AWS::CloudWatch::Alarm").values()
        if {"Name": "service", "Value": "tollgate-scheduler"} in alarm["Properties"].get("Dimensions", [])
    }

    # The same minutes of the hour for both, so they wake the cluster once per period, not twice.
    assert rules == [f"cron(0/{config.tick_minutes} * * * ? *)"] * 2
    assert gauge_periods == {config.tick_minutes * 60}
    assert config.tick_minutes * 60 > config.database_awake_after_tick_seconds
