"""Bad input gets a clear 4xx problem body and writes nothing: never a 500, never a row, never an object."""

from __future__ import annotations

import json
import re
import uuid

import boto3
import pytest

from tests.support import count_rows, invoice_request
from tollgate.settings import REPO_ROOT
from tollgate_dev.local.client import ApiClient
from tollgate_dev.local.runtime import LOCAL_BUCKET

pytestmark = pytest.mark.integration

GOOD = invoice_request()
NO_WRITE_TABLES = ("extraction_jobs", "outbox_events", "documents", "webhook_endpoints")


def _post(
    body: bytes | None,
    content_type: str | None = "application/json",
    key: str | None = "k-1",
    path: str = "/extraction-jobs",
):
    headers = {}
    if content_type:
        headers["Content-Type"] = content_type
    if key is not None:
        headers["Idempotency-Key"] = key
    return {"method": "POST", "path": path, "raw_body": body, "headers": headers}


def _nested(depth: int, leaf: str = "1") -> str:
    """``{"a":{"a":...leaf...}}``, ``depth`` objects deep, written as text (json.dumps would recurse)."""
    return '{"a":' * depth + leaf + "}" * depth


GOOD_TEXT = json.dumps(GOOD)[1:-1]  # the good request's members, to put a pathological one beside them
ENDPOINT = '"url": "https://erp.example.com/hooks"'
# Nesting that Python's parser cannot follow (it raised RecursionError, a 500, from 968 levels on), nesting
# just under that, and nesting past the API's own limit but far from the parser's.
PATHOLOGICAL = {
    "nested-5000-deep": _post(_nested(5000).encode()),
    "nested-968-deep": _post(_nested(968).encode()),
    "nested-967-deep": _post(_nested(967).encode()),
    "nested-40-deep": _post(_nested(40).encode()),
    "arrays-5000-deep": _post(('{"document": {"pages": ' + "[" * 5000 + "]" * 5000 + "}}").encode()),
    "metadata-5000-deep": _post(("{" + GOOD_TEXT + ', "metadata": ' + _nested(5000, '"x"') + "}").encode()),
    "endpoint-5000-deep": _post(
        ("{" + ENDPOINT + ', "description": ' + _nested(5000) + "}").encode(), path="/webhook-endpoints"
    ),
    "endpoint-968-deep": _post(_nested(968).encode(), path="/webhook-endpoints"),
    # Numbers: thousands of digits (Python refuses past 4,300 with a ValueError and is slow before), an
    # exponent past a float's range, and the non-JSON constants Python's parser accepts.
    "integer-of-5000-digits": _post(("{" + GOOD_TEXT + ', "priority": ' + "9" * 5000 + "}").encode()),
    "integer-of-100000-digits": _post(("{" + GOOD_TEXT + ', "priority": ' + "9" * 100_000 + "}").encode()),
    "float-past-its-range": _post(("{" + GOOD_TEXT + ', "deadline_seconds": 1e999}').encode()),
    "fraction-of-5000-digits": _post(("{" + GOOD_TEXT + ', "priority": 0.' + "1" * 5000 + "}").encode()),
    "nan": _post(("{" + GOOD_TEXT + ', "priority": NaN}').encode()),
    "infinity": _post(("{" + GOOD_TEXT + ', "deadline_seconds": Infinity}').encode()),
    "minus-infinity-in-metadata": _post(('{"metadata": {"a": -Infinity}, ' + GOOD_TEXT + "}").encode()),
    "endpoint-with-nan": _post(("{" + ENDPOINT + ', "enabled": NaN}').encode(), path="/webhook-endpoints"),
}


def _json(value: object, **kwargs) -> dict:
    return _post(json.dumps(value).encode(), **kwargs)


def _with(**fields) -> dict:
    return _json({**GOOD, **fields})


def _page(**fields) -> dict:
    return _json({"document": {"pages": [{"text": "x", **fields}]}})


CASES = {
    "body-not-json": (_post(b"{not json"), 400, "invalid-request"),
    "body-truncated-json": (_post(b'{"document": {"pages": ['), 400, "invalid-request"),
    # Bytes that are not UTF-8 reach the API base64-encoded; JSON is UTF-8 text (RFC 8259).
    "body-not-utf8": (_post(b'{"document": "\xff\xfe"}'), 400, "invalid-request"),
    "body-is-an-array": (_json([GOOD]), 422, "validation-failed"),
    "body-is-a-string": (_json("hello"), 422, "validation-failed"),
    "body-is-null": (_post(b"null"), 422, "validation-failed"),
    "body-empty-object": (_json({}), 422, "validation-failed"),
    "document-missing": (_json({"priority": 3}), 422, "validation-failed"),
    "no-pages": (_json({"document": {"pages": []}}), 422, "validation-failed"),
    "empty-page-text": (_page(text=""), 422, "validation-failed"),
    "page-text-wrong-type": (_json({"document": {"pages": [{"text": 42}]}}), 422, "validation-failed"),
    "unknown-top-level-field": (_with(tenant_id="someone-else"), 422, "validation-failed"),
    "unknown-page-field": (_page(bbox=[1, 2]), 422, "validation-failed"),
    "inline-and-reference-mixed": (
        _json({"document": {"pages": [{"text": "x"}], "s3_key": "k", "version_id": "v"}}),
        422,
        "validation-failed",
    ),
    "unknown-job-type": (_with(job_type="translation"), 422, "validation-failed"),
    "unknown-schema-version": (_with(schema_version="invoice.v9"), 422, "validation-failed"),
    "unknown-model-policy": (_with(model_policy="cheapest"), 422, "validation-failed"),
    "priority-too-high": (_with(priority=10), 422, "validation-failed"),
    "unknown-service-tier": (_with(service_tier="urgent"), 422, "validation-failed"),
    "service-tier-wrong-case": (_with(service_tier="HIGH"), 422, "validation-failed"),
    "service-tier-wrong-type": (_with(service_tier=1), 422, "validation-failed"),
    "priority-wrong-type": (_with(priority="high"), 422, "validation-failed"),
    # A value of another JSON type is refused, never coerced: false is not priority 0, "600" not a number.
    "priority-a-boolean": (_with(priority=False), 422, "validation-failed"),
    "priority-a-numeric-string": (_with(priority="5"), 422, "validation-failed"),
    "deadline-a-numeric-string": (_with(deadline_seconds="600"), 422, "validation-failed"),
    "deadline-too-short": (_with(deadline_seconds=5), 422, "validation-failed"),
    "deadline-too-long": (_with(deadline_seconds=10**8), 422, "validation-failed"),
    "currency-hint-lowercase": (_with(options={"currency_hint": "eur"}), 422, "validation-failed"),
    "unknown-option": (_with(options={"temperature": 1.5}), 422, "validation-failed"),
    "metadata-value-too-long": (_with(metadata={"filename": "x" * 600}), 422, "validation-failed"),
    "metadata-value-not-string": (_with(metadata={"n": 1}), 422, "validation-failed"),
    # PostgreSQL jsonb cannot hold U+0000: refused as input, not failed on as a 500.
    "metadata-value-with-nul": (_with(metadata={"filename": "a\u0000b"}), 422, "validation-failed"),
    "metadata-key-with-nul": (_with(metadata={"file\u0000name": "a"}), 422, "validation-failed"),
    "missing-idempotency-key": (_json(GOOD, key=None), 400, "missing-idempotency-key"),
    "idempotency-key-too-long": (_json(GOOD, key="k" * 256), 400, "invalid-request"),
    "idempotency-key-with-space": (_json(GOOD, key="two words"), 400, "invalid-request"),
    "content-type-text": (
        _post(json.dumps(GOOD).encode(), content_type="text/plain"),
        415,
        "unsupported-media-type",
    ),
    "content-type-form": (
        _post(b"document=x", content_type="application/x-www-form-urlencoded"),
        415,
        "unsupported-media-type",
    ),
    "content-type-missing": (
        _post(json.dumps(GOOD).encode(), content_type=None),
        415,
        "unsupported-media-type",
    ),
    "body-over-the-request-limit": (_post(b"{" + b" " * (5 * 1024 * 1024) + b"}"), 413, "payload-too-large"),
    "document-over-the-document-limit": (
        _json({"document": {"pages": [{"text": "x" * 150_000} for _ in range(14)]}}),
        413,
        "payload-too-large",
    ),
    "reference-outside-own-prefix": (
        _json(
            {"document": {"s3_key": "tenants/00000000-0000-0000-0000-000000000000/x.txt", "version_id": "v"}}
        ),
        422,
        "document-unavailable",
    ),
    "list-limit-zero": ({"method": "GET", "path": "/extraction-jobs?limit=0"}, 422, "validation-failed"),
    "list-unknown-state": (
        {"method": "GET", "path": "/extraction-jobs?state=DONE"},
        422,
        "validation-failed",
    ),
    "list-unknown-job-type": (
        {"method": "GET", "path": "/extraction-jobs?job_type=invoice"},
        422,
        "validation-failed",
    ),
    "reviews-unknown-reason": ({"method": "GET", "path": "/reviews?reason=nope"}, 422, "validation-failed"),
    "list-forged-cursor": (
        {"method": "GET", "path": "/extraction-jobs?cursor=bm9wZQ"},
        400,
        "invalid-request",
    ),
    "job-id-not-a-uuid": ({"method": "GET", "path": "/extraction-jobs/not-a-uuid"}, 404, "not-found"),
    "unknown-route": ({"method": "GET", "path": "/invoices"}, 404, "not-found"),
    "unknown-job": (
        {"method": "GET", "path": "/extraction-jobs/7d5b8f4e-1111-4c1c-9a57-0c0a1b2c3d4e"},
        404,
        "not-found",
    ),
}

AUTH_CASES = {
    "no-authorization-header": {},
    "basic-scheme": {"Authorization": "Basic dXNlcjpwYXNz"},
    "bearer-without-token": {"Authorization": "Bearer "},
    "unknown-key": {"Authorization": "Bearer tg_thisKeyWasNeverIssued0000000000000000000"},
    "key-without-prefix": {"Authorization": "Bearer abc"},
}


@pytest.mark.parametrize("request_args", PATHOLOGICAL.values(), ids=PATHOLOGICAL.keys())
def test_pathological_json_is_a_400_problem_and_writes_nothing(tenant, clean_db, request_args):
    before_rows, before_objects = count_rows(clean_db), _s3_object_count()
    args = dict(request_args)

    response = tenant.client.request(args.pop("method"), args.pop("path"), **args)

    assert response.status == 400, response.body[:500]
    assert response.header("Content-Type") == "application/problem+json"
    body = response.json
    assert body["type"] == "https://tollgate.dev/problems/invalid-request"
    assert body["status"] == 400 and body["detail"].startswith("the body is not")
    assert count_rows(clean_db) == before_rows
    assert _s3_object_count() == before_objects


def test_nesting_within_the_limit_is_read_and_validated_as_usual(tenant, clean_db):
    response = tenant.client.request(
        **_post(("{" + GOOD_TEXT + ', "metadata": ' + _nested(20) + "}").encode())
    )

    assert response.status == 422, response.body[:500]
    assert response.json["errors"][0]["loc"][:2] == ["body", "metadata"]


def _s3_object_count() -> int:
    versions = boto3.client("s3").list_object_versions(Bucket=LOCAL_BUCKET)
    return len(versions.get("Versions", []))


@pytest.mark.parametrize(("request_args", "status", "problem"), CASES.values(), ids=CASES.keys())
def test_malformed_request_gets_its_problem_and_writes_nothing(
    tenant, clean_db, request_args, status, problem
):
    before_rows, before_objects = count_rows(clean_db), _s3_object_count()
    args = dict(request_args)

    response = tenant.client.request(args.pop("method"), args.pop("path"), **args)

    assert response.status == status, response.body[:500]
    assert response.header("Content-Type") == "application/problem+json"
    body = response.json
    assert body["type"] == f"https://tollgate.dev/problems/{problem}"
    assert body["status"] == status and body["title"] and body["detail"]
    after = count_rows(clean_db)
    assert {t: after[t] for t in NO_WRITE_TABLES} == {t: before_rows[t] for t in NO_WRITE_TABLES}
    assert _s3_object_count() == before_objects


@pytest.mark.parametrize("headers", AUTH_CASES.values(), ids=AUTH_CASES.keys())
def test_requests_without_a_valid_key_get_401_and_write_nothing(stack, clean_db, headers):
    client = ApiClient(stack.api_url)
    before = count_rows(clean_db)

    response = client.request(
        "POST", "/extraction-jobs", json_body=GOOD, headers={"Idempotency-Key": "k", **headers}, auth=False
    )

    assert response.status == 401
    assert response.json["type"].endswith("/unauthorized")
    assert count_rows(clean_db) == before


def test_validation_errors_do_not_echo_the_input_back(tenant, clean_db):
    secret_looking = "IBAN DE89370400440532013000"
    response = tenant.client.submit({"document": {"pages": [{"text": 1}]}, "note": secret_looking}, "k")
    assert response.status == 422
    assert secret_looking not in response.body.decode()
    assert {"loc", "type", "msg"} <= set(response.json["errors"][0])


def test_a_missing_object_version_is_a_clear_422(tenant, clean_db):
    key = f"tenants/{tenant.tenant_id}/uploads/missing.txt"
    response = tenant.client.submit({"document": {"s3_key": key, "version_id": "no-such-version"}}, "k")
    assert response.status == 422 and response.json["type"].endswith("/document-unavailable")


PATH_PARAMETER = re.compile(r"\{(\w+)\}")
# Bodies that pass validation, so that what the route answers about is the id in its path.
VALID_BODIES = {
    ("PATCH", "/webhook-endpoints/{endpoint_id}"): {},
    ("POST", "/webhook-endpoints/{endpoint_id}/replay"): {"since": "2024-01-01T00:00:00Z"},
    ("POST", "/extraction-jobs/{job_id}/review"): {"decision": "reject", "note": "not an invoice"},
}


def _documented_paths() -> dict[str, dict[str, dict]]:
    return json.loads((REPO_ROOT / "openapi.json").read_text(encoding="utf-8"))["paths"]


def _ids_in_paths() -> list[tuple[str, str, str]]:
    """(method, path, parameter) for each id in the path of each operation the committed document lists."""
    return [
        (method.upper(), path, name)
        for path, operations in _documented_paths().items()
        for method in operations
        for name in PATH_PARAMETER.findall(path)
    ]


IDS_IN_PATHS = _ids_in_paths()


@pytest.mark.parametrize(
    ("method", "path", "malformed"), IDS_IN_PATHS, ids=[f"{m} {p} {n}" for m, p, n in IDS_IN_PATHS]
)
def test_an_id_that_is_not_a_uuid_is_the_same_404_on_every_route(tenant, clean_db, method, path, malformed):
    """Given every other id well-formed (and unknown), when one is not a UUID, the answer is the not-found
    problem an unknown id gets, whatever the route, before any other check (replays included, which this
    stack, without a dispatcher, would otherwise answer with a 503)."""
    url = path.format(
        **{
            name: "not-a-uuid" if name == malformed else str(uuid.uuid4())
            for name in PATH_PARAMETER.findall(path)
        }
    )
    body = VALID_BODIES.get((method, path))

    response = tenant.client.request(method, url, json_body=body)

    assert response.status == 404, response.body[:500]
    assert response.header("Content-Type") == "application/problem+json"
    problem = response.json
    assert {k: problem[k] for k in ("type", "title", "status", "instance")} == {
        "type": "https://tollgate.dev/problems/not-found",
        "title": "No such resource",
        "status": 404,
        "instance": url,
    }
    assert re.fullmatch(r"no [a-z ]+ not-a-uuid", problem["detail"]), problem["detail"]


def test_every_route_with_a_body_and_an_id_has_a_valid_body_above():
    """A new route with both gets a body in VALID_BODIES, or the 404 test would see a 422 instead."""
    with_both = {
        (method.upper(), path)
        for path, operations in _documented_paths().items()
        for method, operation in operations.items()
        if PATH_PARAMETER.search(path) and "requestBody" in operation
    }
    assert with_both == set(VALID_BODIES)
