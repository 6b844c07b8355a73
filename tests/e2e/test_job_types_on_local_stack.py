"""Issue-level story of the job types on the whole local system: each registered type goes through the API,
the worker and the tenant's webhook; a result its policy refuses is escalated to the large model once and,
when that one is wrong too, waits for review with the type's reason and evidence."""

from __future__ import annotations

import psycopg
import pytest

from tests.support import valid_webhook
from tollgate.core.clock import new_id
from tollgate.settings import WorkerSettings
from tollgate.tenants.keys import create_tenant
from tollgate_dev.local.client import ApiClient
from tollgate_dev.simulator.server import Fault

pytestmark = pytest.mark.e2e

PATIENCE_SECONDS = 120
SMALL = WorkerSettings.model_fields["model_small"].default
LARGE = WorkerSettings.model_fields["model_large"].default
PAGES = [
    "Service agreement between Acme GmbH and Nordwind Logistik\nThe term is twelve months from 2026-01-01.",
    "Either party may end the agreement with three months notice.\nSigned in Hamburg",
]
DOCUMENT = {"pages": [{"text": page} for page in PAGES]}
REQUESTS = {
    "document_summary": {"job_type": "document_summary", "document": DOCUMENT, "options": {"max_words": 30}},
    "document_classification": {
        "job_type": "document_classification",
        "document": DOCUMENT,
        "options": {"labels": ["invoice", "receipt", "service_agreement"]},
    },
}
MISTAKES = {
    "document_summary": (Fault.UNSUPPORTED_FACT, "evidence_not_found"),
    "document_classification": (Fault.LABEL_OUTSIDE_SET, "label_not_allowed"),
}


@pytest.fixture
def stack(local_stack):
    return local_stack()


def attempts(url: str, job_id: str) -> list[tuple[int, str, str]]:
    with psycopg.connect(url) as conn:
        return conn.execute(
            "SELECT attempt, model, outcome FROM job_attempts WHERE job_id = %s ORDER BY attempt", (job_id,)
        ).fetchall()


def test_each_job_type_runs_through_the_api_the_worker_and_the_webhook(stack):
    tenant = create_tenant(stack.system_db, "typed", new_id)
    client = ApiClient(stack.api_url, tenant.api_key)
    subscribed = client.request(
        "POST",
        "/webhook-endpoints",
        json_body={
            "url": f"{stack.erp.url}/erp",
            "event_types": ["extraction.completed.v1", "extraction.review_required.v1"],
        },
    )
    assert subscribed.status == 201, subscribed.json
    receiver = stack.erp.receiver

    # Happy path: each type's result passes its policy and reaches the ERP as completed.
    done = {}
    for name, body in REQUESTS.items():
        accepted = client.submit(body, f"happy-{name}")
        assert accepted.status == 202, accepted.json
        assert accepted.json["job_type"] == name and accepted.json["schema_version"] != "invoice.v1"
        done[accepted.json["job_id"]] = name
    assert stack.wait_for(lambda: len(receiver.accepted) >= len(done), timeout=PATIENCE_SECONDS)
    bodies = [valid_webhook(received.body) for received in receiver.accepted]
    assert {b["data"]["job_id"] for b in bodies} == set(done)
    assert {b["type"] for b in bodies} == {"extraction.completed.v1"}
    for job_id, name in done.items():
        result = client.request("GET", f"/extraction-jobs/{job_id}/result")
        assert result.status == 200, result.json
        if name == "document_summary":
            assert len(result.json["result"]["summary"].split()) <= 30 and result.json["result"]["key_facts"]
        else:
            assert result.json["result"]["label"] == "service_agreement"
        assert result.json["policy_version"] in {"summary.v2", "classification.v2"}

    # Validation failure: the small model is wrong, the job escalates, the large model is wrong too.
    for name, body in REQUESTS.items():
        fault, reason = MISTAKES[name]
        stack.simulator.queue_fault(fault, count=2)
        job_id = client.submit({**body, "metadata": {"story": "review"}}, f"review-{name}").json["job_id"]
        assert stack.wait_for(
            lambda j=job_id: (
                client.request("GET", f"/extraction-jobs/{j}").json["state"] == "REVIEW_REQUIRED"
            ),
            timeout=PATIENCE_SECONDS,
        ), client.request("GET", f"/extraction-jobs/{job_id}").json
        review = client.request("GET", f"/extraction-jobs/{job_id}/review")
        assert review.status == 200, review.json
        assert reason in {r["code"] for r in review.json["reasons"]}
        assert review.json["evidence"], "the reviewer sees the type's evidence"
        assert [(a[1], a[2]) for a in attempts(stack.database_url, job_id)] == [
            (SMALL, "escalated"),
            (LARGE, "ok"),
        ]
        assert stack.wait_for(
            lambda j=job_id: any(
                valid_webhook(r.body)["data"]["job_id"] == j
                and valid_webhook(r.body)["type"] == "extraction.review_required.v1"
                for r in receiver.accepted
            ),
            timeout=PATIENCE_SECONDS,
        )
    assert receiver.duplicates == 0
