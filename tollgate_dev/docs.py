"""Generates the README's configuration reference from the settings models, and its job types table from the
registry, so neither can drift from the code."""

from __future__ import annotations

import json

from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined
from pydantic_settings import BaseSettings

from tollgate.jobtypes.registry import JOB_TYPES
from tollgate.settings import (
    REPO_ROOT,
    ApiSettings,
    AuthorizerSettings,
    MigrateSettings,
    OpsSettings,
    RelaySettings,
    SchedulerSettings,
    SupportSettings,
    TenantProvisioningSettings,
    WebhookAttemptSettings,
    WorkerSettings,
)

ENTRYPOINTS: dict[str, type[BaseSettings]] = {
    "api": ApiSettings,
    "authorizer": AuthorizerSettings,
    "migrate": MigrateSettings,
    "relay": RelaySettings,
    "scheduler": SchedulerSettings,
    "worker": WorkerSettings,
    "webhook_attempt": WebhookAttemptSettings,
    "support CLI": SupportSettings,
    "tenants CLI": TenantProvisioningSettings,
    "ops": OpsSettings,
}
START, END = "<!-- configuration:start -->", "<!-- configuration:end -->"
TYPES_START, TYPES_END = "<!-- job-types:start -->", "<!-- job-types:end -->"


def _default(field: FieldInfo) -> str:
    if field.default_factory is not None:
        return "derived at start"
    if field.default is PydanticUndefined:
        return "required"
    if field.default is None or field.default == "":
        return "none"
    value = field.default
    if hasattr(value, "relative_to"):
        value = value.relative_to(REPO_ROOT)
    if isinstance(value, dict | list):
        value = json.dumps(value, separators=(",", ":"))
    return f"`{value}`"


def configuration_reference() -> str:
    rows: dict[str, tuple[str, str, list[str]]] = {}
    for entrypoint, model in ENTRYPOINTS.items():
        for name, field in model.model_fields.items():
            variable = name.upper()
            default, description, users = rows.get(variable, (_default(field), field.description or "", []))
            if _default(field) != default:
                default = f"{default}; {entrypoint}: {_default(field)}"
            users.append(entrypoint)
            rows[variable] = (default, description, users)
    lines = ["| variable | default | used by | meaning |", "| --- | --- | --- | --- |"]
    for variable, (default, description, users) in sorted(rows.items()):
        lines.append(f"| `{variable}` | {default} | {', '.join(users)} | {description} |")
    return "\n".join(lines)


def job_types_reference() -> str:
    lines = [
        "| `job_type` | result schema | options | policy | small model when | output tokens | queue |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for kind in JOB_TYPES.values():
        options = ", ".join(f"`{name}`" for name in kind.options.model_fields) or "none"
        routing = kind.routing
        languages = ", ".join(sorted(routing.small_languages)) if routing.small_languages else "any"
        small = (
            f"≤ {routing.max_pages} pages, ≤ {routing.max_chars} characters, ≤ {routing.max_lines} lines; "
            f"language: {languages}"
        )
        lines.append(
            f"| `{kind.name}` | `{kind.schema_version}` | {options} | `{kind.policy_version}` | {small} | "
            f"{kind.max_output_tokens} | `{kind.queue}` |"
        )
    return "\n".join(lines)


def _replace(text: str, start: str, end: str, body: str) -> str:
    head, _, rest = text.partition(start)
    _, _, tail = rest.partition(end)
    return f"{head}{start}\n{body}\n{end}{tail}"


def render_readme(readme: str) -> str:
    """The README with its generated sections (configuration, job types) replaced by their tables."""
    readme = _replace(readme, START, END, configuration_reference())
    return _replace(readme, TYPES_START, TYPES_END, job_types_reference())
