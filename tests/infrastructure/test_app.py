"""The whole app: cdk-nag passes with written acknowledgements, and the Lambda artifacts hold what they should."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from layers import build
from stacks.config import REPO_ROOT
from stacks.constructs.lambda_packaging import (
    LAMBDA_ARCHITECTURE,
    LAMBDA_RUNTIME,
    RUNTIME_FOLDERS,
)
from stacks.constructs.nag import NAG_PACK
from tests.infrastructure.cfn import local_id, resources, subnet_groups
from tests.infrastructure.synth import Synthesized
from tests.layout import missing_imports, python_files, tree_bytes

pytestmark = pytest.mark.infrastructure

ACKNOWLEDGED_RULES = "aws:cdk:acknowledged-rules"
RUNTIME_CACHE_TAG = "cpython-" + LAMBDA_RUNTIME.name.removeprefix("python").replace(".", "")


def test_synth_passes_cdk_nag(synthesized: Synthesized, validation_report: dict[str, Any]) -> None:
    assert synthesized.validation_error is None, f"cdk-nag failed synth: {synthesized.validation_error}"
    unresolved = [
        (report.get("pluginName"), violation.get("ruleName"))
        for report in validation_report["pluginReports"]
        for violation in report.get("violations", [])
    ]
    assert unresolved == []


def _acknowledgements(synthesized: Synthesized) -> list[tuple[str, str, str]]:
    """(construct path, qualified rule id, reason) of every cdk-nag acknowledgement in the app.

    CDK acknowledges a few of its own CloudFormation-Validate findings; those are not ours to judge.
    """
    return [
        (construct.node.path, rule, reason)
        for construct in synthesized.app.node.find_all()
        for entry in construct.node.metadata
        if entry.type == ACKNOWLEDGED_RULES
        for rule, reason in entry.data.items()
        if rule.startswith(f"{NAG_PACK}::")
    ]


def test_every_acknowledgement_gives_a_specific_reason(synthesized: Synthesized) -> None:
    acknowledgements = _acknowledgements(synthesized)

    assert acknowledgements, "the stacks are expected to acknowledge some cdk-nag findings"
    assert [(path, rule) for path, rule, reason in acknowledgements if len(reason.split()) < 12] == []


def test_every_acknowledgement_matches_a_finding(
    synthesized: Synthesized, validation_report: dict[str, Any]
) -> None:
    """A stale acknowledgement would silently cover the next, different problem at the same place."""
    suppressed = {
        (violation["acknowledgedAt"], violation["acknowledgedId"])
        for report in validation_report["pluginReports"]
        for violation in report.get("suppressedViolations", [])
    }

    unused = [
        (path, rule) for path, rule, _ in _acknowledgements(synthesized) if (path, rule) not in suppressed
    ]

    assert unused == []


def test_stacks_are_named_after_the_stage(synthesized: Synthesized) -> None:
    assert synthesized.data_stack.stack_name == "Tollgate-dev-Data"
    assert synthesized.api_stack.stack_name == "Tollgate-dev-Api"
    assert synthesized.pipeline_stack.stack_name == "Tollgate-dev-Pipeline"
    assert synthesized.worker_stack.stack_name == "Tollgate-dev-Worker"
    assert synthesized.delivery_stack.stack_name == "Tollgate-dev-Delivery"
    assert synthesized.results_stack.stack_name == "Tollgate-dev-Results"
    assert synthesized.observability_stack.stack_name == "Tollgate-dev-Observability"
    assert synthesized.notifications_stack.stack_name == "Tollgate-dev-Notifications"


def test_stack_dependencies_point_one_way(synthesized: Synthesized) -> None:
    """Data <- Delivery <- Pipeline <- Api and Worker <- Observability, Results <- Pipeline, and Pipeline and
    Api <- Notifications:
    CloudFormation deploys them in that order, no cycle can form, and nothing waits for the stack that only
    watches the others."""

    def depends_on(stack: Any) -> set[str]:
        return {dependency.stack_name for dependency in stack.dependencies}

    assert depends_on(synthesized.data_stack) == set()
    assert depends_on(synthesized.delivery_stack) == {"Tollgate-dev-Data"}
    assert depends_on(synthesized.results_stack) == set()
    assert depends_on(synthesized.pipeline_stack) == {
        "Tollgate-dev-Data",
        "Tollgate-dev-Delivery",
        "Tollgate-dev-Results",
    }
    assert depends_on(synthesized.api_stack) == {
        "Tollgate-dev-Data",
        "Tollgate-dev-Delivery",
        "Tollgate-dev-Pipeline",
    }
    assert depends_on(synthesized.worker_stack) == {"Tollgate-dev-Data", "Tollgate-dev-Pipeline"}
    # Api for the account's API Gateway logging role its WebSocket stage's access log needs.
    assert depends_on(synthesized.notifications_stack) == {
        "Tollgate-dev-Data",
        "Tollgate-dev-Pipeline",
        "Tollgate-dev-Api",
    }
    assert depends_on(synthesized.observability_stack) == {
        "Tollgate-dev-Delivery",
        "Tollgate-dev-Pipeline",
        "Tollgate-dev-Api",
        "Tollgate-dev-Worker",
    }


def test_every_lambda_but_the_webhook_attempt_and_the_posters_stays_in_the_isolated_subnets(
    data_template: dict[str, Any],
    api_template: dict[str, Any],
    pipeline_template: dict[str, Any],
    delivery_template: dict[str, Any],
    notifications_template: dict[str, Any],
) -> None:
    """Only the worker (the LLM provider), the webhook attempt (tenants' receivers) and the two functions
    that post to WebSocket connections (the management API has no VPC endpoint) have a route out of the VPC;
    every other Tollgate Lambda reaches AWS through endpoints."""
    groups = subnet_groups(data_template)
    placed = {
        function["Properties"]["Handler"].split(".")[1]: {
            groups[local_id(subnet, data_template)]
            for subnet in function["Properties"]["VpcConfig"]["SubnetIds"]
        }
        for template in (
            data_template,
            api_template,
            pipeline_template,
            delivery_template,
            notifications_template,
        )
        for function in resources(template, "AWS::Lambda::Function").values()
        if function["Properties"]["Handler"].startswith("functions.")
    }

    assert placed == {
        "api": {"isolated"},
        "authorizer": {"isolated"},
        "migrate": {"isolated"},
        "outbox_relay": {"isolated"},
        "scheduler": {"isolated"},
        "webhook_attempt": {"egress"},
        "websocket_authorizer": {"isolated"},
        "websocket": {"egress"},
        "notifier": {"egress"},
    }


def test_resources_carry_project_and_stage_tags(api_template: dict[str, Any]) -> None:
    (function,) = [
        f
        for f in resources(api_template, "AWS::Lambda::Function").values()
        if f["Properties"]["Handler"] == "functions.api.handler.lambda_handler"
    ]

    assert {"Key": "project", "Value": "tollgate"} in function["Properties"]["Tags"]
    assert {"Key": "stage", "Value": "dev"} in function["Properties"]["Tags"]


def _code_asset(synthesized: Synthesized, template: dict[str, Any]) -> Path:
    keys = {
        f["Properties"]["Code"]["S3Key"]
        for f in resources(template, "AWS::Lambda::Function").values()
        if f["Properties"]["Handler"].startswith("functions.")
    }
    assert len(keys) == 1, "every Tollgate function shares one code asset"
    return synthesized.outdir / f"asset.{keys.pop().removesuffix('.zip')}"


def test_code_asset_holds_only_the_runtime_packages(
    synthesized: Synthesized, api_template: dict[str, Any]
) -> None:
    asset = _code_asset(synthesized, api_template)
    files = [path.relative_to(asset) for path in asset.rglob("*") if path.is_file()]

    assert {path.parts[0] for path in files} <= set(RUNTIME_FOLDERS)
    # Bytecode only as layers/build.py compiles it: for the runtime's CPython, beside its source.
    for path in files:
        if path.suffix == ".pyc":
            assert path.parent.name == "__pycache__" and path.name.endswith(f".{RUNTIME_CACHE_TAG}.pyc")
            source = asset / path.parent.parent / f"{path.name.split('.')[0]}.py"
            assert source.is_file(), f"{path} has no source beside it"
    for entrypoint in ("api", "authorizer", "migrate"):
        assert (asset / "functions" / entrypoint / "handler.py").is_file()
    assert (asset / "tollgate" / "settings.py").is_file()


def test_code_asset_runs_without_the_development_package(
    synthesized: Synthesized, api_template: dict[str, Any]
) -> None:
    """No harness module is in the zip, and every project module a handler can import (lazily too) is."""
    asset = _code_asset(synthesized, api_template)
    handlers = sorted((asset / "functions").glob("*/handler.py"))

    assert not (asset / "tollgate_dev").exists()
    assert len(handlers) == 10
    assert missing_imports(asset, python_files(asset)) == {}
    assert missing_imports(asset, handlers) == {}


def test_code_asset_is_the_runtime_package_and_no_more(
    synthesized: Synthesized, api_template: dict[str, Any]
) -> None:
    """The zip weighs what the runtime folders weigh: the harness (tollgate_dev) adds nothing to it."""
    asset = _code_asset(synthesized, api_template)

    assert tree_bytes(asset) == sum(tree_bytes(REPO_ROOT / folder) for folder in RUNTIME_FOLDERS)
    assert {p.relative_to(asset) for p in python_files(asset)} == {
        p.relative_to(REPO_ROOT) for folder in RUNTIME_FOLDERS for p in python_files(REPO_ROOT / folder)
    }
    assert tree_bytes(REPO_ROOT / "tollgate_dev") > 0


def test_every_stack_with_functions_uses_the_same_code_asset(
    synthesized: Synthesized,
    api_template: dict[str, Any],
    data_template: dict[str, Any],
    pipeline_template: dict[str, Any],
    delivery_template: dict[str, Any],
) -> None:
    asset = _code_asset(synthesized, api_template)

    assert _code_asset(synthesized, data_template) == asset
    assert _code_asset(synthesized, pipeline_template) == asset
    assert _code_asset(synthesized, delivery_template) == asset
    for entrypoint in ("outbox_relay", "scheduler", "webhook_attempt"):
        assert (asset / "functions" / entrypoint / "handler.py").is_file()


def test_layer_is_built_for_the_functions_runtime_and_architecture(
    api_template: dict[str, Any],
    data_template: dict[str, Any],
    pipeline_template: dict[str, Any],
    delivery_template: dict[str, Any],
) -> None:
    assert LAMBDA_RUNTIME.name == f"python{build.PYTHON_VERSION}"
    assert build.UV_PLATFORM.startswith("aarch64-") and LAMBDA_ARCHITECTURE.name == "arm64"
    assert build.LAMBDA_MARKERS["platform_machine"] == "aarch64"
    for template in (api_template, data_template, pipeline_template, delivery_template):
        for layer in resources(template, "AWS::Lambda::LayerVersion").values():
            assert layer["Properties"]["CompatibleRuntimes"] == [LAMBDA_RUNTIME.name]
            assert layer["Properties"]["CompatibleArchitectures"] == [LAMBDA_ARCHITECTURE.name]
        for function in resources(template, "AWS::Lambda::Function").values():
            if function["Properties"]["Handler"].startswith("functions."):
                assert function["Properties"]["Runtime"] == LAMBDA_RUNTIME.name
                assert function["Properties"]["Architectures"] == [LAMBDA_ARCHITECTURE.name]
                assert len(function["Properties"]["Layers"]) == 1


def test_layer_takes_runtime_dependencies_and_no_cdk_packages() -> None:
    names = {build.requirement_name(r) for r in build.runtime_requirements()}

    assert {"pydantic", "psycopg", "aws-lambda-powertools"} <= names
    assert not names & build.FORBIDDEN


def test_layer_build_refuses_cdk_packages_in_runtime_dependencies(tmp_path: Path) -> None:
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[project]\nname = "x"\ndependencies = ["pydantic>=2", "aws_cdk_lib>=2.200"]\n')

    with pytest.raises(SystemExit, match="aws-cdk-lib"):
        build.runtime_requirements(pyproject)
