"""The idle cost counting behind README.md's cost table, on small hand-written templates."""

from __future__ import annotations

from typing import Any

import pytest

from stacks.constructs.database_wakes import METADATA_KEY, WHILE_CLIENTS_CONNECTED
from tollgate_dev.costs import (
    END,
    START,
    CostLine,
    _cron_seconds,
    _rate_seconds,
    _replace,
    cost_table,
    idle_costs,
    shortest_schedule_seconds,
    table_drift,
    total,
    wake_intervals,
)

HOURS = 730


def _template(**resources: dict[str, Any]) -> dict[str, Any]:
    return {"Resources": resources}


def _by_item(lines: list[CostLine]) -> dict[str, float]:
    found: dict[str, float] = {}
    for line in lines:
        found[line.item] = found.get(line.item, 0.0) + line.monthly_usd
    return found


def _cluster(
    min_acu: float, *, pause: int | None = None, idle_timeout_ms: int | None = None
) -> dict[str, Any]:
    scaling: dict[str, Any] = {"MinCapacity": min_acu, "MaxCapacity": 4}
    if pause is not None:
        scaling["SecondsUntilAutoPause"] = pause
    parameters = {"rds.force_ssl": "1"}
    if idle_timeout_ms is not None:
        parameters["idle_session_timeout"] = str(idle_timeout_ms)
    return {
        "Params": {"Type": "AWS::RDS::DBClusterParameterGroup", "Properties": {"Parameters": parameters}},
        "Db": {
            "Type": "AWS::RDS::DBCluster",
            "Properties": {
                "ServerlessV2ScalingConfiguration": scaling,
                "DBClusterParameterGroupName": {"Ref": "Params"},
            },
        },
        "Writer": {
            "Type": "AWS::RDS::DBInstance",
            "Properties": {"DBClusterIdentifier": {"Ref": "Db"}, "DBInstanceClass": "db.serverless"},
        },
    }


def _rule(rate: str) -> dict[str, Any]:
    return {"Type": "AWS::Events::Rule", "Properties": {"ScheduleExpression": rate}}


def test_an_always_on_shape_is_counted_by_type_and_property() -> None:
    """Given endpoints, NAT, proxy, a 0.5-ACU cluster, a worker service, alarms, a key, a secret and a web ACL,
    when counted, then each is priced from what the template says, not from a list of what to expect."""
    network = _template(
        Sqs={
            "Type": "AWS::EC2::VPCEndpoint",
            "Properties": {"VpcEndpointType": "Interface", "SubnetIds": ["a", "b"]},
        },
        Logs={
            "Type": "AWS::EC2::VPCEndpoint",
            "Properties": {"VpcEndpointType": "Interface", "SubnetIds": ["a", "b", "c"]},
        },
        S3={"Type": "AWS::EC2::VPCEndpoint", "Properties": {"VpcEndpointType": "Gateway"}},
        Nat={"Type": "AWS::EC2::NatGateway", "Properties": {}},
        Ip={"Type": "AWS::EC2::EIP", "Properties": {}},
        Proxy={"Type": "AWS::RDS::DBProxy", "Properties": {}},
        Key={"Type": "AWS::KMS::Key", "Properties": {}},
        Secret={"Type": "AWS::SecretsManager::Secret", "Properties": {}},
        **_cluster(0.5),
    )
    compute = _template(
        Task={
            "Type": "AWS::ECS::TaskDefinition",
            "Properties": {"Cpu": "512", "Memory": "1024", "RuntimePlatform": {"CpuArchitecture": "ARM64"}},
        },
        Service={
            "Type": "AWS::ECS::Service",
            "Properties": {"DesiredCount": 1, "TaskDefinition": {"Ref": "Task"}},
        },
        Target={
            "Type": "AWS::ApplicationAutoScaling::ScalableTarget",
            "Properties": {
                "MinCapacity": 2,
                "ResourceId": {"Fn::Join": ["", ["service/", {"Fn::GetAtt": ["Service", "Name"]}]]},
            },
        },
        Plain={"Type": "AWS::CloudWatch::Alarm", "Properties": {"MetricName": "Errors", "Period": 60}},
        Math={
            "Type": "AWS::CloudWatch::Alarm",
            "Properties": {
                "Metrics": [
                    {"Id": "e", "Expression": "a + b + c"},
                    *({"Id": name, "MetricStat": {"Period": 60}} for name in "abc"),
                ]
            },
        },
        Acl={"Type": "AWS::WAFv2::WebACL", "Properties": {"Rules": [{}, {}]}},
    )

    costs = _by_item(idle_costs([network, compute]))

    assert costs["Interface VPC endpoints"] == pytest.approx(5 * 0.01 * HOURS)
    assert costs["NAT gateways"] == pytest.approx(0.045 * HOURS)
    assert costs["Public IPv4 addresses"] == pytest.approx(0.005 * HOURS)
    # The proxy bills its 8-ACU minimum for a cluster idling at 0.5 ACU.
    assert costs["RDS Proxy"] == pytest.approx(8 * 0.015 * HOURS)
    assert costs["Aurora Serverless v2 capacity"] == pytest.approx(0.5 * 0.12 * HOURS)
    # The scaling minimum (2), not the service's DesiredCount (1).
    assert costs["Fargate tasks at the scaling minimum"] == pytest.approx(
        2 * (0.5 * 0.03238 + 1 * 0.00356) * HOURS
    )
    # Metric math bills each metric it reads: 1 + 3.
    assert costs["CloudWatch alarms"] == pytest.approx(4 * 0.10)
    assert costs["KMS keys"] == 1.0 and costs["Secrets Manager secrets"] == 0.4
    assert costs["WAF web ACLs"] == pytest.approx(5 + 2 * 1)


def test_a_pausing_cluster_is_awake_after_each_tick_for_the_idle_timeout_and_the_pause_delay() -> None:
    aligned = _template(
        **_cluster(0, pause=300, idle_timeout_ms=60_000),
        Sweep=_rule("cron(0/30 * * * ? *)"),
        Tick=_rule("cron(0/30 * * * ? *)"),
    )
    unaligned = _template(
        **_cluster(0, pause=300, idle_timeout_ms=60_000),
        Sweep=_rule("rate(30 minutes)"),
        Tick=_rule("rate(30 minutes)"),
    )

    costs = _by_item(idle_costs([aligned]))

    # (60 s run + 60 s idle session + 300 s pause delay) of every 1,800 s, at 0.5 ACU.
    assert costs["Aurora Serverless v2 capacity"] == pytest.approx(420 / 1800 * 0.5 * 0.12 * HOURS)
    # Two rate rules fire at offsets of their own: twice the waking.
    assert _by_item(idle_costs([unaligned]))["Aurora Serverless v2 capacity"] == pytest.approx(
        2 * 420 / 1800 * 0.5 * 0.12 * HOURS
    )
    assert costs["RDS Proxy"] == 0


@pytest.mark.parametrize(
    ("tick", "idle_timeout_ms"),
    [("rate(1 minute)", 60_000), ("cron(0/30 * * * ? *)", None)],
    ids=["ticks-closer-than-the-pause", "pooled-connections-never-closed"],
)
def test_a_cluster_that_cannot_pause_is_counted_at_its_awake_floor(
    tick: str, idle_timeout_ms: int | None
) -> None:
    template = _template(**_cluster(0, pause=300, idle_timeout_ms=idle_timeout_ms), Tick=_rule(tick))

    costs = _by_item(idle_costs([template]))

    assert costs["Aurora Serverless v2 capacity"] == pytest.approx(0.5 * 0.12 * HOURS)


def test_a_rule_that_reaches_the_database_only_while_clients_are_connected_wakes_nothing_idle() -> None:
    """Given a half-hourly tick and a one-minute sweep declared to reach PostgreSQL only while clients are
    connected, when counted idle, then only the tick wakes the cluster; with a client connected all month, the
    sweep does too, at the interval it declares, and the cluster never pauses."""
    sweep = _rule("rate(1 minute)")
    sweep["Metadata"] = {METADATA_KEY: {"Wakes": WHILE_CLIENTS_CONNECTED, "EverySeconds": 120}}
    template = _template(
        **_cluster(0, pause=300, idle_timeout_ms=60_000), Tick=_rule("cron(0/30 * * * ? *)"), Sweep=sweep
    )

    idle = _by_item(idle_costs([template]))
    connected = _by_item(idle_costs([template], clients_connected=True))

    assert wake_intervals([template]) == [1800]
    assert wake_intervals([template], clients_connected=True) == [120, 1800]
    assert idle["Aurora Serverless v2 capacity"] == pytest.approx(420 / 1800 * 0.5 * 0.12 * HOURS)
    assert connected["Aurora Serverless v2 capacity"] == pytest.approx(0.5 * 0.12 * HOURS)


def test_schedules_are_read_as_rates_and_crons_and_the_shortest_counts() -> None:
    templates = [
        _template(A=_rule("rate(2 hours)"), B=_rule("cron(0 3 * * ? *)")),
        _template(
            C=_rule("rate(1 minute)"), D=_rule("cron(*/15 * * * ? *)"), E=_rule("cron(*/15 * * * ? *)")
        ),
    ]

    assert _rate_seconds("rate(1 day)") == 86_400
    assert _rate_seconds("cron(0 3 * * ? *)") is None
    assert _cron_seconds("cron(0/30 * * * ? *)") == 1800
    assert _cron_seconds("cron(5 * * * ? *)") == 3600
    assert _cron_seconds("cron(0 3 * * ? *)") == 86_400
    assert _cron_seconds("cron(0 3 ? * MON *)") is None
    assert wake_intervals(templates) == [60, 900, 7200, 86_400]
    assert shortest_schedule_seconds(templates) == 60
    assert shortest_schedule_seconds([_template()]) is None


def test_the_table_has_a_column_per_stage_a_total_and_the_prices_it_assumed() -> None:
    stages = {
        "dev": [CostLine("NAT gateways", "1", 32.85)],
        "prod": [CostLine("NAT gateways", "2", 65.70), CostLine("RDS Proxy", "1 x 8 ACUs billed", 87.60)],
    }

    table = cost_table(stages, tick_seconds={"dev": 1800, "prod": 60})

    assert table.splitlines()[0] == "| item | dev | prod |"
    assert "| RDS Proxy | $0.00 (none) | $87.60 (1 x 8 ACUs billed) |" in table
    assert f"**${total(stages['prod']):,.2f}**" in table
    assert "$0.045 per NAT gateway and hour" in table and "730 hours a month" in table
    assert "dev: every 30 min, prod: every 1 min" in table


def test_the_table_says_what_a_connected_client_adds_outside_the_idle_total() -> None:
    idle = {"dev": [CostLine("NAT gateways", "1", 32.85), CostLine("Aurora", "awake 23%", 10.22)]}
    connected = {"dev": [CostLine("NAT gateways", "1", 32.85), CostLine("Aurora", "awake 100%", 43.80)]}

    table = cost_table(idle, tick_seconds={"dev": 1800}, connected=connected)

    assert "| **idle total a month** | **$43.07** |" in table
    assert "stays connected (not in the idle total) | +$33.58 (Aurora: $43.80, awake 100%) |" in table


def test_a_readme_table_that_differs_from_the_templates_is_caught_line_by_line() -> None:
    """Given README's table with one wrong figure, when compared with the templates' table, then the drift
    names that line as README has it and as the templates give it; an identical table has no drift."""
    table = cost_table({"dev": [CostLine("NAT gateways", "1", 32.85)]}, tick_seconds={"dev": 1800})
    readme = f"intro\n{START}\n{table}\n{END}\nafter\n"
    planted = readme.replace("$32.85 (1)", "$23.85 (1)")

    assert table_drift(readme, table) == []
    assert table_drift(planted, table) == [
        "-| NAT gateways | $23.85 (1) |",
        "+| NAT gateways | $32.85 (1) |",
    ]
    with pytest.raises(ValueError, match="idle-costs:start"):
        table_drift("no table here", table)


def test_the_readme_table_is_replaced_between_its_markers_only() -> None:
    readme = f"before\n{START}\nold\n{END}\nafter\n"

    assert _replace(readme, "new") == f"before\n{START}\nnew\n{END}\nafter\n"
    with pytest.raises(ValueError, match="marker"):
        _replace("no markers here", "new")
