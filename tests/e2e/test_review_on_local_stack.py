"""Issue-level story of review on the whole local system: the simulated model makes each realistic mistake
once (the adversary's fabrications have their story in test_adversary_on_local_stack.py); every such job ends REVIEW_REQUIRED with the rule it broke, waits in the review queue, cannot be
decided by a key without the review scope, is corrected by a reviewer with a merge patch back to what the
invoice prints, and reaches the ERP exactly once, as completed, and only then."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from tests.support import valid_webhook
from tollgate.core.clock import new_id
from tollgate.tenants.keys import Scope, create_key, create_tenant
from tollgate.tenants.suppliers import add_supplier
from tollgate_dev.local.client import ApiClient
from tollgate_dev.samples import SUPPLIERS, expected_invoice, generate_invoices, request_body
from tollgate_dev.simulator.extraction import Mistake
from tollgate_dev.simulator.server import Fault

pytestmark = pytest.mark.e2e

# How long the local system may take to get somewhere on a loaded machine; it runs out only when failing.
PATIENCE_SECONDS = 120
# The mistakes a model makes by itself. A right total whose quote points at another line is not among them:
# the policy finds the total under its own label and the job succeeds (test_validation_policy.py).
REALISTIC = (
    Mistake.ARITHMETIC,
    Mistake.INVENTED_IBAN,
    Mistake.SWAPPED_QUANTITY_PRICE,
    Mistake.DROPPED_LINE,
    Mistake.WRONG_CURRENCY,
    Mistake.EVIDENCE_INVENTED,
)


@pytest.fixture
def stack(local_stack):
    # No escalation: each job makes one call, so the mistake queued for the next call is the job's only one
    # (escalation has its own story in test_job_types_on_local_stack.py).
    return local_stack(worker_overrides={"escalate_to_large_model": False})


def merge_patch(source: Any, target: Any) -> Any:
    """The RFC 7396 merge patch that turns ``source`` into ``target`` (arrays are replaced whole)."""
    if not (isinstance(source, dict) and isinstance(target, dict)):
        return target
    patch = {key: None for key in source if key not in target}
    for key, value in target.items():
        if key not in source:
            patch[key] = value
        elif source[key] != value:
            patch[key] = merge_patch(source[key], value)
    return patch


def job_state(url: str, job_id: str) -> str:
    with psycopg.connect(url) as conn:
        return conn.execute("SELECT state FROM extraction_jobs WHERE job_id = %s", (job_id,)).fetchone()[0]


def test_each_realistic_mistake_is_caught_queued_corrected_and_delivered_once(stack):
    db, url = stack.system_db, stack.database_url
    # USD is allowed so that a wrong currency is caught by its evidence, not by the tenant's list.
    currencies = sorted({s.currency for s in SUPPLIERS} | {"USD"})
    tenant = create_tenant(db, "reviewed", new_id, allowed_currencies=currencies)
    for supplier in SUPPLIERS:
        add_supplier(db, tenant.tenant_id, supplier.name, supplier.iban, new_id)
    admin = ApiClient(stack.api_url, tenant.api_key)
    writer = ApiClient(
        stack.api_url, create_key(db, tenant.tenant_id, new_id, scopes=frozenset({Scope.JOBS_WRITE})).api_key
    )
    reviewer = ApiClient(
        stack.api_url, create_key(db, tenant.tenant_id, new_id, scopes=frozenset({Scope.REVIEW})).api_key
    )
    # The ERP subscribes as an ERP does, with the default event types: no review_required.
    admin.request("POST", "/webhook-endpoints", json_body={"url": f"{stack.erp.url}/erp"})
    receiver = stack.erp.receiver

    samples = generate_invoices(len(REALISTIC), seed=21, kinds=["clean"])
    jobs: dict[str, tuple[Mistake, Any]] = {}
    for mistake, sample in zip(REALISTIC, samples, strict=True):
        # One job at a time, so the mistake queued for the next call is this job's.
        stack.simulator.queue_fault(Fault(mistake.value))
        job_id = writer.submit(request_body(sample), f"mistake-{mistake.value}").json["job_id"]
        assert stack.wait_for(
            lambda j=job_id: job_state(url, j) == "REVIEW_REQUIRED", timeout=PATIENCE_SECONDS
        ), f"the job with a {mistake.value} mistake did not end in review: {job_state(url, job_id)}"
        jobs[job_id] = (mistake, sample)

    queue = reviewer.request("GET", "/reviews?limit=100")
    assert queue.status == 200, queue.json
    assert [item["job_id"] for item in queue.json["items"]] == list(jobs), "oldest first, every one of them"
    assert receiver.accepted == [], "nothing reaches the ERP while it waits for review"

    for job_id, (mistake, sample) in jobs.items():
        review = reviewer.request("GET", f"/extraction-jobs/{job_id}/review")
        assert review.status == 200, review.json
        assert review.json["reasons"], mistake
        truth = expected_invoice(sample).model_dump(mode="json")
        decision = {
            "decision": "correct",
            "note": f"corrected the {mistake.value.replace('_', ' ')} against the printed invoice",
            "corrections": merge_patch(review.json["result"], truth),
        }
        etag = review.header("ETag")
        refused = writer.request(
            "POST", f"/extraction-jobs/{job_id}/review", json_body=decision, headers={"If-Match": etag}
        )
        assert refused.status == 403, (mistake, refused.json)
        decided = reviewer.request(
            "POST", f"/extraction-jobs/{job_id}/review", json_body=decision, headers={"If-Match": etag}
        )
        assert decided.status == 200, (mistake, decided.json)
        assert decided.json["state"] == "SUCCEEDED"
        result = reviewer.request("GET", f"/extraction-jobs/{job_id}/result")
        assert result.status == 403, "reading results is jobs:read, not review"
        accepted = admin.request("GET", f"/extraction-jobs/{job_id}/result")
        assert accepted.status == 200 and accepted.json["result"] == truth, mistake

    assert stack.wait_for(lambda: len(receiver.accepted) >= len(jobs), timeout=PATIENCE_SECONDS), (
        f"{len(receiver.accepted)} of {len(jobs)} corrected results reached the ERP"
    )
    assert reviewer.request("GET", "/reviews").json["items"] == []
    with psycopg.connect(url) as conn:
        pending = conn.execute(
            "SELECT count(*) FROM webhook_deliveries WHERE state <> 'DELIVERED'"
        ).fetchone()[0]
    assert pending == 0
    bodies = [valid_webhook(received.body) for received in receiver.accepted]
    assert sorted(b["data"]["job_id"] for b in bodies) == sorted(jobs), "each job exactly once"
    assert {b["type"] for b in bodies} == {"extraction.completed.v1"}
    assert receiver.duplicates == 0
