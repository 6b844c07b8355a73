"""The local gateway routes as a deployed stage does: it serves exactly the operations ApiStack makes methods
for (the app's own route table, tollgate.api.surface) and answers anything else as API Gateway does. Through
it, the stories a deployed tenant needs beyond submitting jobs: an ERP's webhook endpoint registered, its
signed delivery verified, listed and replayed, the signing secret rotated, usage read, a job's attempts
listed; and a method or path no stage declares is a 404 problem before any key is checked."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tollgate.core.clock import new_id
from tollgate.tenants.keys import create_tenant
from tollgate.tenants.suppliers import add_supplier
from tollgate_dev.local.client import ApiClient
from tollgate_dev.samples import SUPPLIERS, generate_invoices, request_body

pytestmark = pytest.mark.e2e

# How long the local system may take to get somewhere on a loaded 2-core machine; a passing run waits far less.
PATIENCE_SECONDS = 240


def test_an_erps_webhook_story_usage_and_attempts_walk_the_deployed_routes(local_stack):
    stack = local_stack()
    db = stack.system_db
    tenant = create_tenant(db, "routed", new_id, allowed_currencies=sorted({s.currency for s in SUPPLIERS}))
    for supplier in SUPPLIERS:
        add_supplier(db, tenant.tenant_id, supplier.name, supplier.iban, new_id)
    client = ApiClient(stack.api_url, tenant.api_key)
    receiver = stack.erp.receiver

    # The ERP registers its endpoint; the demo ERP verifies with the secret it was registered with.
    created = client.request("POST", "/webhook-endpoints", json_body={"url": f"{stack.erp.url}/routed"})
    assert created.status == 201, created.json
    endpoint_id = created.json["endpoint_id"]
    listed = client.request("GET", "/webhook-endpoints")
    assert [e["endpoint_id"] for e in listed.json["items"]] == [endpoint_id]
    assert client.request("GET", f"/webhook-endpoints/{endpoint_id}").status == 200

    (invoice,) = generate_invoices(1, seed=11, kinds=["clean"])
    job_id = client.submit(request_body(invoice), "routed-1").json["job_id"]
    assert stack.wait_for(lambda: len(receiver.accepted) == 1, timeout=PATIENCE_SECONDS), (
        "the job's signed webhook never reached the demo ERP"
    )

    attempts = client.request("GET", f"/extraction-jobs/{job_id}/attempts")
    assert attempts.status == 200 and attempts.json["job_id"] == job_id
    assert len(attempts.json["attempts"]) == 1

    def delivered() -> list[dict]:
        deliveries = client.request("GET", f"/webhook-endpoints/{endpoint_id}/deliveries")
        assert deliveries.status == 200, deliveries.json
        return [d for d in deliveries.json["items"] if d["state"] == "DELIVERED"]

    # The attempt records the ERP's answer just after the ERP has it.
    assert stack.wait_for(lambda: len(delivered()) == 1, timeout=PATIENCE_SECONDS)
    (delivery,) = delivered()

    # A replay sends the same delivery again, with the same webhook-id: the ERP sees a duplicate.
    replayed = client.request(
        "POST", f"/webhook-endpoints/{endpoint_id}/deliveries/{delivery['delivery_id']}/replay"
    )
    assert replayed.status == 202, replayed.json
    assert replayed.json["replayed"] == [delivery["delivery_id"]]
    assert stack.wait_for(lambda: receiver.duplicates == 1, timeout=PATIENCE_SECONDS), (
        "the replayed delivery never reached the demo ERP"
    )
    # Nothing gave up since an hour ago, so a replay of what failed since then starts nothing.
    since = (datetime.now(UTC) - timedelta(hours=1)).isoformat()
    none_failed = client.request(
        "POST", f"/webhook-endpoints/{endpoint_id}/replay", json_body={"since": since}
    )
    assert none_failed.status == 202 and none_failed.json["replayed"] == []

    rotated = client.request("POST", f"/webhook-endpoints/{endpoint_id}/rotate-secret")
    assert rotated.status == 200 and rotated.json["secret"] != created.json["secret"]
    patched = client.request("PATCH", f"/webhook-endpoints/{endpoint_id}", json_body={"enabled": False})
    assert patched.status == 200, patched.json

    usage = client.request("GET", "/usage")
    assert usage.status == 200, usage.json
    assert usage.json["total"]["attempts"] >= 1

    assert client.request("DELETE", f"/webhook-endpoints/{endpoint_id}").status == 204


UNDECLARED = (
    ("DELETE", "/extraction-jobs/00000000-0000-0000-0000-000000000000"),
    ("PUT", "/extraction-jobs"),
    ("GET", "/extraction-jobs/00000000-0000-0000-0000-000000000000/logs"),
    ("GET", "/admin"),
    ("GET", "/extraction-jobs/"),
    ("OPTIONS", "/extraction-jobs"),
)


def test_a_method_or_path_no_stage_declares_is_api_gateways_404_before_any_key_is_checked(local_stack):
    stack = local_stack()

    for method, path in UNDECLARED:
        for key in ("tg_not_a_key", None):
            response = ApiClient(stack.api_url, key).request(method, path)

            assert response.status == 404, (method, path, key)
            assert response.header("Content-Type") == "application/problem+json"
            assert response.json["type"].endswith("/not-found")
            assert response.json["detail"] == "No such resource or method."
            assert response.json["request_id"]
    # A declared operation with no key is the authorizer's 401, not a 404.
    assert ApiClient(stack.api_url).request("GET", "/usage").status == 401
