"""Each Lambda's environment is its settings model: every variable is a field, every field is set or left to
its default on purpose, and required fields are always there."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic_settings import BaseSettings

from stacks.constructs.entrypoint_function import POWERTOOLS_VARIABLES
from tests.infrastructure.cfn import function_by_handler
from tollgate.settings import ApiSettings, AuthorizerSettings, MigrateSettings

pytestmark = pytest.mark.infrastructure

# Fields the stacks leave to the model's default, each for a reason:
# - DATABASE_URL would win over the secret; deployed functions log in with the secret only.
# - DATABASE_ROLE: the model's default is the non-owner role the migrations create (for the migrate
#   function, "" = stay the owner); duplicating it here would let the two drift apart.
# - MIGRATIONS_DIR defaults to migrations/ beside the tollgate package, which is where the code asset has it.
# - RELAY_FUNCTION_NAME: the outbox relay belongs to the pipeline stack, which does not exist yet; without
#   the nudge, accepted jobs wait for the relay's periodic sweep. The pipeline stack sets it.
LEFT_TO_DEFAULT = {
    "api": {"DATABASE_URL", "DATABASE_ROLE", "RELAY_FUNCTION_NAME"},
    "authorizer": {"DATABASE_URL", "DATABASE_ROLE"},
    "migrate": {"DATABASE_URL", "DATABASE_ROLE", "MIGRATIONS_DIR"},
}
ENTRYPOINTS: list[tuple[str, type[BaseSettings], str]] = [
    ("api", ApiSettings, "api_template"),
    ("authorizer", AuthorizerSettings, "api_template"),
    ("migrate", MigrateSettings, "data_template"),
]


def _environment(template: dict[str, Any], entrypoint: str) -> dict[str, Any]:
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
    entrypoint: str, model: type[BaseSettings], template_name: str, request: pytest.FixtureRequest
) -> None:
    """Values known at synth (limits, sizes) must be accepted at cold start; tokens are checked in AWS."""
    environment = _environment(request.getfixturevalue(template_name), entrypoint)
    literal = {
        name.lower(): value
        for name, value in environment.items()
        if isinstance(value, str) and name not in POWERTOOLS_VARIABLES
    }
    placeholders = {"database_secret_arn": "arn:aws:secretsmanager:eu-west-1:111122223333:secret:x"}
    if "documents_bucket" in model.model_fields:
        placeholders["documents_bucket"] = "bucket"

    model.model_validate({**placeholders, **literal})


def test_database_host_is_the_proxy_for_application_code(api_template: dict[str, Any]) -> None:
    for entrypoint in ("api", "authorizer"):
        host = _environment(api_template, entrypoint)["DATABASE_HOST"]
        assert "DatabaseProxy" in str(host) and "Endpoint" in str(host)
