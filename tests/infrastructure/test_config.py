"""StageConfig: every stage in cdk.json is valid, and the settings it renders match the Lambda models."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from app import cdk_json_context
from stacks.config import FARGATE_MEMORY, REPO_ROOT, StageConfig, settings_environment
from tollgate.jobtypes.registry import JOB_TYPES
from tollgate.settings import (
    AdmissionSettings,
    ApiSettings,
    AuthorizerSettings,
    RelaySettings,
    RetrySettings,
    SchedulerSettings,
    WebhookAttemptSettings,
    WorkerSettings,
)

pytestmark = pytest.mark.infrastructure

QUEUES = {name: "q" for name in JOB_TYPES}


@pytest.mark.parametrize("stage", sorted(cdk_json_context()["stages"]))
def test_every_stage_in_cdk_json_is_valid(stage: str) -> None:
    config = StageConfig.from_context({**cdk_json_context(), "stage": stage})

    assert config.stage == stage


def test_prod_keeps_its_data() -> None:
    prod = StageConfig.from_context({**cdk_json_context(), "stage": "prod"})

    assert prod.retains_data


@pytest.mark.parametrize("stage", ["staging", "prod"])
def test_stages_that_take_tenants_traffic_have_a_firewall_and_enforce_usage_plans(stage: str) -> None:
    config = StageConfig.from_context({**cdk_json_context(), "stage": stage})

    assert config.waf_enabled
    assert config.enforce_usage_plan


def test_prod_gives_every_az_its_own_nat_gateway() -> None:
    prod = StageConfig.from_context({**cdk_json_context(), "stage": "prod"})

    assert prod.nat_gateways == prod.max_azs


@pytest.mark.parametrize("stage", ["dev", "staging"])
def test_other_stages_share_one_nat_gateway(stage: str) -> None:
    assert StageConfig.from_context({**cdk_json_context(), "stage": stage}).nat_gateways == 1


def test_more_nat_gateways_than_azs_are_rejected() -> None:
    with pytest.raises(ValidationError, match="nat_gateways exceeds max_azs"):
        StageConfig(stage="dev", max_azs=2, nat_gateways=3)


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


SECTION_MODELS = {
    "relay": RelaySettings,
    "retry": RetrySettings,
    "scheduler": SchedulerSettings,
    "retention": SchedulerSettings,
    "worker": WorkerSettings,
    "webhooks": WebhookAttemptSettings,
}


@pytest.mark.parametrize(("section", "model"), SECTION_MODELS.items())
def test_pipeline_and_worker_sections_are_fields_of_their_models(section: str, model: type) -> None:
    config = StageConfig(stage="dev")
    values = getattr(config, section)

    assert set(settings_environment(values)) <= {name.upper() for name in model.model_fields}
    for name, value in values.model_dump().items():
        assert value == model.model_fields[name].default, name


def test_the_retry_section_is_the_whole_retry_policy() -> None:
    assert set(StageConfig(stage="dev").retry.model_dump()) == set(RetrySettings.model_fields)


def test_structured_settings_render_as_json_the_models_read_back(monkeypatch: pytest.MonkeyPatch) -> None:
    prices = {"gpt-4.1-mini": [0.5, 2.0]}
    config = StageConfig.from_context(
        {"stage": "dev", "stages": {"dev": {"pricing": {"model_prices": prices}}}}
    )
    rendered = settings_environment(config.pricing)["MODEL_PRICES"]
    monkeypatch.setenv("MODEL_PRICES", rendered)

    settings = WorkerSettings(
        job_queue_urls=QUEUES, documents_bucket="b", database_url="postgresql://x", openai_api_key="k"
    )

    assert settings.model_prices == {"gpt-4.1-mini": (0.5, 2.0)}


@pytest.mark.parametrize("mode", ["json_schema", "json_object", "prompt"])
def test_a_stage_names_its_providers_structured_output_and_the_worker_reads_it_back(
    monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    config = StageConfig.from_context(
        {"stage": "dev", "stages": {"dev": {"worker": {"provider_structured_output": mode}}}}
    )
    monkeypatch.setenv(
        "PROVIDER_STRUCTURED_OUTPUT", settings_environment(config.worker)["PROVIDER_STRUCTURED_OUTPUT"]
    )

    settings = WorkerSettings(
        job_queue_urls=QUEUES, documents_bucket="b", database_url="postgresql://x", openai_api_key="k"
    )

    assert settings.provider_structured_output == mode


def test_a_structured_output_the_worker_does_not_know_is_rejected_at_synth() -> None:
    with pytest.raises(ValidationError, match="provider_structured_output"):
        StageConfig.from_context(
            {"stage": "dev", "stages": {"dev": {"worker": {"provider_structured_output": "grammar"}}}}
        )


@pytest.mark.parametrize(("cpu", "memory"), [(256, 4096), (512, 512), (1024, 1536), (300, 1024)])
def test_a_task_size_fargate_does_not_offer_is_rejected(cpu: int, memory: int) -> None:
    with pytest.raises(ValidationError, match="Fargate has no task size"):
        StageConfig(stage="dev", worker_cpu=cpu, worker_memory_mib=memory)


def test_every_fargate_size_offered_is_accepted() -> None:
    for cpu, memories in FARGATE_MEMORY.items():
        for memory in (memories[0], memories[-1]):
            assert StageConfig(stage="dev", worker_cpu=cpu, worker_memory_mib=memory).worker_cpu == cpu


def test_worker_bounds_must_be_ordered() -> None:
    with pytest.raises(ValidationError, match="worker_min_tasks exceeds worker_max_tasks"):
        StageConfig(stage="dev", worker_min_tasks=3, worker_max_tasks=2)


def test_a_worker_service_that_stops_when_idle_needs_a_queue_age_alarm_that_allows_a_start() -> None:
    with pytest.raises(ValidationError, match="jobs_queue_age_alarm_seconds >= 1200"):
        StageConfig(stage="dev", worker_min_tasks=0, jobs_queue_age_alarm_seconds=1199)
    with pytest.raises(ValidationError, match="jobs_queue_age_alarm_seconds >= 1200"):
        StageConfig(stage="dev", worker_tiers={"high": {"execution_slots": 2, "min_tasks": 0}})

    assert (
        StageConfig(stage="dev", worker_min_tasks=0, jobs_queue_age_alarm_seconds=1200).worker_min_tasks == 0
    )


def test_a_pausing_cluster_needs_ticks_further_apart_than_it_stays_awake() -> None:
    """Every tick connects; ticks every minute would keep a 0-ACU cluster at its 0.5-ACU floor for good."""
    with pytest.raises(ValidationError, match="tick_minutes longer than aurora_auto_pause_seconds"):
        StageConfig(stage="dev", aurora_min_acu=0)
    with pytest.raises(ValidationError, match="tick_minutes longer than aurora_auto_pause_seconds"):
        # 300 s pause delay + 60 s idle-session timeout = 6 minutes awake after each tick.
        StageConfig(stage="dev", aurora_min_acu=0, tick_minutes=6, outbox_age_alarm_seconds=600)

    paused = StageConfig(stage="dev", aurora_min_acu=0, tick_minutes=10, outbox_age_alarm_seconds=700)

    assert paused.auto_pause and paused.database_awake_after_tick_seconds == 360


@pytest.mark.parametrize("minutes", [7, 25, 45])
def test_ticks_fall_on_the_same_minutes_of_every_hour(minutes: int) -> None:
    with pytest.raises(ValidationError, match="tick_minutes must divide 60"):
        StageConfig(stage="dev", tick_minutes=minutes, outbox_age_alarm_seconds=3600)


def test_the_outbox_age_alarm_allows_for_a_whole_tick() -> None:
    with pytest.raises(ValidationError, match="outbox_age_alarm_seconds must exceed tick_minutes"):
        StageConfig(stage="dev", tick_minutes=5, outbox_age_alarm_seconds=300)


def test_clients_of_a_pausing_cluster_wait_out_its_resume_and_others_keep_the_default() -> None:
    paused = StageConfig(stage="dev", aurora_min_acu=0, tick_minutes=15, outbox_age_alarm_seconds=1200)

    assert paused.database_wait_environment() == {"DATABASE_WAIT_SECONDS": "20"}
    assert StageConfig(stage="dev").database_wait_environment() == {}
    # Aurora takes about 15 s to resume; the API Lambda must still answer within its 25 s.
    assert 15 < float(paused.database_wait_environment()["DATABASE_WAIT_SECONDS"]) < 25


def test_dev_is_a_low_idle_stage() -> None:
    dev = StageConfig.from_context({**cdk_json_context(), "stage": "dev"})

    assert dev.auto_pause and not dev.database_proxy and not dev.interface_endpoints
    assert [service.min_tasks for service in dev.worker_services] == [0]


@pytest.mark.parametrize("stage", ["staging", "prod"])
def test_other_stages_keep_the_proxy_the_endpoints_a_running_cluster_and_workers(stage: str) -> None:
    config = StageConfig.from_context({**cdk_json_context(), "stage": stage})

    assert config.database_proxy and config.interface_endpoints and config.tick_minutes == 1
    assert config.aurora_min_acu >= 0.5
    assert all(service.min_tasks >= 1 for service in config.worker_services)


def test_draining_must_end_before_ecs_kills_the_task() -> None:
    with pytest.raises(ValidationError, match="drain_seconds"):
        StageConfig.from_context({"stage": "dev", "stages": {"dev": {"worker": {"drain_seconds": 120}}}})


def test_the_relay_claim_cannot_exceed_a_lambda_run() -> None:
    with pytest.raises(ValidationError, match="900-second"):
        StageConfig.from_context({"stage": "dev", "stages": {"dev": {"relay": {"relay_claim_seconds": 901}}}})


def test_the_webhook_attempt_outlasts_its_own_send_by_the_database_work() -> None:
    default = StageConfig(stage="dev")
    slower = StageConfig.from_context(
        {"stage": "dev", "stages": {"dev": {"webhooks": {"webhook_total_timeout_seconds": 20.5}}}}
    )

    assert default.webhook_attempt_timeout_seconds == 30
    assert slower.webhook_attempt_timeout_seconds == 36


def test_a_webhook_connect_cap_beyond_the_total_cap_is_rejected() -> None:
    with pytest.raises(ValidationError, match="webhook_connect_timeout_seconds exceeds"):
        StageConfig.from_context(
            {"stage": "dev", "stages": {"dev": {"webhooks": {"webhook_connect_timeout_seconds": 20}}}}
        )


def test_local_only_webhook_settings_cannot_be_set_for_a_stage() -> None:
    """The sender's private-target switch and the time scale exist for the local stack alone."""
    for field in ("webhooks_allow_private_targets", "delivery_time_scale"):
        with pytest.raises(ValidationError, match=field):
            StageConfig.from_context({"stage": "dev", "stages": {"dev": {"webhooks": {field: True}}}})


def test_the_job_age_alarm_comes_after_scaling_out() -> None:
    with pytest.raises(ValidationError, match="must exceed worker_scale_out_job_age_seconds"):
        StageConfig(stage="dev", worker_scale_out_job_age_seconds=300, eligible_job_age_alarm_seconds=300)


def test_the_job_age_alarm_comes_before_the_default_deadline() -> None:
    with pytest.raises(ValidationError, match=r"below jobs\.default_deadline_seconds"):
        StageConfig(stage="dev", eligible_job_age_alarm_seconds=3600, jobs={"default_deadline_seconds": 3600})


@pytest.mark.parametrize("percent", [0, 101])
def test_the_throttling_alarm_takes_a_percentage(percent: float) -> None:
    with pytest.raises(ValidationError, match="provider_throttle_alarm_percent"):
        StageConfig(stage="dev", provider_throttle_alarm_percent=percent)


def test_a_stage_sets_its_retention_and_the_scheduler_reads_it_back(monkeypatch: pytest.MonkeyPatch) -> None:
    config = StageConfig.from_context(
        {"stage": "prod", "stages": {"prod": {"retention": {"retention_default_days": 90}}}}
    )
    for name, value in settings_environment(config.retention).items():
        monkeypatch.setenv(name, value)

    settings = SchedulerSettings(database_url="postgresql://x", documents_bucket="b")

    assert settings.retention_default_days == 90
    assert settings.retention_outbox_days == SchedulerSettings.model_fields["retention_outbox_days"].default


def test_archives_cannot_expire_before_they_move_to_infrequent_access() -> None:
    with pytest.raises(ValidationError, match="archive_expiration_days"):
        StageConfig(stage="dev", archive_infrequent_access_days=60, archive_expiration_days=45)


def test_the_api_and_the_worker_get_the_same_prices_and_system_budget(
    api_template: Any, worker_template: Any
) -> None:
    from tests.infrastructure.test_function_environments import _environment

    config = StageConfig(stage="dev", pricing={"system_monthly_budget_usd": 5000})
    rendered = settings_environment(config.pricing)
    assert rendered["SYSTEM_MONTHLY_BUDGET_USD"] == "5000.0"
    api, worker = _environment(api_template, "api"), _environment(worker_template, "worker")
    assert api["MODEL_PRICES"] == worker["MODEL_PRICES"], "one price table for admission and the worker"
