"""Generates the parts of the README that the code decides: its table of contents from its headings, the
configuration reference from the settings models, the document limits from the models that enforce them,
and the job types table from the registry, so none can drift."""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined
from pydantic_settings import BaseSettings

from tollgate.core.documents import InlineDocument, OcrPage
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
CONTENTS_START, CONTENTS_END = "<!-- contents:start -->", "<!-- contents:end -->"
LIMITS_START, LIMITS_END = "<!-- document-limits:start -->", "<!-- document-limits:end -->"


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


def _bound(metadata: list[Any], name: str) -> int:
    return next(int(getattr(item, name)) for item in metadata if getattr(item, name, None) is not None)


def document_limits() -> str:
    """What a document may be, from the models and settings that refuse anything else."""
    pages = InlineDocument.model_fields["pages"].metadata
    text = OcrPage.model_fields["text"].metadata
    largest = ApiSettings.model_fields["max_document_bytes"].default
    return (
        f"A document is {_bound(pages, 'min_length')} to {_bound(pages, 'max_length')} pages of OCR text "
        f"(`document.pages[].text`), each page {_bound(text, 'min_length')} to {_bound(text, 'max_length')} "
        f"characters, and at most {largest // 1024 // 1024} MiB in all (`MAX_DOCUMENT_BYTES`, UTF-8, pages "
        "joined by a form feed), sent inline or stored in S3 and named by `s3_key` and `version_id`. "
        "A larger one is `413 payload-too-large`; one outside the page bounds is `422`."
    )


def _anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def contents(readme: str) -> str:
    """A table of contents: each section (``##``) under the contents, with its subsections (``###``)."""
    body = readme.partition(CONTENTS_END)[2]
    lines: list[str] = []
    children = 0
    fence = False
    for line in body.splitlines():
        fence = fence != line.startswith("```")
        if fence or not line.startswith(("## ", "### ")):
            continue
        level, _, heading = line.partition(" ")
        link = f"[{heading.replace('`', '')}](#{_anchor(heading.replace('`', ''))})"
        if level == "##":
            lines.append(f"- {link}")
            children = 0
        else:
            lines[-1] += f"{' ·' if children else ':'} {link}"
            children += 1
    return "\n".join(lines)


def _replace(text: str, start: str, end: str, body: str) -> str:
    head, _, rest = text.partition(start)
    _, _, tail = rest.partition(end)
    return f"{head}{start}\n{body}\n{end}{tail}"


def render_readme(readme: str) -> str:
    """The README with its generated sections (contents, configuration, document limits, job types) in
    place."""
    readme = _replace(readme, START, END, configuration_reference())
    readme = _replace(readme, CONTENTS_START, CONTENTS_END, contents(readme))
    readme = _replace(readme, LIMITS_START, LIMITS_END, document_limits())
    return _replace(readme, TYPES_START, TYPES_END, job_types_reference())
