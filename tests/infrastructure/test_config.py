"""StageConfig: every stage in cdk.json is valid, and the settings it renders match the Lambda models."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from app import cdk_json_context
from stacks.config import REPO_ROOT, StageConfig, settings_environment
from tollgate.settings import AdmissionSettings, ApiSettings, AuthorizerSettings

pytestmark = pytest.mark.infrastructure


@pytest.mark.parametrize("stage", sorted(cdk_json_context()["stages"]))
def test_every_stage_in_cdk_json_is_valid(stage: str) -> None:
    config = StageConfig.from_context({**cdk_json_context(), "stage": stage})

    assert config.stage == stage


def test_prod_keeps_its_data() -> None:
    prod = StageConfig.from_context({**cdk_json_context(), "stage": "prod"})

    assert prod.retains_data


def test_an_unknown_stage_names_the_known_ones() -> None:
    with pytest.raises(ValueError, match="known: dev, prod, staging"):
        StageConfig.from_context({**cdk_json_context(), "stage": "qa"})


def test_a_misspelt_setting_is_rejected_not_ignored() -> None:
    with pytest.raises(ValidationError, match="aurora_max_acus"):
        StageConfig.from_context({"stage": "dev", "stages": {"dev": {"aurora_max_acus": 8}}})


def test_admission_limits_are_validated_with_the_lambda_models_bounds() -> None:
    with pytest.raises(ValidationError, match="tenant_max_pending_jobs"):
        StageConfig.from_context(
            {"stage": "dev", "stages": {"dev": {"admission": {"tenant_max_pending_jobs": 0}}}}
        )


def test_more_than_two_azs_needs_an_environment() -> None:
    with pytest.raises(ValidationError, match="max_azs > 2 needs account and region"):
        StageConfig(stage="dev", max_azs=3)


def test_a_relative_layer_dir_is_taken_from_the_repository() -> None:
    config = StageConfig(stage="dev", layer_dir=Path("build/other-layer"))

    assert config.layer_dir == REPO_ROOT / "build" / "other-layer"


def test_config_sections_carry_exactly_the_settings_models_fields() -> None:
    config = StageConfig(stage="dev")

    assert settings_environment(config.admission).keys() == {
        name.upper() for name in AdmissionSettings.model_fields
    }
    assert set(settings_environment(config.jobs)) <= {name.upper() for name in ApiSettings.model_fields}
    assert set(settings_environment(config.authorizer)) <= {
        name.upper() for name in AuthorizerSettings.model_fields
    }


def test_section_defaults_are_the_settings_models_defaults() -> None:
    config = StageConfig(stage="dev")

    for name, value in config.admission.model_dump().items():
        assert value == AdmissionSettings.model_fields[name].default
    for name, value in config.jobs.model_dump().items():
        assert value == ApiSettings.model_fields[name].default
