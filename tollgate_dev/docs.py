"""Generates the README's configuration reference from the settings models, so the two cannot drift."""

from __future__ import annotations

import json

from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined
from pydantic_settings import BaseSettings

from tollgate.settings import (
    REPO_ROOT,
    ApiSettings,
    AuthorizerSettings,
    MigrateSettings,
    RelaySettings,
    SchedulerSettings,
    SupportSettings,
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
}
START, END = "<!-- configuration:start -->", "<!-- configuration:end -->"


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


def render_readme(readme: str) -> str:
    """The README with its configuration section replaced by the generated table."""
    head, _, rest = readme.partition(START)
    _, _, tail = rest.partition(END)
    return f"{head}{START}\n{configuration_reference()}\n{END}{tail}"
