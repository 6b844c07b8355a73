"""The operations function's command set is closed and complete: every command model has one use case to
run and one result model the CLI reads back, and a command is refused on anything it does not define."""

from __future__ import annotations

import types
import typing

import pytest
from pydantic import ValidationError

from tollgate.ops import models as m
from tollgate.ops.service import _HANDLERS


def _commands() -> list[type[m.Command]]:
    union = typing.get_args(m.OpsRequest)[0]
    return list(typing.get_args(union))


def test_every_command_has_a_use_case_and_a_result():
    commands = _commands()
    names = [command.model_fields["command"].default for command in commands]

    assert set(_HANDLERS) == set(commands)
    assert sorted(m.RESULTS) == sorted(names)
    assert len(set(names)) == len(names)


def test_the_brief_s_command_groups_are_all_there():
    names = {command.model_fields["command"].default for command in _commands()}

    assert {
        "tenants.create",
        "tenants.list",
        "tenants.add-supplier",
        "tenants.set-retention",
        "tenants.unverified-ibans",
        "tenants.budget",
        "tenants.sync-usage-keys",
        "keys.create",
        "keys.list",
        "keys.revoke",
        "jobs.list",
        "jobs.show",
        "jobs.retry",
        "dlq.list",
        "dlq.show",
        "dlq.redrive",
        "dlq.move-all",
        "deliveries.endpoints",
        "deliveries.list",
        "deliveries.replay",
        "reviews.list",
        "reviews.show",
        "reviews.decide",
        "usage",
    } == names


@pytest.mark.parametrize(
    "body",
    [
        {"command": "tenants.create", "name": "acme", "actor": "root"},  # no caller-asserted identity
        {"command": "jobs.retry", "job_id": "00000000-0000-0000-0000-000000000001", "reason": "x"},
        {"command": "dlq.redrive", "reason": "outage over", "limit": 0},
        {"command": "tenants.budget", "tenant": "acme", "monthly_usd": "Infinity"},
        {"command": "tenants.budget", "tenant": "acme", "monthly_usd": "-1"},
        {"command": "jobs.list", "job_type": "invoice"},  # a filter the function would silently not apply
        {"command": "reviews.list", "reason": "nope"},
        {"command": "tenants.list", "limit": 0},
    ],
)
def test_a_command_outside_its_model_is_refused(body):
    with pytest.raises(ValidationError):
        m.REQUEST.validate_python(body)


def test_names_and_reasons_are_trimmed_before_they_are_checked():
    request = m.REQUEST.validate_python(
        {"command": "jobs.retry", "job_id": "00000000-0000-0000-0000-000000000001", "reason": "  why  "}
    )

    assert isinstance(request, m.RetryJob) and request.reason == "why"


def _takes_text(annotation: object) -> bool:
    """``str``, a constrained ``str`` (Annotated), or either of them or None."""
    if annotation is str:
        return True
    if typing.get_origin(annotation) is typing.Annotated:
        return _takes_text(typing.get_args(annotation)[0])
    is_union = isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union
    return is_union and any(_takes_text(arg) for arg in typing.get_args(annotation))


def _text_fields() -> list[tuple[type[m.Command], str]]:
    """Every field of every command that takes text, read from the models."""
    return [
        (command, name)
        for command in _commands()
        for name, field in command.model_fields.items()
        if name != "command" and _takes_text(field.annotation)
    ]


TEXT_FIELDS = _text_fields()
# Long enough for every text field's minimum length, short enough for every maximum.
AROUND = "reason {} here"


@pytest.mark.parametrize(
    ("command", "field"),
    TEXT_FIELDS,
    ids=[f"{c.model_fields['command'].default}.{f}" for c, f in TEXT_FIELDS],
)
@pytest.mark.parametrize("character", ["\x00", "\x1b", "\x7f", "\x85"], ids=["NUL", "ESC", "DEL", "NEL"])
def test_no_text_field_of_any_command_takes_a_control_character(command, field, character):
    """Given a NUL, which PostgreSQL text cannot hold (the command got no answer at all), or another control
    character, in any text field of any command, the command is refused at the boundary, naming the field."""
    body = {"command": command.model_fields["command"].default, field: AROUND.format(character)}

    with pytest.raises(ValidationError) as refused:
        m.REQUEST.validate_python(body)

    on_field = [e for e in refused.value.errors() if e["loc"][1:] == (field,)]
    assert on_field and "control characters" in on_field[0]["msg"], refused.value.errors()


def test_a_reason_or_a_note_may_span_lines_and_a_name_may_not():
    # The fields the test above derives include every name and reason.
    assert {
        (m.CreateTenant, "name"),
        (m.AddSupplier, "tenant"),
        (m.AddSupplier, "supplier"),
        (m.RetryJob, "reason"),
        (m.DecideReview, "note"),
    } <= set(TEXT_FIELDS)
    job = "00000000-0000-0000-0000-000000000001"
    retry = m.REQUEST.validate_python({"command": "jobs.retry", "job_id": job, "reason": "outage\n\tover"})
    decide = m.REQUEST.validate_python(
        {"command": "reviews.decide", "job_id": job, "decision": "reject", "note": "not\r\nours"}
    )

    assert isinstance(retry, m.RetryJob) and retry.reason == "outage\n\tover"
    assert isinstance(decide, m.DecideReview) and decide.note == "not\r\nours"
    with pytest.raises(ValidationError, match="control characters"):
        m.REQUEST.validate_python({"command": "tenants.create", "name": "ac\nme"})


def test_the_ops_handler_keeps_its_responses_out_of_traces():
    """`tenants create` and `keys create` answer with a key that is shown once: Powertools' tracer would
    otherwise store every response as X-Ray metadata."""
    import ast

    from tollgate.settings import REPO_ROOT

    tree = ast.parse((REPO_ROOT / "functions" / "ops" / "handler.py").read_text(encoding="utf-8"))
    decorators = [
        decorator
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef) and node.name == "lambda_handler"
        for decorator in node.decorator_list
    ]
    traced = [
        d
        for d in decorators
        if isinstance(d, ast.Call) and ast.unparse(d.func).endswith("capture_lambda_handler")
    ]

    assert len(traced) == 1
    assert any(k.arg == "capture_response" and ast.unparse(k.value) == "False" for k in traced[0].keywords)
