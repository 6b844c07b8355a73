"""A worker refuses to start where it would silently break a promise: deployed without the shared provider
budget or a provider key, or anywhere with nothing to call; local runs keep their defaults."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from tollgate.jobtypes.registry import JOB_TYPES
from tollgate.settings import WorkerSettings

QUEUES = {name: f"https://sqs.example/{name}.fifo" for name in JOB_TYPES}
REQUIRED = {"job_queue_urls": QUEUES, "documents_bucket": "b", "database_url": "postgresql://x"}
DEPLOYED = {"deployed_stage": "prod", "limiter_table": "budget", "openai_api_key": "sk-test", **REQUIRED}


def settings(**values: Any) -> WorkerSettings:
    # Every field the rule reads is given, so the process environment cannot decide the outcome.
    given = {"deployed_stage": None, "limiter_table": None, "openai_api_key": None, "openai_base_url": None}
    return WorkerSettings(**{**given, **values})


def test_a_deployed_worker_with_its_budget_table_and_key_starts():
    assert settings(**DEPLOYED).limiter_table == "budget"


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"limiter_table": None}, "LIMITER_TABLE is not set"),
        ({"openai_api_key": None, "openai_base_url": "http://127.0.0.1:9/v1"}, "OPENAI_API_KEY is not set"),
    ],
)
def test_a_deployed_worker_refuses_to_start_without_what_its_promises_need(change, named):
    with pytest.raises(ValidationError, match="deployed in stage 'prod' refuses to start") as refused:
        settings(**{**DEPLOYED, **change})
    assert named in str(refused.value)


def test_every_missing_piece_is_named_at_once():
    with pytest.raises(ValidationError) as refused:
        settings(**{**DEPLOYED, "limiter_table": None, "openai_api_key": None})
    assert "LIMITER_TABLE" in str(refused.value) and "OPENAI_API_KEY" in str(refused.value)


def test_a_local_worker_keeps_the_per_process_budget_and_may_call_a_compatible_server_without_a_key():
    local = settings(**REQUIRED, openai_base_url="http://127.0.0.1:8000/v1")
    assert local.limiter_table is None and local.openai_api_key is None


def test_a_worker_with_no_key_and_no_server_refuses_instead_of_sending_a_placeholder_key():
    with pytest.raises(ValidationError, match="set OPENAI_API_KEY"):
        settings(**REQUIRED)


def test_the_harness_switches_are_not_settings_of_a_production_worker():
    """Crash points and the benchmark's baseline limiters belong to the harness's own worker entrypoint."""
    assert not set(WorkerSettings.model_fields) & {"crashpoints", "crash_tokens_dir", "limiter_mode"}


def test_a_worker_serves_every_tier_unless_told_and_reads_a_list_highest_first(monkeypatch):
    assert settings(**DEPLOYED).worker_service_tiers == ("high", "normal", "batch")
    monkeypatch.setenv("WORKER_SERVICE_TIERS", "batch, normal")
    assert settings(**DEPLOYED).worker_service_tiers == ("normal", "batch")
    monkeypatch.setenv("WORKER_SERVICE_TIERS", "high")
    assert settings(**DEPLOYED).worker_service_tiers == ("high",)


@pytest.mark.parametrize(
    ("value", "named"),
    [("urgent", "'high', 'normal' or 'batch'"), ("", "at least one"), ("high,high", "named twice")],
)
def test_a_worker_refuses_a_tier_list_it_cannot_serve(monkeypatch, value, named):
    monkeypatch.setenv("WORKER_SERVICE_TIERS", value)
    with pytest.raises(ValidationError, match=named):
        settings(**DEPLOYED)


def test_batch_may_not_be_given_a_larger_share_than_normal():
    with pytest.raises(ValidationError, match="LIMITER_SHARE_BATCH exceeds LIMITER_SHARE_NORMAL"):
        settings(**DEPLOYED, limiter_share_normal=0.4, limiter_share_batch=0.6)
