"""Each entrypoint's environment is its settings model: every variable is a field, every field is set or left
to its default on purpose, and required fields are always there. Entrypoints are the Lambdas and the ECS
worker's container, whose environment includes its secrets."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic_settings import BaseSettings

from layers.database_ca import LAYER_RELATIVE_PATH
from stacks.config import REPO_ROOT
from stacks.constructs.entrypoint_function import POWERTOOLS_VARIABLES
from stacks.worker_stack import WORKER_DATABASE_CA_BUNDLE
from tests.infrastructure.cfn import function_by_handler, only, with_stand_ins
from tollgate.settings import (
    SHIPPED_CA_BUNDLE,
    ApiSettings,
    AuthorizerSettings,
    MigrateSettings,
    NotificationSettings,
    OpsSettings,
    RelaySettings,
    SchedulerSettings,
    WebhookAttemptSettings,
    WorkerSettings,
)

pytestmark = pytest.mark.infrastructure

# Fields the stacks leave to the model's default, each for a reason:
# - DATABASE_URL would win over the secret; deployed code logs in with the secret only.
# - DATABASE_ROLE: the model's default is the role the migrations create for that work (tollgate_app for
#   tenant requests, tollgate_system for the relay, scheduler and worker; "" = stay the owner for the
#   migrate function); duplicating it here would let the two drift apart.
# - MIGRATIONS_DIR defaults to migrations/ beside the tollgate package, which is where the code asset has it.
# - OPENAI_BASE_URL: in AWS the worker calls OpenAI's own endpoint.
# - WORKER_ID is derived from the task's hostname and process id at start, unique per task.
# - LIMITER_SHARDS (0 = derived from the rate), LIMITER_PERMIT_TTL_SECONDS, LIMITER_AIMD_INCREASE/DECREASE
#   and LIMITER_UNAVAILABLE_ALLOWANCE_PER_MINUTE (0 = fail closed) keep the model's defaults, which are
#   the production values; no stage tunes them yet.
# - PROVIDER_BATCH_ENQUEUED_TOKENS and PROVIDER_BATCH_ENQUEUED_TOKENS_BY_MODEL: the Batch API's enqueued-token
#   limit per model keeps the model's default until a stage names its OpenAI account's own limits.
# - WEBHOOKS_ALLOW_PRIVATE_TARGETS: local development only; deployed endpoints
#   must be HTTPS and public, and the sender refuses private addresses.
# - REDRIVE_EXTRA_ATTEMPTS and REDRIVE_DEADLINE_SECONDS (ops): the model's defaults are what the support CLI
#   uses locally too; no stage tunes how much budget a redriven job gets.
# SYSTEM_MONTHLY_BUDGET_USD is set only when the stage names a system budget (none by default).
LEFT_TO_DEFAULT = {
    "api": {
        "DATABASE_URL",
        "DATABASE_ROLE",
        "DATABASE_WAIT_SECONDS",
        "WEBHOOKS_ALLOW_PRIVATE_TARGETS",
        "SYSTEM_MONTHLY_BUDGET_USD",
    },
    "authorizer": {"DATABASE_URL", "DATABASE_ROLE", "DATABASE_WAIT_SECONDS"},
    "websocket_authorizer": {"DATABASE_URL", "DATABASE_ROLE", "DATABASE_WAIT_SECONDS"},
    "websocket": {"DATABASE_URL", "DATABASE_ROLE", "DATABASE_WAIT_SECONDS"},
    "notifier": {"DATABASE_URL", "DATABASE_ROLE", "DATABASE_WAIT_SECONDS"},
    "migrate": {
        "DATABASE_URL",
        "DATABASE_ROLE",
        "DATABASE_WAIT_SECONDS",
        "MIGRATIONS_DIR",
    },
    "outbox_relay": {"DATABASE_URL", "DATABASE_ROLE", "DATABASE_WAIT_SECONDS"},
    "scheduler": {"DATABASE_URL", "DATABASE_ROLE", "DATABASE_WAIT_SECONDS"},
    "webhook_attempt": {
        "DATABASE_URL",
        "DATABASE_ROLE",
        "DATABASE_WAIT_SECONDS",
        "WEBHOOKS_ALLOW_PRIVATE_TARGETS",
    },
    "ops": {
        "DATABASE_URL",
        "DATABASE_ROLE",
        "DATABASE_WAIT_SECONDS",
        "REDRIVE_EXTRA_ATTEMPTS",
        "REDRIVE_DEADLINE_SECONDS",
    },
    "worker": {
        "DATABASE_URL",
        "DATABASE_ROLE",
        "DATABASE_WAIT_SECONDS",
        "OPENAI_BASE_URL",
        "WORKER_ID",
        "LIMITER_SHARDS",
        "LIMITER_PERMIT_TTL_SECONDS",
        "LIMITER_AIMD_INCREASE",
        "LIMITER_AIMD_DECREASE",
        "LIMITER_UNAVAILABLE_ALLOWANCE_PER_MINUTE",
        "PROVIDER_BATCH_ENQUEUED_TOKENS",
        "PROVIDER_BATCH_ENQUEUED_TOKENS_BY_MODEL",
        "SYSTEM_MONTHLY_BUDGET_USD",
    },
}
# Only these reach the worker as ECS secrets, never as plain environment variables.
WORKER_SECRETS = {"OPENAI_API_KEY"}
ENTRYPOINTS: list[tuple[str, type[BaseSettings], str]] = [
    ("api", ApiSettings, "api_template"),
    ("authorizer", AuthorizerSettings, "api_template"),
    ("websocket_authorizer", AuthorizerSettings, "notifications_template"),
    ("websocket", NotificationSettings, "notifications_template"),
    ("notifier", NotificationSettings, "notifications_template"),
    ("migrate", MigrateSettings, "data_template"),
    ("outbox_relay", RelaySettings, "pipeline_template"),
    ("scheduler", SchedulerSettings, "pipeline_template"),
    ("webhook_attempt", WebhookAttemptSettings, "delivery_template"),
    ("worker", WorkerSettings, "worker_template"),
    ("ops", OpsSettings, "ops_template"),
]


def _worker_container(template: dict[str, Any]) -> dict[str, Any]:
    _, task = only(template, "AWS::ECS::TaskDefinition")
    (container,) = task["Properties"]["ContainerDefinitions"]
    definition: dict[str, Any] = container
    return definition


def _environment(template: dict[str, Any], entrypoint: str) -> dict[str, Any]:
    """Variable -> value; a worker secret's value is the reference ECS resolves it from."""
    if entrypoint == "worker":
        container = _worker_container(template)
        return {
            **{variable["Name"]: variable["Value"] for variable in container.get("Environment", [])},
            **{secret["Name"]: secret["ValueFrom"] for secret in container.get("Secrets", [])},
        }
    _, function = function_by_handler(template, f"functions.{entrypoint}.handler.lambda_handler")
    variables: dict[str, Any] = function["Properties"]["Environment"]["Variables"]
    return variables


@pytest.mark.parametrize(("entrypoint", "model", "template_name"), ENTRYPOINTS)
def test_environment_is_exactly_the_settings_model(
    entrypoint: str, model: type[BaseSettings], template_name: str, request: pytest.FixtureRequest
) -> None:
    environment = _environment(request.getfixturevalue(template_name), entrypoint)
    fields = {name.upper() for name in model.model_fields}

    assert set(environment) - POWERTOOLS_VARIABLES == fields - LEFT_TO_DEFAULT[entrypoint]
    assert set(environment) >= POWERTOOLS_VARIABLES


@pytest.mark.parametrize(("entrypoint", "model", "template_name"), ENTRYPOINTS)
def test_required_fields_are_always_set(
    entrypoint: str, model: type[BaseSettings], template_name: str, request: pytest.FixtureRequest
) -> None:
    environment = _environment(request.getfixturevalue(template_name), entrypoint)
    required = {name.upper() for name, field in model.model_fields.items() if field.is_required()}

    assert required <= set(environment)
    assert not required & LEFT_TO_DEFAULT[entrypoint]


@pytest.mark.parametrize(("entrypoint", "model", "template_name"), ENTRYPOINTS)
def test_literal_values_pass_the_models_validation(
    entrypoint: str,
    model: type[BaseSettings],
    template_name: str,
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What the stack sets is read back the way a cold start reads it: from the environment, so JSON values
    (model prices) are parsed as pydantic-settings parses them. Tokens resolve at deploy and get a stand-in."""
    environment = _environment(request.getfixturevalue(template_name), entrypoint)
    for name in model.model_fields:
        monkeypatch.delenv(name.upper(), raising=False)
    for name, value in environment.items():
        if name not in POWERTOOLS_VARIABLES:
            monkeypatch.setenv(name, with_stand_ins(value))
    if "DATABASE_CA_BUNDLE" in environment:
        # The bundle's path exists only inside the layer or the image (checked below); any file stands in.
        monkeypatch.setenv("DATABASE_CA_BUNDLE", str(SHIPPED_CA_BUNDLE))

    settings = model()

    literal = {name for name, value in environment.items() if isinstance(value, str)} - POWERTOOLS_VARIABLES
    assert all(getattr(settings, name.lower()) is not None for name in literal)


def test_worker_secrets_are_ecs_secrets_and_nothing_else_is(worker_template: dict[str, Any]) -> None:
    container = _worker_container(worker_template)
    plain = {variable["Name"] for variable in container["Environment"]}
    secrets = {secret["Name"] for secret in container["Secrets"]}

    assert secrets == WORKER_SECRETS
    assert not plain & WORKER_SECRETS


def test_database_host_is_the_proxy_for_application_code(
    api_template: dict[str, Any],
    pipeline_template: dict[str, Any],
    delivery_template: dict[str, Any],
    worker_template: dict[str, Any],
    ops_template: dict[str, Any],
    notifications_template: dict[str, Any],
) -> None:
    for template, entrypoint in (
        (notifications_template, "websocket_authorizer"),
        (notifications_template, "websocket"),
        (notifications_template, "notifier"),
        (api_template, "api"),
        (api_template, "authorizer"),
        (pipeline_template, "outbox_relay"),
        (pipeline_template, "scheduler"),
        (delivery_template, "webhook_attempt"),
        (worker_template, "worker"),
        (ops_template, "ops"),
    ):
        host = _environment(template, entrypoint)["DATABASE_HOST"]
        assert "DatabaseProxy" in str(host) and "Endpoint" in str(host), entrypoint


def test_every_database_client_verifies_with_the_bundle_shipped_beside_it(
    api_template: dict[str, Any],
    data_template: dict[str, Any],
    pipeline_template: dict[str, Any],
    delivery_template: dict[str, Any],
    worker_template: dict[str, Any],
    ops_template: dict[str, Any],
) -> None:
    """Lambdas read the layer's bundle (public roots for RDS Proxy, RDS roots for the cluster), the worker
    the copy its Dockerfile puts at the same place under its working directory."""
    lambda_bundle = f"/opt/python/{LAYER_RELATIVE_PATH.as_posix()}"
    for template, entrypoint in (
        (api_template, "api"),
        (api_template, "authorizer"),
        (data_template, "migrate"),
        (pipeline_template, "outbox_relay"),
        (pipeline_template, "scheduler"),
        (delivery_template, "webhook_attempt"),
        (ops_template, "ops"),
    ):
        assert _environment(template, entrypoint)["DATABASE_CA_BUNDLE"] == lambda_bundle, entrypoint
    assert _environment(worker_template, "worker")["DATABASE_CA_BUNDLE"] == WORKER_DATABASE_CA_BUNDLE

    dockerfile = (REPO_ROOT / "worker" / "Dockerfile").read_text()
    image_path = WORKER_DATABASE_CA_BUNDLE.removeprefix("/app/")
    assert f"COPY build/layer/python/{LAYER_RELATIVE_PATH.as_posix()} ./{image_path}" in dockerfile
    assert "WORKDIR /app" in dockerfile
    dockerignore = (REPO_ROOT / ".dockerignore").read_text().splitlines()
    assert f"!build/layer/python/{LAYER_RELATIVE_PATH.as_posix()}" in dockerignore


def test_api_nudges_the_pipelines_relay(api_template: dict[str, Any]) -> None:
    relay = _environment(api_template, "api")["RELAY_FUNCTION_NAME"]

    assert relay["Fn::GetStackOutput"]["StackName"] == "Tollgate-dev-Pipeline"
    assert "OutboxRelayFunction" in relay["Fn::GetStackOutput"]["OutputName"]


@pytest.mark.parametrize(
    ("entrypoint", "template_name"), [("api", "api_template"), ("outbox_relay", "pipeline_template")]
)
def test_relay_and_api_start_deliveries_on_the_delivery_stacks_dispatcher(
    entrypoint: str, template_name: str, request: pytest.FixtureRequest, delivery_template: dict[str, Any]
) -> None:
    arn = _environment(request.getfixturevalue(template_name), entrypoint)["WEBHOOK_STATE_MACHINE_ARN"]
    output = arn["Fn::GetStackOutput"]
    (dispatcher_id,) = [
        logical_id
        for logical_id, resource in delivery_template["Resources"].items()
        if resource["Type"] == "AWS::StepFunctions::StateMachine"
    ]

    assert output["StackName"] == "Tollgate-dev-Delivery"
    assert delivery_template["Outputs"][output["OutputName"]]["Value"] == {"Ref": dispatcher_id}


def test_scheduler_and_worker_share_one_retry_policy(
    pipeline_template: dict[str, Any], worker_template: dict[str, Any]
) -> None:
    scheduler = _environment(pipeline_template, "scheduler")
    worker = _environment(worker_template, "worker")
    retry_fields = {"RETRY_BASE_SECONDS", "RETRY_CAP_SECONDS", "ATTEMPT_TIMEOUT_SECONDS"}

    assert {name: scheduler[name] for name in retry_fields} == {name: worker[name] for name in retry_fields}
