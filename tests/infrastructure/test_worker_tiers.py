"""One worker service per service tier that has its own (stage config ``worker_tiers``): each claims only its
tiers, with its own slots and scaling, and the normal service runs every tier that has none. The prod stage
configures high and batch services; it is synthesized here once, with cdk-nag on."""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Template

from app import build_app
from stacks.config import StageConfig
from stacks.worker_stack import WorkerStack
from tests.infrastructure.cfn import resources

pytestmark = pytest.mark.infrastructure


@pytest.fixture(scope="module")
def tiered(tmp_path_factory: pytest.TempPathFactory) -> tuple[StageConfig, dict[str, Any]]:
    context = {"stage": "prod", "layer_dir": str(tmp_path_factory.mktemp("layer"))}
    app = build_app(context=context, outdir=str(tmp_path_factory.mktemp("cdk.out")))
    app.synth()  # cdk-nag errors fail the synth: the extra services need no acknowledgement of their own
    [worker] = [child for child in app.node.children if isinstance(child, WorkerStack)]
    assert isinstance(worker, cdk.Stack)
    return StageConfig.from_node(app.node), Template.from_stack(worker).to_json()


def containers(template: dict[str, Any]) -> dict[str, dict[str, str]]:
    """The worker container's environment per tier service, keyed by the tiers it serves."""
    found = {}
    for task in resources(template, "AWS::ECS::TaskDefinition").values():
        (container,) = task["Properties"]["ContainerDefinitions"]
        environment = {v["Name"]: v["Value"] for v in container["Environment"]}
        found[environment["WORKER_SERVICE_TIERS"]] = environment
    return found


def test_each_tier_with_slots_gets_a_service_and_the_normal_one_runs_the_rest(tiered) -> None:
    config, template = tiered
    assert len(resources(template, "AWS::ECS::Service")) == 3
    environments = containers(template)
    assert set(environments) == {"high", "normal", "batch"}
    for tier, slots in (("high", 4), ("batch", 8), ("normal", config.worker.execution_slots)):
        assert environments[tier]["EXECUTION_SLOTS"] == str(slots)
        assert environments[tier]["DATABASE_POOL_SIZE"] == str(slots + 2)
    # The high service looks for its new jobs more often; the others keep the worker section's wait
    assert environments["high"]["CLAIM_IDLE_SECONDS"] == "0.5"
    assert environments["batch"]["CLAIM_IDLE_SECONDS"] == str(config.worker.claim_idle_seconds)
    # The same settings everywhere else: the settings-vs-environment test of the normal service holds for all
    keys = {frozenset(environment) for environment in environments.values()}
    assert len(keys) == 1
    shared = {
        name: value
        for name, value in environments["normal"].items()
        if name not in {"EXECUTION_SLOTS", "DATABASE_POOL_SIZE", "WORKER_SERVICE_TIERS", "CLAIM_IDLE_SECONDS"}
    }
    for environment in environments.values():
        assert {name: environment[name] for name in shared} == shared
    assert shared["LIMITER_SHARE_BATCH"] == "0.5" and shared["LIMITER_SHARE_NORMAL"] == "0.8"


def test_each_tier_service_scales_within_its_own_bounds(tiered) -> None:
    config, template = tiered
    bounds = sorted(
        (target["Properties"]["MinCapacity"], target["Properties"]["MaxCapacity"])
        for target in resources(template, "AWS::ApplicationAutoScaling::ScalableTarget").values()
    )
    assert bounds == sorted([(1, 2), (1, 4), (config.worker_min_tasks, config.worker_max_tasks)])
    desired = sorted(
        service["Properties"]["DesiredCount"] for service in resources(template, "AWS::ECS::Service").values()
    )
    assert desired == sorted([1, 1, config.worker_min_tasks])


def test_a_tier_without_slots_has_no_service_and_the_normal_service_claims_it() -> None:
    config = StageConfig(
        stage="dev", worker_tiers={"high": {"execution_slots": 2}, "batch": {"execution_slots": 0}}
    )
    services = {service.tier: service.serves for service in config.worker_services}
    assert services == {"normal": ("normal", "batch"), "high": ("high",)}
    assert StageConfig(stage="dev").worker_services[0].serves == ("high", "normal", "batch")


def test_a_tier_service_whose_minimum_exceeds_its_ceiling_is_refused() -> None:
    with pytest.raises(ValueError, match="min_tasks exceeds max_tasks"):
        StageConfig(
            stage="dev", worker_tiers={"batch": {"execution_slots": 2, "min_tasks": 3, "max_tasks": 2}}
        )
