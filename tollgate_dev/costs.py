"""What each stage costs a month while it does nothing, counted from its synthesized CloudFormation templates.

``idle_costs`` reads templates (resources by type and their properties) and prices what bills by the hour or
the month whether or not a job arrives; ``main`` synthesizes every stage of cdk.json and writes the table into
README.md between its markers (``make costs``); a test of ``make test`` fails when README's table is not what
the templates give (``table_drift``). Usage-priced things (requests, GB, invocations) are listed as not
counted. The prices are us-east-1 list prices; change them here and regenerate.
"""

from __future__ import annotations

import difflib
import json
import re
import sys
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stacks.constructs.database_wakes import METADATA_KEY, WHILE_CLIENTS_CONNECTED

Template = Mapping[str, Any]

HOURS_PER_MONTH = 730
START, END = "<!-- idle-costs:start -->", "<!-- idle-costs:end -->"


@dataclass(frozen=True)
class Price:
    usd: float
    unit: str


# us-east-1 list prices (on-demand, no free tier), as published on the AWS pricing pages.
PRICES = {
    "interface_endpoint": Price(0.01, "per endpoint ENI (one per AZ) and hour"),
    "nat_gateway": Price(0.045, "per NAT gateway and hour (plus $0.045 per GB processed)"),
    "public_ipv4": Price(0.005, "per public IPv4 address and hour (the NAT gateways' Elastic IPs)"),
    "rds_proxy": Price(0.015, "per ACU-hour of the Serverless v2 cluster behind it, at least 8 ACUs"),
    "aurora_acu": Price(
        0.12, "per ACU-hour (Aurora Standard; storage $0.10 per GB-month, I/O $0.20 per million)"
    ),
    "fargate_arm_vcpu": Price(0.03238, "per vCPU-hour (Linux/ARM)"),
    "fargate_arm_gb": Price(0.00356, "per GB-hour (Linux/ARM)"),
    "fargate_x86_vcpu": Price(0.04048, "per vCPU-hour (Linux/x86)"),
    "fargate_x86_gb": Price(0.004445, "per GB-hour (Linux/x86)"),
    "alarm_metric": Price(0.10, "per standard-resolution alarm metric and month (metric math: each metric)"),
    "high_resolution_alarm_metric": Price(0.30, "per high-resolution alarm metric and month"),
    "dashboard": Price(3.00, "per dashboard and month (an account's first three are free; not deducted)"),
    "kms_key": Price(1.00, "per customer-managed KMS key and month"),
    "secret": Price(0.40, "per Secrets Manager secret and month"),
    "web_acl": Price(5.00, "per WAF web ACL and month (plus $0.60 per million requests)"),
    "web_acl_rule": Price(1.00, "per WAF rule and month"),
}

# RDS Proxy bills a Serverless v2 cluster for at least this many ACUs, whatever the cluster's capacity.
PROXY_MINIMUM_ACUS = 8
# The smallest capacity of a Serverless v2 instance that is not paused.
AWAKE_FLOOR_ACUS = 0.5
# Aurora's default pause delay when a cluster has min capacity 0 and names none.
DEFAULT_AUTO_PAUSE_SECONDS = 300
# A scheduled tick's own run, at most: the scheduler's timeout is 55 s.
TICK_RUN_SECONDS = 60

NOT_COUNTED = (
    "Not counted (they scale with use, and an idle stage uses them little): requests and invocations (API "
    "Gateway, Lambda, SQS, EventBridge, Step Functions, DynamoDB on demand), data through NAT and endpoints, "
    "log ingestion and storage ($0.50 per GB ingested), custom metrics ($0.30 each a month while published: "
    "the scheduler's gauges and the services' Powertools metrics), Container Insights, X-Ray, S3 and Aurora "
    "storage and I/O, backups beyond the free allowance, the rotation function's application."
)


@dataclass(frozen=True)
class CostLine:
    """One priced item of a stage: what was counted and what it costs a month."""

    item: str
    detail: str
    monthly_usd: float


def _resources(templates: Iterable[Template]) -> list[tuple[str, dict[str, Any]]]:
    return [
        (logical_id, resource)
        for template in templates
        for logical_id, resource in template.get("Resources", {}).items()
    ]


def _of_type(found: list[tuple[str, dict[str, Any]]], resource_type: str) -> list[tuple[str, dict[str, Any]]]:
    return [(logical_id, resource) for logical_id, resource in found if resource["Type"] == resource_type]


def _properties(resource: Mapping[str, Any]) -> dict[str, Any]:
    properties: dict[str, Any] = resource.get("Properties", {})
    return properties


def references(value: Any, logical_id: str) -> bool:
    """Whether a Ref or Fn::GetAtt anywhere in ``value`` (so also inside Fn::Join and the like) names
    ``logical_id``."""
    if isinstance(value, dict):
        if value.get("Ref") == logical_id:
            return True
        get_att = value.get("Fn::GetAtt")
        if isinstance(get_att, list) and get_att and get_att[0] == logical_id:
            return True
        return any(references(item, logical_id) for item in value.values())
    if isinstance(value, list):
        return any(references(item, logical_id) for item in value)
    return False


def _monthly(hourly_usd: float) -> float:
    return hourly_usd * HOURS_PER_MONTH


def _rate_seconds(expression: str) -> int | None:
    """``rate(15 minutes)`` -> 900; a cron expression or anything else -> None."""
    match = re.fullmatch(r"rate\((\d+) (minute|minutes|hour|hours|day|days)\)", expression.strip())
    if match is None:
        return None
    unit = {"minute": 60, "hour": 3600, "day": 86_400}[match.group(2).rstrip("s")]
    return int(match.group(1)) * unit


def _cron_seconds(expression: str) -> int | None:
    """The interval of a cron expression that repeats within a day: ``cron(0/30 * * * ? *)`` -> 1800, a
    fixed minute of every hour -> 3600, a fixed time of every day -> 86,400; anything else -> None."""
    match = re.fullmatch(r"cron\((\S+) (\S+) \* \* \? \*\)", expression.strip())
    if match is None:
        return None
    minute, hour = match.groups()
    step = re.fullmatch(r"(?:0|\*)/(\d+)", minute)
    if step and hour == "*":
        return int(step.group(1)) * 60
    if minute.isdigit():
        return 3600 if hour == "*" else 86_400 if hour.isdigit() else None
    return None


def wake_intervals(templates: Iterable[Template], *, clients_connected: bool = False) -> list[int]:
    """The app's scheduled wake-ups, as one interval (seconds) per independent schedule. Rules with the same
    cron expression fire together and count once; each rate rule fires at an offset of its own creation
    time, so each counts on its own. A rule declared to reach the database only while clients are connected
    (stacks/constructs/database_wakes.py) counts only with ``clients_connected``, at the interval it
    declares."""
    crons: dict[str, int] = {}
    intervals: list[int] = []
    for _, rule in _of_type(_resources(templates), "AWS::Events::Rule"):
        declared = rule.get("Metadata", {}).get(METADATA_KEY, {})
        if declared.get("Wakes") == WHILE_CLIENTS_CONNECTED:
            if clients_connected:
                intervals.append(int(declared["EverySeconds"]))
            continue
        expression = str(_properties(rule).get("ScheduleExpression", ""))
        rate = _rate_seconds(expression)
        if rate is not None:
            intervals.append(rate)
        cron = _cron_seconds(expression)
        if cron is not None:
            crons[expression] = cron
    return sorted(intervals + list(crons.values()))


def shortest_schedule_seconds(templates: Iterable[Template]) -> int | None:
    """The most frequent scheduled rule of the app: the ticks that connect to the database."""
    intervals = wake_intervals(templates)
    return intervals[0] if intervals else None


def awake_fraction(
    cluster: Mapping[str, Any], templates: list[Template], *, clients_connected: bool = False
) -> float:
    """The share of an idle month a 0-ACU cluster is not paused (``clients_connected``: while a client stays
    connected to the WebSocket API all month).

    After each scheduled wake-up the cluster stays up for the tick's run, while the tick's session lives
    (until PostgreSQL's ``idle_session_timeout`` closes it) and then for the pause delay. Without that
    timeout, warm clients' pooled connections keep it up for as long as they live, so it is counted as never
    pausing.
    """
    found = _resources(templates)
    scaling = _properties(cluster).get("ServerlessV2ScalingConfiguration", {})
    pause = int(scaling.get("SecondsUntilAutoPause", DEFAULT_AUTO_PAUSE_SECONDS))
    group_ref = _properties(cluster).get("DBClusterParameterGroupName")
    idle_timeout_ms = 0
    for logical_id, group in _of_type(found, "AWS::RDS::DBClusterParameterGroup"):
        if group_ref == {"Ref": logical_id}:
            idle_timeout_ms = int(_properties(group).get("Parameters", {}).get("idle_session_timeout", 0))
    if idle_timeout_ms <= 0:
        return 1.0
    awake = TICK_RUN_SECONDS + idle_timeout_ms / 1000 + pause
    intervals = wake_intervals(templates, clients_connected=clients_connected)
    return min(1.0, sum(awake / interval for interval in intervals))


def _aurora(
    found: list[tuple[str, dict[str, Any]]], templates: list[Template], *, clients_connected: bool
) -> tuple[list[CostLine], float]:
    """The clusters' capacity at idle, and the idle ACUs an RDS Proxy in front of them would bill."""
    lines: list[CostLine] = []
    idle_acus_total = 0.0
    instances = _of_type(found, "AWS::RDS::DBInstance")
    for cluster_id, cluster in _of_type(found, "AWS::RDS::DBCluster"):
        scaling = _properties(cluster).get("ServerlessV2ScalingConfiguration")
        if scaling is None:
            continue
        count = sum(
            1
            for _, instance in instances
            if _properties(instance).get("DBInstanceClass") == "db.serverless"
            and references(_properties(instance).get("DBClusterIdentifier"), cluster_id)
        )
        minimum = float(scaling["MinCapacity"])
        if minimum == 0:
            fraction = awake_fraction(cluster, templates, clients_connected=clients_connected)
            acus = count * AWAKE_FLOOR_ACUS * fraction
            detail = (
                f"{count} instance(s) at 0 ACU with auto-pause, awake {fraction:.0%} of the time "
                f"at {AWAKE_FLOOR_ACUS:g} ACU"
            )
        else:
            acus = count * minimum
            detail = f"{count} instance(s) x {minimum:g} ACU minimum"
        idle_acus_total += acus
        lines.append(
            CostLine("Aurora Serverless v2 capacity", detail, _monthly(acus * PRICES["aurora_acu"].usd))
        )
    return lines, idle_acus_total


def _fargate(found: list[tuple[str, dict[str, Any]]]) -> list[CostLine]:
    targets = _of_type(found, "AWS::ApplicationAutoScaling::ScalableTarget")
    task_definitions = dict(_of_type(found, "AWS::ECS::TaskDefinition"))
    lines = []
    for service_id, service in _of_type(found, "AWS::ECS::Service"):
        properties = _properties(service)
        minimums = [
            int(_properties(target)["MinCapacity"])
            for _, target in targets
            if references(_properties(target).get("ResourceId"), service_id)
        ]
        tasks = minimums[0] if minimums else int(properties.get("DesiredCount", 1))
        task = _properties(task_definitions[properties["TaskDefinition"]["Ref"]])
        vcpu = int(task["Cpu"]) / 1024
        gib = int(task["Memory"]) / 1024
        arm = task.get("RuntimePlatform", {}).get("CpuArchitecture") == "ARM64"
        cpu_price, gb_price = (
            (PRICES["fargate_arm_vcpu"], PRICES["fargate_arm_gb"])
            if arm
            else (PRICES["fargate_x86_vcpu"], PRICES["fargate_x86_gb"])
        )
        hourly = tasks * (vcpu * cpu_price.usd + gib * gb_price.usd)
        lines.append(
            CostLine(
                "Fargate tasks at the scaling minimum",
                f"{tasks} x {vcpu:g} vCPU / {gib:g} GB {'ARM' if arm else 'x86'}",
                _monthly(hourly),
            )
        )
    return lines


def _alarm_metrics(alarm: Mapping[str, Any]) -> tuple[int, bool]:
    """How many metrics an alarm is billed for, and whether at high resolution (a period under a minute)."""
    properties = _properties(alarm)
    if "Metrics" in properties:
        stats = [query["MetricStat"] for query in properties["Metrics"] if "MetricStat" in query]
        return len(stats), any(int(stat.get("Period", 60)) < 60 for stat in stats)
    return 1, int(properties.get("Period", 60)) < 60


def idle_costs(templates: Iterable[Template], *, clients_connected: bool = False) -> list[CostLine]:
    """Every item of one stage's templates that bills while the stage does nothing, priced per month
    (``clients_connected``: while it does nothing but keep a live-notification client connected)."""
    templates = list(templates)
    found = _resources(templates)
    lines: list[CostLine] = []

    interface_enis = sum(
        len(_properties(endpoint).get("SubnetIds", []))
        for _, endpoint in _of_type(found, "AWS::EC2::VPCEndpoint")
        if _properties(endpoint).get("VpcEndpointType") == "Interface"
    )
    endpoints = sum(
        1
        for _, endpoint in _of_type(found, "AWS::EC2::VPCEndpoint")
        if _properties(endpoint).get("VpcEndpointType") == "Interface"
    )
    lines.append(
        CostLine(
            "Interface VPC endpoints",
            f"{endpoints} endpoints, {interface_enis} ENIs",
            _monthly(interface_enis * PRICES["interface_endpoint"].usd),
        )
    )
    nat = len(_of_type(found, "AWS::EC2::NatGateway"))
    lines.append(CostLine("NAT gateways", f"{nat}", _monthly(nat * PRICES["nat_gateway"].usd)))
    addresses = len(_of_type(found, "AWS::EC2::EIP"))
    lines.append(
        CostLine("Public IPv4 addresses", f"{addresses}", _monthly(addresses * PRICES["public_ipv4"].usd))
    )

    aurora, idle_acus = _aurora(found, templates, clients_connected=clients_connected)
    proxies = len(_of_type(found, "AWS::RDS::DBProxy"))
    billed = max(PROXY_MINIMUM_ACUS, idle_acus)
    lines.append(
        CostLine(
            "RDS Proxy",
            f"{proxies} x {billed:g} ACUs billed" if proxies else "none",
            _monthly(proxies * billed * PRICES["rds_proxy"].usd),
        )
    )
    lines.extend(aurora)
    lines.extend(_fargate(found))

    standard = high = 0
    for _, alarm in _of_type(found, "AWS::CloudWatch::Alarm"):
        metrics, high_resolution = _alarm_metrics(alarm)
        if high_resolution:
            high += metrics
        else:
            standard += metrics
    alarms = len(_of_type(found, "AWS::CloudWatch::Alarm"))
    lines.append(
        CostLine(
            "CloudWatch alarms",
            f"{alarms} alarms, {standard + high} metrics",
            standard * PRICES["alarm_metric"].usd + high * PRICES["high_resolution_alarm_metric"].usd,
        )
    )
    dashboards = len(_of_type(found, "AWS::CloudWatch::Dashboard"))
    lines.append(CostLine("CloudWatch dashboards", f"{dashboards}", dashboards * PRICES["dashboard"].usd))
    keys = len(_of_type(found, "AWS::KMS::Key"))
    lines.append(CostLine("KMS keys", f"{keys}", keys * PRICES["kms_key"].usd))
    secrets = len(_of_type(found, "AWS::SecretsManager::Secret"))
    lines.append(CostLine("Secrets Manager secrets", f"{secrets}", secrets * PRICES["secret"].usd))
    acls = _of_type(found, "AWS::WAFv2::WebACL")
    rules = sum(len(_properties(acl).get("Rules", [])) for _, acl in acls)
    lines.append(
        CostLine(
            "WAF web ACLs",
            f"{len(acls)} ACLs, {rules} rules" if acls else "none",
            len(acls) * PRICES["web_acl"].usd + rules * PRICES["web_acl_rule"].usd,
        )
    )
    return lines


def total(lines: Iterable[CostLine]) -> float:
    return sum(line.monthly_usd for line in lines)


def cost_table(
    stages: Mapping[str, list[CostLine]],
    *,
    tick_seconds: Mapping[str, int | None],
    connected: Mapping[str, list[CostLine]] | None = None,
) -> str:
    """The README's table: one row per item, one column per stage, the idle total, what a live-notification
    client connected all month adds (``connected``: each stage's lines with one), then the prices and what is
    left out."""
    names = list(stages)
    items: list[str] = []
    for lines in stages.values():
        items.extend(line.item for line in lines if line.item not in items)
    header = "| item | " + " | ".join(names) + " |"
    rows = [header, "| --- |" + " --- |" * len(names)]
    for item in items:
        cells = []
        for name in names:
            matching = [line for line in stages[name] if line.item == item]
            amount = sum(line.monthly_usd for line in matching)
            detail = "; ".join(line.detail for line in matching) or "none"
            cells.append(f"${amount:,.2f} ({detail})")
        rows.append(f"| {item} | " + " | ".join(cells) + " |")
    rows.append(
        "| **idle total a month** | " + " | ".join(f"**${total(stages[n]):,.2f}**" for n in names) + " |"
    )
    if connected is not None:
        rows.append(
            "| while a live-notification client stays connected (not in the idle total) | "
            + " | ".join(_connected_cell(stages[n], connected[n]) for n in names)
            + " |"
        )
    ticks = ", ".join(
        f"{name}: every {seconds // 60} min" if seconds else f"{name}: none"
        for name, seconds in tick_seconds.items()
    )
    prices = "\n".join(f"- ${price.usd:g} {price.unit}" for price in PRICES.values())
    return (
        "\n".join(rows)
        + f"\n\nPrices assumed (us-east-1 list prices, {HOURS_PER_MONTH} hours a month):\n\n"
        + prices
        + f"\n\nA cluster at 0 ACU is counted as awake at {AWAKE_FLOOR_ACUS:g} ACU after each scheduled "
        + f"wake-up (most frequent: {ticks}; rules on the same cron minutes count once, each rate rule on "
        + f"its own) for the tick's run ({TICK_RUN_SECONDS} s), PostgreSQL's idle_session_timeout and the "
        + "pause delay, and paused for the rest; without idle_session_timeout, as never pausing. "
        + "A rule declared to reach PostgreSQL only while clients are connected to the WebSocket API (the "
        + "notifier's one-minute sweep, which checks their API keys) wakes nothing while none is; the row "
        + "after the total is the month with one client connected throughout, such a rule then counted as a "
        + "wake-up at the interval it declares (key_check_seconds, at least the sweep's minute). "
        + f"RDS Proxy is billed for at least {PROXY_MINIMUM_ACUS} ACUs. "
        + NOT_COUNTED
    )


def _connected_cell(idle: list[CostLine], connected: list[CostLine]) -> str:
    """What a connected client adds to a stage's month, and the items it changes."""
    changed = [
        f"{now.item}: ${now.monthly_usd:,.2f}, {now.detail}"
        for now, before in zip(connected, idle, strict=True)
        if now != before
    ]
    return f"+${total(connected) - total(idle):,.2f} ({'; '.join(changed) or 'nothing changes'})"


def table_from_templates(stages: Mapping[str, Sequence[Template]]) -> str:
    """README's table for the stages' synthesized templates (stage -> its templates, in column order)."""
    return cost_table(
        {name: idle_costs(templates) for name, templates in stages.items()},
        tick_seconds={name: shortest_schedule_seconds(templates) for name, templates in stages.items()},
        connected={name: idle_costs(templates, clients_connected=True) for name, templates in stages.items()},
    )


def readme_table(readme: str) -> str:
    """The table as README.md has it, between its markers."""
    _, start, rest = readme.partition(START)
    body, end, _ = rest.partition(END)
    if not (start and end):
        raise ValueError(f"README.md has no {START} ... {END} section")
    return body.strip("\n")


def table_drift(readme: str, table: str) -> list[str]:
    """The lines where README.md's table and ``table`` differ, as a diff ("-" README, "+" the templates);
    empty when they agree."""
    return [
        line
        for line in difflib.unified_diff(
            readme_table(readme).splitlines(), table.splitlines(), "README.md", "templates", lineterm="", n=0
        )
        if line.startswith(("-", "+")) and not line.startswith(("---", "+++"))
    ]


def _replace(text: str, body: str) -> str:
    head, found, rest = text.partition(START)
    if not found:
        raise ValueError(f"README.md has no {START} marker")
    _, _, tail = rest.partition(END)
    return f"{head}{START}\n{body}\n{END}{tail}"


def synthesized_templates(
    stage: str, outdir: Path, layer_dir: Path, *, nag: bool = True
) -> list[dict[str, Any]]:
    """Synthesize one stage (cdk-nag on, as `make synth` does, unless ``nag`` is False: the costs read only
    resources, which cdk-nag does not change) and read back its templates."""
    from app import build_app

    build_app(context={"stage": stage, "layer_dir": str(layer_dir)}, outdir=str(outdir), nag=nag).synth()
    return [json.loads(path.read_text()) for path in sorted(outdir.glob("*.template.json"))]


def stage_names() -> list[str]:
    """cdk.json's stages, in the table's column order: dev, staging, prod, then any other by name."""
    from app import cdk_json_context

    usual = ("dev", "staging", "prod")
    return sorted(
        cdk_json_context()["stages"], key=lambda name: (usual.index(name) if name in usual else 9, name)
    )


def main() -> None:
    """Synthesize every stage of cdk.json and rewrite README.md's idle cost table (``--check``: compare)."""
    from stacks.config import REPO_ROOT

    templates: dict[str, list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(prefix="tollgate-costs-") as scratch:
        layer_dir = Path(scratch) / "layer"
        layer_dir.mkdir()
        for stage in stage_names():
            templates[stage] = synthesized_templates(stage, Path(scratch) / stage, layer_dir)
            print(f"{stage}: ${total(idle_costs(templates[stage])):,.2f} a month idle")
    table = table_from_templates(templates)
    readme = REPO_ROOT / "README.md"
    current = readme.read_text(encoding="utf-8")
    if "--check" in sys.argv[1:]:
        drift = table_drift(current, table)
        if drift:
            print("README.md's idle cost table is out of date: run `make costs`\n" + "\n".join(drift))
            raise SystemExit(1)
        return
    readme.write_text(_replace(current, table), encoding="utf-8")


if __name__ == "__main__":
    main()
