"""The operations function as a stage runs it, against real PostgreSQL and moto: behind its URL stand-in,
only a request SigV4-signed with a known key runs, and the audit trail names the ARN the signature proved;
a bad command is refused with a clear problem and writes nothing; each refusal keeps its problem type and
status, and the CLI's stage mode reports it with the local mode's message and exit code."""

from __future__ import annotations

import contextlib
import json
import secrets
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import psycopg
import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from pydantic import SecretStr
from typer.testing import CliRunner

from tollgate.cli.main import app
from tollgate.cli.remote import OpsClient
from tollgate.core.errors import TollgateError
from tollgate.ops import models as ops
from tollgate.ops.function_url import handle_function_url
from tollgate.ops.service import OpsDeps
from tollgate.settings import OpsSettings
from tollgate.support.configuration import LOCAL_AWS_KEY, LOCAL_AWS_REGION, LOCAL_AWS_SECRET
from tollgate.support.configuration import local_aws as moto_endpoint
from tollgate.wiring import build_ops
from tollgate_dev.local.aws import create_job_type_queues, dlq_urls, queue_urls
from tollgate_dev.local.ops import LOCAL_OPERATOR_ARN, LocalOpsFunction

pytestmark = pytest.mark.integration

OPERATOR = Credentials(LOCAL_AWS_KEY, LOCAL_AWS_SECRET)


@pytest.fixture
def deps(clean_db, local_aws) -> Iterator[OpsDeps]:
    all_queues = create_job_type_queues(f"ops-{secrets.token_hex(4)}", max_receive_count=2)
    settings = OpsSettings(
        database_url=SecretStr(clean_db),
        job_queue_urls=queue_urls(all_queues),
        job_dlq_urls=dlq_urls(all_queues),
    )
    built = build_ops(settings, aws=moto_endpoint(local_aws.endpoint_url))
    yield built
    built.db.close()


@pytest.fixture
def function(deps) -> Iterator[LocalOpsFunction]:
    started = LocalOpsFunction(deps).start()
    yield started
    started.stop()


def counts(url: str) -> tuple[int, int]:
    with psycopg.connect(url) as conn:
        tenants = conn.execute("SELECT count(*) FROM tenants").fetchone()[0]
        audits = conn.execute("SELECT count(*) FROM support_audit").fetchone()[0]
    return tenants, audits


def audit_rows(url: str) -> list[tuple[str, str, str, str]]:
    with psycopg.connect(url) as conn:
        return conn.execute(
            "SELECT actor, action, target, outcome FROM support_audit ORDER BY audit_id"
        ).fetchall()


def post(url: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def signed(
    url: str,
    body: bytes,
    credentials: Credentials,
    *,
    service: str = "lambda",
    region: str = LOCAL_AWS_REGION,
) -> dict[str, str]:
    request = AWSRequest(method="POST", url=url, data=body, headers={"content-type": "application/json"})
    SigV4Auth(credentials, service, region).add_auth(request)
    return dict(request.headers.items())


def event(body: Any, *, caller: str | None = LOCAL_OPERATOR_ARN, method: str = "POST") -> dict[str, Any]:
    context: dict[str, Any] = {"http": {"method": method}}
    if caller is not None:
        context["authorizer"] = {"iam": {"userArn": caller, "accountId": "123456789012"}}
    text = body if isinstance(body, str) else json.dumps(body)
    return {"requestContext": context, "body": text, "isBase64Encoded": False}


def problem(response: dict[str, Any]) -> dict[str, Any]:
    assert response["headers"]["content-type"] == "application/problem+json"
    body: dict[str, Any] = json.loads(response["body"])
    return body


# Signatures.


def test_a_signed_command_runs_and_the_audit_names_the_arn_the_signature_proved(function, clean_db):
    client = OpsClient(function.url, LOCAL_AWS_REGION, OPERATOR)

    created = client.call(ops.CreateTenant(name="acme"), ops.TenantCreated)

    assert created.name == "acme" and created.api_key.startswith("tg_")
    assert audit_rows(clean_db) == [
        (LOCAL_OPERATOR_ARN, "tenant_create", "acme", "requested"),
        (LOCAL_OPERATOR_ARN, "tenant_create", "acme", "done"),
    ]
    assert created.api_key not in json.dumps(audit_rows(clean_db)), "the key is shown once, never kept"


def test_an_unsigned_request_is_refused_before_anything_runs(function, clean_db):
    body = ops.CreateTenant(name="acme").model_dump_json().encode()

    status, answer = post(function.url, body, {"content-type": "application/json"})

    assert status == 403
    assert json.loads(answer) == {"Message": "Forbidden"}
    assert counts(clean_db) == (0, 0)


@pytest.mark.parametrize(
    "forgery",
    ["wrong secret", "unknown key", "body changed after signing", "other service", "other region", "stale"],
)
def test_a_badly_signed_request_is_refused_before_anything_runs(forgery, deps, function, clean_db):
    body = ops.CreateTenant(name="acme").model_dump_json().encode()
    credentials = {
        "wrong secret": Credentials(LOCAL_AWS_KEY, "not-the-secret"),
        "unknown key": Credentials("AKIDSOMEONEELSE", LOCAL_AWS_SECRET),
    }.get(forgery, OPERATOR)
    headers = signed(
        function.url,
        body,
        credentials,
        service="sqs" if forgery == "other service" else "lambda",
        region="us-east-1" if forgery == "other region" else LOCAL_AWS_REGION,
    )
    target = function
    if forgery == "body changed after signing":
        body = ops.CreateTenant(name="mallory").model_dump_json().encode()
    if forgery == "stale":
        # The same function an hour later: a captured request cannot be replayed after the skew window.
        target = LocalOpsFunction(deps, now=lambda: time.time() + 3600).start()
    try:
        status, _ = post(target.url, body, headers)
    finally:
        if target is not function:
            target.stop()

    assert status == 403
    assert counts(clean_db) == (0, 0)


# Error mapping of the function's own request path.


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ("{not json", "not a valid command"),
        ({"command": "tenants.drop-all"}, "command"),
        ({"command": "tenants.create"}, "name"),
        ({"command": "tenants.create", "name": "acme", "admin": True}, "admin"),
        ({"command": "tenants.create", "name": "x" * 101}, "name"),
        ({"command": "tenants.set-retention", "tenant": "acme", "days": 0}, "days"),
        ({"command": "dlq.redrive", "reason": "no"}, "reason"),
        ({"command": "keys.revoke", "tenant": "acme", "key_id": "not-a-uuid"}, "key_id"),
    ],
)
def test_a_malformed_command_is_a_400_that_writes_nothing(body, says, deps, clean_db):
    response = handle_function_url(deps, event(body))

    assert response["statusCode"] == 400
    refusal = problem(response)
    assert refusal["type"] == "invalid-request" and says in refusal["detail"]
    assert counts(clean_db) == (0, 0)


def test_without_a_verified_identity_nothing_runs(deps, clean_db):
    response = handle_function_url(deps, event({"command": "tenants.create", "name": "acme"}, caller=None))

    assert response["statusCode"] == 403
    assert problem(response)["type"] == "forbidden"
    assert counts(clean_db) == (0, 0)


def test_only_post_runs_commands(deps, clean_db):
    response = handle_function_url(deps, event({"command": "keys.list", "tenant": "acme"}, method="GET"))

    assert response["statusCode"] == 405


def test_domain_refusals_keep_their_problem_type_and_status(deps, clean_db):
    unknown_job = handle_function_url(
        deps, event({"command": "jobs.show", "job_id": "00000000-0000-0000-0000-000000000000"})
    )
    unknown_tenant = handle_function_url(deps, event({"command": "keys.list", "tenant": "nobody"}))
    bad_range = handle_function_url(
        deps, event({"command": "usage", "from_day": "2026-13-01", "group_by": "job_type"})
    )
    bad_scope = handle_function_url(
        deps, event({"command": "tenants.create", "name": "acme", "scopes": ["root"]})
    )

    assert (unknown_job["statusCode"], problem(unknown_job)["type"]) == (404, "not-found")
    assert (unknown_tenant["statusCode"], problem(unknown_tenant)["detail"]) == (
        400,
        "no tenant named 'nobody'",
    )
    assert (bad_range["statusCode"], problem(bad_range)["type"]) == (422, "validation-failed")
    assert problem(bad_range)["extensions"]["errors"][0]["msg"] == "not a date (YYYY-MM-DD)"
    assert (bad_scope["statusCode"], problem(bad_scope)["type"]) == (400, "invalid-request")
    assert counts(clean_db) == (0, 0), "refused before the first audit row"


def test_a_refused_change_is_audited_as_refused(deps, clean_db):
    first = handle_function_url(deps, event({"command": "tenants.create", "name": "acme"}))
    again = handle_function_url(deps, event({"command": "tenants.create", "name": "acme"}))

    assert first["statusCode"] == 200
    assert again["statusCode"] == 400
    assert "already exists" in problem(again)["detail"]
    assert [row[3] for row in audit_rows(clean_db)] == ["requested", "done", "requested", "refused"]


class _Unreachable:
    """A database that cannot be reached: every transaction fails to connect."""

    q = None

    @contextlib.contextmanager
    def transaction(self, *args: Any) -> Iterator[None]:
        raise psycopg.OperationalError("connection refused")
        yield

    def close(self) -> None:
        pass


def test_an_unreachable_database_is_a_503_dependency_problem(deps):
    down = replace(deps, support=replace(deps.support, db=_Unreachable()))  # type: ignore[arg-type]

    response = handle_function_url(down, event({"command": "jobs.list"}))

    assert response["statusCode"] == 503
    assert problem(response)["type"] == "dependency-unavailable"


# Text PostgreSQL cannot hold, and errors of the database about a command's values.


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"command": "tenants.create", "name": "ac\u0000me"}, "name"),
        ({"command": "keys.list", "tenant": "ac\u0000me"}, "tenant"),
        ({"command": "tenants.add-supplier", "tenant": "ac\u0000me", "supplier": "Muster GmbH"}, "tenant"),
        ({"command": "tenants.set-retention", "tenant": "acme\u0000", "days": 30}, "tenant"),
    ],
    ids=["tenant-created", "tenant-looked-up", "supplier-added-for-it", "retention-set-for-it"],
)
def test_a_nul_in_a_name_is_answered_with_a_400_through_the_url_and_writes_nothing(
    body, field, function, clean_db
):
    """Given a signed command whose tenant name holds a NUL (which PostgreSQL text cannot hold, and which
    got no answer at all), when it is sent to the function's URL, the answer is a 400 problem naming the
    field, and neither a tenant nor an audit row is written."""
    raw = json.dumps(body).encode()

    status, answer = post(function.url, raw, signed(function.url, raw, OPERATOR))

    assert status == 400, answer
    refusal = json.loads(answer)
    assert refusal["type"] == "invalid-request"
    assert f"{body['command']}.{field}: must not contain control characters" in refusal["detail"]
    assert counts(clean_db) == (0, 0)


class _Refusing:
    """A database that refuses a value of the command, as PostgreSQL refuses a NUL in text or in JSON."""

    q = None

    @contextlib.contextmanager
    def transaction(self, *args: Any) -> Iterator[None]:
        raise psycopg.errors.UntranslatableCharacter("unsupported Unicode escape sequence")
        yield

    def close(self) -> None:
        pass


def test_a_value_the_database_refuses_is_a_400_problem_not_a_missing_answer(deps):
    refusing = replace(deps, support=replace(deps.support, db=_Refusing()))  # type: ignore[arg-type]

    response = handle_function_url(refusing, event({"command": "keys.list", "tenant": "acme"}))

    assert response["statusCode"] == 400
    refusal = problem(response)
    assert refusal["type"] == "invalid-request"
    assert refusal["detail"] == "a value in the command cannot be stored: unsupported Unicode escape sequence"


class _Broken:
    """A database adapter with a bug: every transaction raises what no error mapping expects."""

    q = None

    @contextlib.contextmanager
    def transaction(self, *args: Any) -> Iterator[None]:
        raise RuntimeError("a bug")
        yield

    def close(self) -> None:
        pass


def test_the_url_answers_a_function_that_raises_as_lambda_does(deps):
    """A function that raises still gets its caller an answer: the 502 a function URL gives, not a dropped
    connection."""
    broken = LocalOpsFunction(replace(deps, support=replace(deps.support, db=_Broken()))).start()  # type: ignore[arg-type]
    raw = json.dumps({"command": "keys.list", "tenant": "acme"}).encode()
    try:
        status, answer = post(broken.url, raw, signed(broken.url, raw, OPERATOR))
    finally:
        broken.stop()

    assert (status, json.loads(answer)) == (502, {"Message": "Internal Server Error"})


# The CLI's stage mode.


def stage_cli(url: str, *args: str):
    return CliRunner().invoke(app, ["--ops-url", url, *args], env={"COLUMNS": "200"}, catch_exceptions=False)


NO_JOB = "00000000-0000-0000-0000-00000000beef"


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("tenants", "keys", "list", "nobody"), "no tenant named 'nobody'"),
        (("tenants", "set-retention", "nobody", "30"), "no tenant named 'nobody'"),
        (("jobs", "show", NO_JOB), f"no job {NO_JOB}"),
        (("jobs", "list", "--tenant", "nobody"), "no tenant named 'nobody'"),
        (("deliveries", "endpoints", "--tenant", "nobody"), "no tenant named 'nobody'"),
        (("reviews", "show", NO_JOB), NO_JOB),
        (("usage", "--from", "2026-13-01"), "not a date"),
    ],
)
def test_stage_mode_reports_a_refusal_like_local_mode(args, says, function, clean_db, monkeypatch, tmp_path):
    monkeypatch.setenv("DATABASE_URL", clean_db)

    there = stage_cli(function.url, *args)
    here = CliRunner().invoke(app, [*args, "--data-dir", str(tmp_path)], env={"COLUMNS": "200"})

    assert there.exit_code == here.exit_code == 2
    assert there.output == here.output
    assert says in there.output


def test_stage_mode_refuses_bad_options_before_sending_anything(function, clean_db):
    too_long = stage_cli(function.url, "tenants", "create", "x" * 101)

    assert too_long.exit_code == 2
    assert counts(clean_db) == (0, 0)


def test_stage_mode_says_when_the_url_refuses_the_signature(function, clean_db, monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")

    refused = stage_cli(function.url, "tenants", "create", "acme")

    assert refused.exit_code == 1
    assert "HTTP 403" in refused.output and "lambda:InvokeFunctionUrl" in refused.output
    assert counts(clean_db) == (0, 0)


def test_a_remote_refusal_is_a_tollgate_error_with_the_functions_detail(function, clean_db):
    client = OpsClient(function.url, LOCAL_AWS_REGION, OPERATOR)

    with pytest.raises(TollgateError, match="no tenant named 'nobody'"):
        client.call(ops.ListKeys(tenant="nobody"), ops.KeyList)


# Finding a stage's function.


@pytest.fixture
def stage_stack(local_aws) -> Iterator[str]:
    """A stand-in `Tollgate-<stage>-Ops` stack in moto's CloudFormation with the output the CLI reads."""
    import boto3

    stage = f"t{secrets.token_hex(3)}"
    name = f"Tollgate-{stage}-Ops"
    template = {
        "Resources": {"Marker": {"Type": "AWS::SQS::Queue"}},
        "Outputs": {"OpsFunctionUrl": {"Value": "https://abc123xyz.lambda-url.eu-central-1.on.aws/"}},
    }
    cloudformation = boto3.client("cloudformation")
    cloudformation.create_stack(StackName=name, TemplateBody=json.dumps(template))
    yield stage
    cloudformation.delete_stack(StackName=name)


def test_a_stage_s_url_comes_from_its_ops_stack_and_signs_for_the_url_s_region(stage_stack):
    from tollgate.cli.remote import Target, client_for

    client = client_for(Target(stage_stack, None))

    assert client.url == "https://abc123xyz.lambda-url.eu-central-1.on.aws/"
    assert client.region == "eu-central-1"


def test_a_stage_without_an_ops_stack_is_a_clear_exit_1(local_aws):
    result = CliRunner().invoke(app, ["--stage", "nowhere", "jobs", "list"], catch_exceptions=False)

    assert result.exit_code == 1
    assert "Tollgate-nowhere-Ops" in result.output


@pytest.mark.parametrize(
    "args",
    [
        ("tenants", "keys", "list", "acme"),
        ("usage", "--tenant", "acme", "--from", "2026-01-01", "--to", "2026-01-31", "--output", "json"),
        ("usage", "--from", "2026-01-01", "--to", "2026-01-31"),
        ("jobs", "list", "--tenant", "acme", "--output", "json"),
        ("reviews", "list", "--output", "json"),
        ("tenants", "list"),
        ("tenants", "list", "-o", "json"),
        ("tenants", "keys", "list", "acme", "-o", "json"),
        ("jobs", "list", "--type", "invoice_extraction", "-o", "json"),
        ("deliveries", "endpoints", "--tenant", "acme"),
    ],
)
def test_stage_mode_prints_what_local_mode_prints(args, deps, function, clean_db, monkeypatch, tmp_path):
    from tollgate.core.clock import new_id
    from tollgate.tenants.keys import create_key, create_tenant, parse_scopes

    tenant = create_tenant(deps.db, "acme", new_id)
    create_key(deps.db, tenant.tenant_id, new_id, scopes=parse_scopes(["jobs:read"]))
    monkeypatch.setenv("DATABASE_URL", clean_db)

    there = stage_cli(function.url, *args)
    here = CliRunner().invoke(app, [*args, "--data-dir", str(tmp_path)], env={"COLUMNS": "200"})

    assert there.exit_code == here.exit_code == 0, there.output
    assert there.output == here.output


def test_usage_keys_sync_through_the_function_with_its_own_plan(function, clean_db):
    """Without a usage plan (as locally) nothing gets a key, and the request is audited under the caller."""
    client = OpsClient(function.url, LOCAL_AWS_REGION, OPERATOR)

    synced = client.call(ops.SyncUsageKeys(), ops.UsageKeysSynced)

    assert synced.tenants == []
    assert [row[1:] for row in audit_rows(clean_db)] == [
        ("tenant_sync_usage_keys", "usage-plan", "requested"),
        ("tenant_sync_usage_keys", "usage-plan", "done"),
    ]


class _RecordingPlan:
    """A usage plan that hands out keys and remembers whom it gave them to."""

    def __init__(self) -> None:
        self.attached: list[str] = []

    def attach(self, tenant_id, tenant_name):
        from tollgate.tenants.usage_keys import UsageKey

        self.attached.append(tenant_name)
        return UsageKey(key_id=f"key-{tenant_name}", value=f"value-{tenant_name}")


def test_a_tenant_made_through_the_function_gets_its_key_on_the_stages_usage_plan(deps, clean_db):
    plan = _RecordingPlan()

    response = handle_function_url(
        replace(deps, usage_plan=plan), event({"command": "tenants.create", "name": "acme"})
    )

    assert response["statusCode"] == 200
    assert plan.attached == ["acme"]
    with psycopg.connect(clean_db) as conn:
        assert conn.execute("SELECT usage_key_id FROM tenants WHERE name = 'acme'").fetchone() == (
            "key-acme",
        )
