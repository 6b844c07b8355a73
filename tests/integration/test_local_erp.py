"""The local system's demo ERP: it learns each endpoint's secrets from the endpoints registered at its URL,
so any tenant can point an endpoint at it and have deliveries verified, rotations included."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from uuid import uuid4

import pytest

from tests.support import valid_webhook
from tollgate.core.clock import SystemClock
from tollgate.delivery.signing import sign
from tollgate.events import EXTRACTION_COMPLETED, ExtractionCompleted, webhook_body
from tollgate_dev.local.erp import DemoErp


@pytest.fixture
def erp(system_db):
    with_receiver = DemoErp(system_db).start()
    yield with_receiver
    with_receiver.stop()
    for received in with_receiver.receiver.accepted:
        valid_webhook(received.body)


def post(url: str, headers: dict[str, str], body: bytes) -> tuple[int, dict]:
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        # Roomy for a loaded machine: every delivery here is expected to be answered.
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def deliver(url: str, secret: str | list[str], webhook_id: str) -> tuple[int, dict]:
    # A body as Tollgate sends it: the demo ERP stands in for a tenant that reads the published schema.
    completed = ExtractionCompleted(job_id=uuid4(), tenant_id=uuid4(), state_version=3, attempt=1)
    body = webhook_body(EXTRACTION_COMPLETED, completed.model_dump(mode="json"), SystemClock().now()).encode()
    headers = sign(secret, webhook_id, SystemClock().now(), body)
    return post(url, {**headers, "Content-Type": "application/json"}, body)


def register(tenant, url: str) -> dict:
    response = tenant.client.request("POST", "/webhook-endpoints", json_body={"url": url})
    assert response.status == 201, response.json
    return response.json


def test_deliveries_to_two_tenants_endpoints_are_verified_with_each_endpoints_secret(erp, make_tenant):
    first, second = make_tenant("north"), make_tenant("south")
    north = register(first, f"{erp.url}/north")
    south = register(second, f"{erp.url}/south")

    assert deliver(f"{erp.url}/north", north["secret"], "msg_north")[0] == 200
    assert deliver(f"{erp.url}/south", south["secret"], "msg_south")[0] == 200
    # One tenant's secret does not sign for another tenant's endpoint.
    assert deliver(f"{erp.url}/south", north["secret"], "msg_forged") == (401, {"error": "bad_signature"})

    assert [w.webhook_id for w in erp.receiver.accepted] == ["msg_north", "msg_south"]


def test_a_path_no_endpoint_is_registered_at_is_refused(erp, make_tenant):
    endpoint = register(make_tenant(), f"{erp.url}/known")

    assert deliver(f"{erp.url}/unknown", endpoint["secret"], "msg_1") == (404, {"error": "unknown_endpoint"})
    assert erp.receiver.accepted == []


def test_after_a_rotation_both_secrets_verify_and_a_repeat_is_acknowledged_once(erp, make_tenant):
    tenant = make_tenant()
    old = register(tenant, f"{erp.url}/rotating")
    rotated = tenant.client.request("POST", f"/webhook-endpoints/{old['endpoint_id']}/rotate-secret")
    assert rotated.status == 200, rotated.json
    url = f"{erp.url}/rotating"

    assert deliver(url, old["secret"], "msg_old")[0] == 200
    assert deliver(url, rotated.json["secret"], "msg_new")[0] == 200
    assert deliver(url, [old["secret"], rotated.json["secret"]], "msg_new") == (
        200,
        {"status": "duplicate", "webhook_id": "msg_new"},
    )
    assert [w.webhook_id for w in erp.receiver.accepted] == ["msg_old", "msg_new"]
    assert erp.receiver.duplicates == 1


def test_a_deleted_endpoint_no_longer_verifies(erp, make_tenant):
    tenant = make_tenant()
    endpoint = register(tenant, f"{erp.url}/gone")
    assert tenant.client.request("DELETE", f"/webhook-endpoints/{endpoint['endpoint_id']}").status == 204

    assert deliver(f"{erp.url}/gone", endpoint["secret"], "msg_1")[0] == 404
