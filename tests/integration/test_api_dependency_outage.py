"""With PostgreSQL or S3 unreachable the API answers 503 with Retry-After, within its own wait, not a 500 or
a gateway timeout: the request is safe to send again with the same Idempotency-Key."""

from __future__ import annotations

import json
import socket
import uuid

import pytest
from pydantic import SecretStr

from tests.support import count_rows, invoice_request
from tollgate.api.app import create_app, handle, openapi_document
from tollgate.settings import ApiSettings
from tollgate.wiring import build_api
from tollgate_dev.local.gateway import build_event

pytestmark = pytest.mark.integration


@pytest.fixture
def unreachable_database_url():
    """A port that refuses connections: bound and closed again, so nothing listens there."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"postgresql://postgres@127.0.0.1:{port}/tollgate"


@pytest.fixture
def api(unreachable_database_url, local_aws):
    settings = ApiSettings(
        database_url=SecretStr(unreachable_database_url), documents_bucket="unused", database_wait_seconds=0.5
    )
    deps = build_api(settings)
    yield create_app(deps), deps
    deps.acceptance.db.close()


def call(api, method, path, body=None, headers=None):
    app, deps = api
    event = build_event(method, path, headers or {}, json.dumps(body).encode() if body is not None else b"")
    event["requestContext"]["authorizer"] = {"tenant_id": str(uuid.uuid4())}
    return handle(app, deps, event, None)


@pytest.mark.parametrize(
    ("method", "path", "body", "headers"),
    [
        ("GET", "/extraction-jobs", None, None),
        (
            "POST",
            "/extraction-jobs",
            invoice_request(),
            {"Idempotency-Key": "k1", "Content-Type": "application/json"},
        ),
    ],
)
def test_an_unreachable_database_is_a_503_with_retry_after(api, method, path, body, headers):
    response = call(api, method, path, body, headers)

    assert response["statusCode"] == 503
    assert response["multiValueHeaders"]["Retry-After"] == ["5"]
    problem = json.loads(response["body"])
    assert problem["type"].endswith("/dependency-unavailable") and problem["status"] == 503
    assert "postgres" not in response["body"].lower(), "no connection details reach the caller"


def test_every_route_documents_the_503(api):
    app, _ = api
    document = json.loads(openapi_document(app))
    operations = [op for path in document["paths"].values() for op in path.values()]

    assert operations and all("503" in op["responses"] for op in operations)


def test_an_unreachable_document_store_is_a_503_and_writes_nothing(
    unreachable_database_url, database_url, make_tenant, clean_db, monkeypatch
):
    tenant = make_tenant("s3-down")
    # The same refusing port, now as the AWS endpoint: S3 does not answer; one try, as the SDK's retries
    # would only make the test slower.
    port = unreachable_database_url.rsplit(":", 1)[1].split("/")[0]
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    # Every document goes to S3 (none is kept in its row), so the put is attempted.
    settings = ApiSettings(
        database_url=SecretStr(database_url), documents_bucket="documents", document_row_max_bytes=0
    )
    deps = build_api(settings)
    try:
        event = build_event(
            "POST",
            "/extraction-jobs",
            {"Idempotency-Key": "k1", "Content-Type": "application/json"},
            json.dumps(invoice_request()).encode(),
        )
        event["requestContext"]["authorizer"] = {"tenant_id": str(tenant.tenant_id)}
        response = handle(create_app(deps), deps, event, None)
    finally:
        deps.acceptance.db.close()

    assert response["statusCode"] == 503
    assert json.loads(response["body"])["type"].endswith("/dependency-unavailable")
    assert set(count_rows(clean_db).values()) == {0}
