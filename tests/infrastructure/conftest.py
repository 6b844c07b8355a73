"""Synthesizes the whole app once per test session (with cdk-nag on) and hands out the stacks' templates.

The layer folder is an empty temporary directory, so the suite never needs ``layers/build.py``.
"""

from __future__ import annotations

import json
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Template

from app import build_app
from stacks.api_stack import ApiStack
from stacks.config import StageConfig
from stacks.data_stack import DataStack
from stacks.delivery_stack import DeliveryStack
from stacks.notifications_stack import NotificationsStack
from stacks.observability_stack import ObservabilityStack
from stacks.ops_stack import OpsStack
from stacks.pipeline_stack import PipelineStack
from stacks.results_stack import ResultsStack
from stacks.worker_stack import WorkerStack
from tests.infrastructure.synth import StageTemplates, Synthesized, normal_shape_stages


@pytest.fixture(scope="session")
def synthesized(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    # Dev in the normal shape: see LOW_IDLE_KEYS.
    context = {
        "stage": "dev",
        "stages": normal_shape_stages(),
        "layer_dir": str(tmp_path_factory.mktemp("layer")),
    }
    outdir = checked_outdir = tmp_path_factory.mktemp("cdk.out")
    app = build_app(context=context, outdir=str(outdir))
    validation_error: Exception | None = None
    try:
        app.synth()
    except RuntimeError as error:
        # Keep the template tests meaningful when cdk-nag fails; its own test reports the failure.
        validation_error = error
        outdir = tmp_path_factory.mktemp("cdk.out.unchecked")
        app = build_app(context=context, outdir=str(outdir), nag=False)
        app.synth()
    # Written by the checked synth whether it passed or failed.
    report = json.loads((checked_outdir / "validation-report.json").read_text())
    stacks = {type(child): child for child in app.node.children if isinstance(child, cdk.Stack)}
    return Synthesized(
        app=app,
        config=StageConfig.from_node(app.node),
        outdir=outdir,
        data_stack=stacks[DataStack],
        delivery_stack=stacks[DeliveryStack],
        api_stack=stacks[ApiStack],
        pipeline_stack=stacks[PipelineStack],
        notifications_stack=stacks[NotificationsStack],
        results_stack=stacks[ResultsStack],
        worker_stack=stacks[WorkerStack],
        observability_stack=stacks[ObservabilityStack],
        ops_stack=stacks[OpsStack],
        validation_error=validation_error,
        validation_report=report,
    )


@pytest.fixture(scope="session")
def stage_templates(tmp_path_factory: pytest.TempPathFactory) -> StageTemplates:
    """Synthesizes a stage as cdk.json configures it (dev in its low-idle shape), with cdk-nag on, on first
    use; later calls for the same stage share that synth."""
    synthesized: dict[str, tuple[StageConfig, dict[str, dict[str, Any]]]] = {}

    def synthesize(stage: str) -> tuple[StageConfig, dict[str, dict[str, Any]]]:
        if stage not in synthesized:
            context = {"stage": stage, "layer_dir": str(tmp_path_factory.mktemp("layer"))}
            app = build_app(context=context, outdir=str(tmp_path_factory.mktemp(f"cdk.out.{stage}")))
            app.synth()  # cdk-nag errors fail the synth: every stage is deployed as it is configured
            config = StageConfig.from_node(app.node)
            synthesized[stage] = (
                config,
                {
                    child.stack_name.removeprefix(f"Tollgate-{config.stage}-"): _template(child)
                    for child in app.node.children
                    if isinstance(child, cdk.Stack)
                },
            )
        return synthesized[stage]

    return synthesize


@pytest.fixture(scope="session")
def config(synthesized: Synthesized) -> StageConfig:
    return synthesized.config


def _template(stack: Any) -> dict[str, Any]:
    """A synthesized stack's CloudFormation, as the dict the template tests read."""
    template: dict[str, Any] = Template.from_stack(stack).to_json()
    return template


@pytest.fixture(scope="session")
def data_template(synthesized: Synthesized) -> dict[str, Any]:
    return _template(synthesized.data_stack)


@pytest.fixture(scope="session")
def delivery_template(synthesized: Synthesized) -> dict[str, Any]:
    return _template(synthesized.delivery_stack)


@pytest.fixture(scope="session")
def api_template(synthesized: Synthesized) -> dict[str, Any]:
    return _template(synthesized.api_stack)


@pytest.fixture(scope="session")
def pipeline_template(synthesized: Synthesized) -> dict[str, Any]:
    return _template(synthesized.pipeline_stack)


@pytest.fixture(scope="session")
def notifications_template(synthesized: Synthesized) -> dict[str, Any]:
    return _template(synthesized.notifications_stack)


@pytest.fixture(scope="session")
def results_template(synthesized: Synthesized) -> dict[str, Any]:
    return _template(synthesized.results_stack)


@pytest.fixture(scope="session")
def worker_template(synthesized: Synthesized) -> dict[str, Any]:
    return _template(synthesized.worker_stack)


@pytest.fixture(scope="session")
def observability_template(synthesized: Synthesized) -> dict[str, Any]:
    return _template(synthesized.observability_stack)


@pytest.fixture(scope="session")
def ops_template(synthesized: Synthesized) -> dict[str, Any]:
    return _template(synthesized.ops_stack)


@pytest.fixture(scope="session")
def validation_report(synthesized: Synthesized) -> dict[str, Any]:
    return synthesized.validation_report
