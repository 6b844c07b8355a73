"""The review workflow through the API, against real PostgreSQL and a real worker attempt: a result that
failed validation waits, is shown with its evidence, and is approved, corrected (re-validated) or rejected
by a key with the review scope, on the state_version it read; the ERP gets only accepted results."""

from __future__ import annotations

import asyncio
import json
import re
import secrets
import shutil
import threading
import uuid
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from tests.integration.test_execution import TEXT, ScriptedLlm, claim, extraction, make_deps, ok
from tests.support import invoice_request, job_row, query_plan, seed_review_shape
from tollgate.core.clock import FakeClock, SystemClock, new_id
from tollgate.core.documents import canonicalize
from tollgate.db import Database, build_database
from tollgate.db.migrations import apply_migrations
from tollgate.delivery.attempts import AttemptDeps, attempt_delivery
from tollgate.delivery.deliveries import WebhookDispatcher
from tollgate.delivery.sender import WebhookSender
from tollgate.events import WEBHOOK_EVENT_TYPES
from tollgate.execution.attempt import AttemptEnd, run_attempt
from tollgate.jobtypes.invoice_extraction.validation import POLICY_VERSION
from tollgate.outbox.relay import RelayDeps, relay_outbox
from tollgate.review.service import ReviewDeps, get_review, list_all_reviews
from tollgate.scheduler.retention import RetentionPolicy, apply_retention
from tollgate.settings import DatabaseSettings
from tollgate.tenants.keys import Scope, create_key
from tollgate.tenants.suppliers import add_supplier
from tollgate_dev.local.client import ApiClient, HttpResponse
from tollgate_dev.receiver import WebhookReceiver

pytestmark = pytest.mark.integration

# The model misread the total: the value breaks the arithmetic, and the page prints it nowhere.
MISREAD_TOTAL = ["total_mismatch", "value_not_printed"]
RECOUNT = (
    "SELECT q.pending_jobs, q.running_jobs, q.ready_jobs, q.retry_jobs, r.pending_jobs AS recount"
    " FROM tenant_queues q, tenant_queue_recount(q.tenant_id) r WHERE q.tenant_id = %s"
)


@pytest.fixture
def reviewing(tenant, system_db, stack):
    """The acme tenant with its supplier on file, and a client holding a key with only the review scope."""
    add_supplier(system_db, tenant.tenant_id, "Nordwind Logistik GmbH", "DE89370400440532013000", new_id)
    key = create_key(system_db, tenant.tenant_id, new_id, scopes=frozenset({Scope.REVIEW}))
    return tenant, ApiClient(stack.api_url, key.api_key), key.key_id


def waiting_review(tenant, system_db, invoice, clock=None) -> str:
    """A job the worker ran to REVIEW_REQUIRED: the model answered ``invoice``, which fails validation."""
    job_id = tenant.client.submit(invoice_request(TEXT), secrets.token_hex(6)).json["job_id"]
    deps = make_deps(system_db, ScriptedLlm(ok(invoice)), clock=clock)
    assert asyncio.run(run_attempt(deps, claim(deps))).end is AttemptEnd.REVIEW_REQUIRED
    return job_id


def decide(client: ApiClient, job_id: str, body: dict[str, Any], version: int | str | None) -> HttpResponse:
    headers = {} if version is None else {"If-Match": f'"{version}"' if isinstance(version, int) else version}
    return client.request("POST", f"/extraction-jobs/{job_id}/review", json_body=body, headers=headers)


def review(client: ApiClient, job_id: str) -> HttpResponse:
    return client.request("GET", f"/extraction-jobs/{job_id}/review")


def events(url: str, job_id: str) -> list[tuple[str, dict[str, Any]]]:
    with psycopg.connect(url) as conn:
        return [
            (row[0], row[1])
            for row in conn.execute(
                "SELECT event_type, payload FROM outbox_events WHERE aggregate_id = %s"
                " AND event_type <> 'job.state_changed.v1' ORDER BY created_at",
                (job_id,),
            )
        ]


def query(url: str, sql: str, *args: Any) -> list[dict[str, Any]]:
    with psycopg.connect(url, row_factory=dict_row) as conn:
        return conn.execute(sql, args).fetchall()


def assert_problem(response: HttpResponse, status: int, problem: str) -> dict[str, Any]:
    assert response.status == status, response.json
    assert response.header("Content-Type") == "application/problem+json"
    assert response.json["type"] == f"https://tollgate.dev/problems/{problem}"
    body: dict[str, Any] = response.json
    return body


# --- waiting ---------------------------------------------------------------------------------------------


def test_a_result_that_failed_validation_waits_with_its_evidence_and_is_not_served_as_a_result(
    reviewing, system_db, clean_db
):
    tenant, reviewer, _ = reviewing
    job_id = waiting_review(tenant, system_db, extraction(total="999.70"))

    result = tenant.client.request("GET", f"/extraction-jobs/{job_id}/result")
    shown = review(reviewer, job_id)

    problem = assert_problem(result, 409, "invalid-state")
    assert problem["review"] == f"/extraction-jobs/{job_id}/review" and "result" not in problem
    assert shown.status == 200, shown.json
    view = shown.json
    assert shown.header("ETag") == f'"{view["state_version"]}"'
    assert (view["state"], view["result"]["total"]) == ("REVIEW_REQUIRED", "999.70")
    assert sorted(r["code"] for r in view["reasons"]) == MISREAD_TOTAL
    assert view["decision"] is None
    evidence = {e["field"]: e for e in view["evidence"]}
    total = evidence["total"]
    assert (total["located"], total["found"], total["page"], total["quote"], total["value"]) == (
        False,
        True,
        1,
        "Total due 999.60 EUR",
        "999.70",
    ), "the policy found no 999.70: the reviewer sees the value beside the text the model quoted"
    assert TEXT[total["start"] : total["end"]] == "Total due 999.60 EUR"
    context = total["context"]
    assert context["text"] == "Total due 999.60 EUR"
    assert context["before"] + context["text"] + context["after"] in TEXT
    assert evidence["line_items[0]"]["found"] and "due_date" not in evidence
    # What the policy did find, it shows where it found it, under its label.
    subtotal = evidence["subtotal"]
    assert subtotal["located"] and TEXT[subtotal["start"] : subtotal["end"]] == "840.00"
    assert (
        subtotal["label"]["text"] == "Subtotal"
        and TEXT[subtotal["label"]["start"] : subtotal["label"]["end"]] == "Subtotal"
    )
    assert (
        evidence["tax.rate_percent"]["value"] == "19.0"
        and evidence["tax.rate_percent"]["label"]["text"] == "VAT"
    )
    # Waiting is nobody's work: the tenant's unfinished-work counters do not hold it.
    [counters] = query(clean_db, RECOUNT, tenant.tenant_id)
    assert counters["pending_jobs"] == counters["recount"] == 0


def test_a_job_that_never_went_to_review_has_no_review(reviewing, system_db, clean_db):
    tenant, reviewer, _ = reviewing
    job_id = tenant.client.submit(invoice_request(TEXT), "k").json["job_id"]

    assert_problem(review(reviewer, job_id), 409, "invalid-state")
    assert_problem(decide(reviewer, job_id, {"decision": "approve", "note": "ok"}, 1), 409, "invalid-state")
    assert_problem(review(reviewer, str(uuid.uuid4())), 404, "not-found")


# --- decisions -------------------------------------------------------------------------------------------


def test_an_approval_accepts_the_models_result_as_version_2_and_completes_the_job(
    reviewing, system_db, clean_db
):
    tenant, reviewer, key_id = reviewing
    job_id = waiting_review(tenant, system_db, extraction(total="999.70"))
    version = review(reviewer, job_id).json["state_version"]

    decided = decide(
        reviewer, job_id, {"decision": "approve", "note": "the total is right on paper"}, version
    )

    assert decided.status == 200, decided.json
    assert decided.json["state"] == "SUCCEEDED" and decided.json["state_version"] == version + 1
    assert decided.header("ETag") == f'"{version + 1}"'
    job = job_row(clean_db, job_id)
    assert (job["state"], job["state_version"]) == ("SUCCEEDED", version + 1)
    result = tenant.client.request("GET", f"/extraction-jobs/{job_id}/result").json
    assert (result["version"], result["result"]["total"], result["policy_version"]) == (
        2,
        "999.70",
        POLICY_VERSION,
    )
    assert sorted(r["code"] for r in result["review_reasons"]) == MISREAD_TOTAL, "recorded as overridden"
    assert result["review"]["decision"] == "approve"
    assert result["review"]["reviewer"] == f"api-key:{key_id}"
    assert result["review"]["note"] == "the total is right on paper"
    kinds = [event_type for event_type, _ in events(clean_db, job_id)]
    assert kinds[-2:] == ["extraction.review_required.v1", "extraction.completed.v1"]
    completed = events(clean_db, job_id)[-1][1]
    assert (completed["state"], completed["state_version"], completed["review_reasons"]) == (
        "SUCCEEDED",
        version + 1,
        [],
    )
    [decision] = query(clean_db, "SELECT * FROM review_decisions WHERE job_id = %s", job_id)
    assert (decision["reviewer_key_id"], decision["state_version"], decision["result_version"]) == (
        key_id,
        version,
        2,
    )
    # Version 1, the model's result, is kept as the worker wrote it.
    [original] = query(
        clean_db, "SELECT result, review_reasons FROM extraction_results WHERE job_id = %s", job_id
    )
    assert (
        original["result"]["total"] == "999.70"
        and sorted(r["code"] for r in original["review_reasons"]) == MISREAD_TOTAL
    )
    [counters] = query(clean_db, RECOUNT, tenant.tenant_id)
    assert counters["pending_jobs"] == counters["recount"] == 0
    assert review(reviewer, job_id).json["decision"]["decision"] == "approve"


def test_a_correction_that_passes_the_policy_is_accepted_and_the_result_is_the_corrected_one(
    reviewing, system_db, clean_db
):
    tenant, reviewer, _ = reviewing
    job_id = waiting_review(tenant, system_db, extraction(total="999.70"))
    version = review(reviewer, job_id).json["state_version"]

    decided = decide(
        reviewer,
        job_id,
        {"decision": "correct", "note": "misread the total", "corrections": {"total": "999.60"}},
        version,
    )

    assert decided.status == 200, decided.json
    assert (decided.json["state"], decided.json["result_version"]) == ("SUCCEEDED", 2)
    result = tenant.client.request("GET", f"/extraction-jobs/{job_id}/result").json
    assert (result["version"], result["result"]["total"], result["review_reasons"]) == (2, "999.60", [])
    assert result["result"]["subtotal"] == "840.00", "what the patch did not name is the model's"
    [decision] = query(
        clean_db, "SELECT corrections, policy_version FROM review_decisions WHERE job_id = %s", job_id
    )
    assert decision == {"corrections": {"total": "999.60"}, "policy_version": POLICY_VERSION}
    assert events(clean_db, job_id)[-1][0] == "extraction.completed.v1"


def test_a_correction_is_judged_by_the_same_rules_as_the_model_a_value_under_another_label_is_refused(
    reviewing, system_db, clean_db
):
    tenant, reviewer, _ = reviewing
    job_id = waiting_review(tenant, system_db, extraction(total="999.70"))
    version = review(reviewer, job_id).json["state_version"]

    # 840.00 is printed, but after "Subtotal": a reviewer cannot make it the total either.
    refused = decide(
        reviewer, job_id, {"decision": "correct", "note": "try", "corrections": {"total": "840.00"}}, version
    )
    accepted = decide(
        reviewer,
        job_id,
        {"decision": "correct", "note": "as printed", "corrections": {"total": "999.60"}},
        version,
    )

    problem = assert_problem(refused, 422, "correction-fails-validation")
    assert {(r["code"], r["field"]) for r in problem["reasons"]} == {
        ("value_not_labelled", "total"),
        ("total_mismatch", "total"),
    }
    assert accepted.status == 200, accepted.json
    [decision] = query(clean_db, "SELECT located_evidence FROM review_decisions WHERE job_id = %s", job_id)
    total = next(entry for entry in decision["located_evidence"] if entry["field"] == "total")
    assert (total["text"], total["label"]["text"]) == ("999.60", "Total due"), "the correction's own evidence"
    result = tenant.client.request("GET", f"/extraction-jobs/{job_id}/result").json
    assert {e["field"]: e["text"] for e in result["evidence"]}["total"] == "999.60"


def test_a_correction_that_still_fails_is_refused_with_its_reasons_and_changes_nothing(
    reviewing, system_db, clean_db
):
    tenant, reviewer, _ = reviewing
    job_id = waiting_review(tenant, system_db, extraction(total="999.70"))
    version = review(reviewer, job_id).json["state_version"]
    before = events(clean_db, job_id)

    refused = decide(
        reviewer, job_id, {"decision": "correct", "note": "try", "corrections": {"total": "999.80"}}, version
    )
    misshapen = decide(
        reviewer, job_id, {"decision": "correct", "note": "try", "corrections": {"total": "lots"}}, version
    )

    problem = assert_problem(refused, 422, "correction-fails-validation")
    assert sorted(r["code"] for r in problem["reasons"]) == MISREAD_TOTAL
    assert problem["policy_version"] == POLICY_VERSION
    shape = assert_problem(misshapen, 422, "validation-failed")
    assert shape["errors"][0]["loc"] == ["body", "corrections", "total"]
    job = job_row(clean_db, job_id)
    assert (job["state"], job["state_version"]) == ("REVIEW_REQUIRED", version)
    assert events(clean_db, job_id) == before
    assert query(clean_db, "SELECT count(*) AS n FROM review_decisions")[0]["n"] == 0


def test_a_rejection_ends_the_job_rejected_with_no_result_and_a_rejected_event(
    reviewing, system_db, clean_db
):
    tenant, reviewer, _ = reviewing
    job_id = waiting_review(tenant, system_db, extraction(currency="JPY"))
    version = review(reviewer, job_id).json["state_version"]

    decided = decide(reviewer, job_id, {"decision": "reject", "note": "not our invoice"}, version)

    assert decided.status == 200, decided.json
    assert (decided.json["state"], decided.json["result_version"]) == ("REJECTED", None)
    problem = assert_problem(
        tenant.client.request("GET", f"/extraction-jobs/{job_id}/result"), 409, "invalid-state"
    )
    assert problem["state"] == "REJECTED" and problem["review"].endswith("/review")
    event_type, payload = events(clean_db, job_id)[-1]
    assert event_type == "extraction.rejected.v1"
    assert (payload["state"], payload["review_reasons"]) == (
        "REJECTED",
        ["currency_not_allowed", "value_not_printed"],
    )
    job = job_row(clean_db, job_id)
    assert job["state"] == "REJECTED" and job["finished_at"] is not None
    # Final: no second decision, whatever the version.
    again = decide(reviewer, job_id, {"decision": "approve", "note": "changed my mind"}, version + 1)
    assert_problem(again, 409, "invalid-state")


def test_a_stale_if_match_is_412_a_missing_one_428_and_nothing_changes(reviewing, system_db, clean_db):
    tenant, reviewer, _ = reviewing
    job_id = waiting_review(tenant, system_db, extraction(total="999.70"))
    version = review(reviewer, job_id).json["state_version"]
    approve = {"decision": "approve", "note": "ok"}

    stale = decide(reviewer, job_id, approve, version - 1)
    missing = decide(reviewer, job_id, approve, None)
    anything = decide(reviewer, job_id, approve, "*")
    garbled = decide(reviewer, job_id, approve, 'W/"3"')

    assert assert_problem(stale, 412, "precondition-failed")["state_version"] == version
    assert_problem(missing, 428, "precondition-required")
    assert_problem(anything, 428, "precondition-required")
    assert_problem(garbled, 400, "invalid-request")
    assert job_row(clean_db, job_id)["state_version"] == version
    assert query(clean_db, "SELECT count(*) AS n FROM review_decisions")[0]["n"] == 0


def test_a_key_without_the_review_scope_can_neither_read_nor_decide_a_review(
    reviewing, system_db, clean_db, stack
):
    tenant, _, _ = reviewing
    job_id = waiting_review(tenant, system_db, extraction(total="999.70"))
    writer_key = create_key(
        system_db, tenant.tenant_id, new_id, scopes=frozenset({Scope.JOBS_WRITE, Scope.JOBS_READ})
    )
    writer = ApiClient(stack.api_url, writer_key.api_key)
    version = job_row(clean_db, job_id)["state_version"]

    for response in (
        writer.request("GET", "/reviews"),
        review(writer, job_id),
        decide(writer, job_id, {"decision": "approve", "note": "ok"}, version),
    ):
        assert "review" in assert_problem(response, 403, "forbidden")["detail"]
    assert job_row(clean_db, job_id)["state"] == "REVIEW_REQUIRED"


def test_of_two_reviewers_deciding_at_once_exactly_one_wins_and_the_other_gets_412(
    reviewing, system_db, clean_db
):
    """Both read the same version and both pass the read's checks; their fenced updates meet at the row. A
    test connection holds the row until both wait on it, so the updates really race."""
    tenant, reviewer, _ = reviewing
    job_id = waiting_review(tenant, system_db, extraction(total="999.70"))
    version = review(reviewer, job_id).json["state_version"]
    responses: dict[str, HttpResponse] = {}

    def decide_as(name: str, body: dict[str, Any]) -> None:
        responses[name] = decide(reviewer, job_id, body, version)

    holder = psycopg.connect(clean_db)
    threads = [
        threading.Thread(target=decide_as, args=("approve", {"decision": "approve", "note": "fine"})),
        threading.Thread(target=decide_as, args=("reject", {"decision": "reject", "note": "not fine"})),
    ]
    try:
        holder.execute("SELECT 1 FROM extraction_jobs WHERE job_id = %s FOR UPDATE", (job_id,))
        for thread in threads:
            thread.start()
        with psycopg.connect(clean_db, autocommit=True) as probe:
            for _ in range(1200):
                (waiting,) = probe.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                    " AND datname = current_database() AND query LIKE '%%review_decisions%%'"
                ).fetchone()
                if waiting >= 2:
                    break
                probe.execute("SELECT pg_sleep(0.05)")
            else:
                pytest.fail("the two decisions never both waited on the job's row")
        holder.rollback()
    finally:
        holder.close()
        for thread in threads:
            thread.join(timeout=120)

    statuses = sorted(response.status for response in responses.values())
    assert statuses == [200, 412], {name: r.json for name, r in responses.items()}
    [winner] = [name for name, response in responses.items() if response.status == 200]
    job = job_row(clean_db, job_id)
    assert job["state"] == ("SUCCEEDED" if winner == "approve" else "REJECTED")
    assert job["state_version"] == version + 1
    assert query(clean_db, "SELECT count(*) AS n FROM review_decisions")[0]["n"] == 1
    decisions = [
        t for t, _ in events(clean_db, job_id) if t in {"extraction.completed.v1", "extraction.rejected.v1"}
    ]
    assert decisions == ["extraction.completed.v1" if winner == "approve" else "extraction.rejected.v1"]


# --- the queue -------------------------------------------------------------------------------------------


def test_the_queue_lists_waiting_reviews_oldest_first_filters_by_reason_and_pages(
    reviewing, system_db, clean_db
):
    tenant, reviewer, _ = reviewing
    clock = FakeClock(SystemClock().now() - timedelta(hours=1))
    mistakes = [extraction(total="999.70"), extraction(currency="JPY"), extraction(total="1000.00")]
    waiting = []
    for invoice in mistakes:
        waiting.append(waiting_review(tenant, system_db, invoice, clock=clock))
        clock.advance(60)
    # A job that passed is never in the queue.
    passed = tenant.client.submit(invoice_request(TEXT), "passes").json["job_id"]
    deps = make_deps(system_db, ScriptedLlm(ok()), clock=clock)
    assert asyncio.run(run_attempt(deps, claim(deps))).end is AttemptEnd.SUCCEEDED

    listed = reviewer.request("GET", "/reviews").json
    by_reason = reviewer.request("GET", "/reviews?reason=total_mismatch").json
    first = reviewer.request("GET", "/reviews?limit=1").json
    second = reviewer.request("GET", f"/reviews?limit=1&cursor={first['next_cursor']}").json
    third = reviewer.request("GET", f"/reviews?limit=1&cursor={second['next_cursor']}").json

    assert [item["job_id"] for item in listed["items"]] == waiting and passed not in str(listed)
    assert listed["items"][1]["reason_codes"] == ["currency_not_allowed", "value_not_printed"]
    assert listed["next_cursor"] is None
    assert [item["job_id"] for item in by_reason["items"]] == [waiting[0], waiting[2]]
    assert [page["items"][0]["job_id"] for page in (first, second, third)] == waiting
    assert third["next_cursor"] is None
    # A code no policy gives is refused, not answered with an empty queue that looks like "nothing waits".
    assert_problem(reviewer.request("GET", "/reviews?reason=no_such_rule"), 422, "validation-failed")
    assert_problem(reviewer.request("GET", "/reviews?reason=Not-A-Code"), 422, "validation-failed")

    version = listed["items"][0]["state_version"]
    assert decide(reviewer, waiting[0], {"decision": "approve", "note": "ok"}, version).status == 200
    after = reviewer.request("GET", "/reviews?reason=total_mismatch").json
    assert [item["job_id"] for item in after["items"]] == [waiting[2]]
    assert (
        query(clean_db, "SELECT count(*) AS n FROM review_queue WHERE job_id = %s", waiting[0])[0]["n"] == 0
    )


def test_another_tenants_reviews_are_not_listed_or_decidable(
    reviewing, system_db, make_tenant, stack, clean_db
):
    tenant, _, _ = reviewing
    job_id = waiting_review(tenant, system_db, extraction(total="999.70"))
    other = make_tenant("other")
    other_key = create_key(system_db, other.tenant_id, new_id, scopes=frozenset({Scope.REVIEW}))
    outsider = ApiClient(stack.api_url, other_key.api_key)

    assert outsider.request("GET", "/reviews").json["items"] == []
    assert_problem(review(outsider, job_id), 404, "not-found")
    assert_problem(decide(outsider, job_id, {"decision": "reject", "note": "mine?"}, 3), 404, "not-found")
    assert job_row(clean_db, job_id)["state"] == "REVIEW_REQUIRED"


# --- delivery to the ERP ---------------------------------------------------------------------------------


class DeliverNow:
    """Step Functions stand-in: a started delivery makes its attempt at once."""

    def __init__(self, system_db: Database) -> None:
        self.deps = AttemptDeps(
            db=system_db,
            clock=SystemClock(),
            sender=WebhookSender(allow_private_targets=True),
            jitter=lambda low, high: 0.0,
            time_scale=0.0,
        )

    def start(self, delivery_id: uuid.UUID, name: str) -> None:
        attempt_delivery(self.deps, delivery_id)


def test_the_erp_gets_only_accepted_results_as_completed_once_and_review_required_only_on_request(
    reviewing, system_db, stack_factory, clean_db
):
    tenant, reviewer, _ = reviewing
    local = ApiClient(stack_factory(webhooks_allow_private_targets=True).api_url, tenant.api_key)
    keyring: dict[str, list[str]] = {}
    receiver = WebhookReceiver(lambda path: keyring.get(path, [])).start()
    try:
        erp = local.request("POST", "/webhook-endpoints", json_body={"url": f"{receiver.url}/erp"})
        tool = local.request(
            "POST",
            "/webhook-endpoints",
            json_body={
                "url": f"{receiver.url}/review-tool",
                "event_types": ["extraction.review_required.v1"],
            },
        )
        assert erp.status == tool.status == 201, (erp.json, tool.json)
        assert erp.json["event_types"] == [
            "extraction.completed.v1",
            "extraction.failed.v1",
            "extraction.rejected.v1",
        ]
        keyring.update({"/erp": [erp.json["secret"]], "/review-tool": [tool.json["secret"]]})
        relay = RelayDeps(
            db=system_db,
            clock=SystemClock(),
            routes=dict.fromkeys(WEBHOOK_EVENT_TYPES, WebhookDispatcher(system_db, DeliverNow(system_db))),
        )
        approved = waiting_review(tenant, system_db, extraction(total="999.70"))
        rejected = waiting_review(tenant, system_db, extraction(total="999.70"))
        relay_outbox(relay)

        def received(path: str) -> list[tuple[str, str, str]]:
            bodies = [json.loads(r.body) for r in receiver.accepted if r.path == path]
            return [(b["type"], b["data"]["job_id"], b["data"]["state"]) for b in bodies]

        assert received("/erp") == [], "a result waiting for review is not the ERP's business"
        assert sorted(received("/review-tool")) == sorted(
            [("extraction.review_required.v1", job, "REVIEW_REQUIRED") for job in (approved, rejected)]
        )

        for job_id, decision in ((approved, "approve"), (rejected, "reject")):
            version = review(reviewer, job_id).json["state_version"]
            assert decide(reviewer, job_id, {"decision": decision, "note": "checked"}, version).status == 200
        relay_outbox(relay)
        relay_outbox(relay)  # a second sweep finds nothing left to send

        assert sorted(received("/erp")) == sorted(
            [
                ("extraction.completed.v1", approved, "SUCCEEDED"),
                ("extraction.rejected.v1", rejected, "REJECTED"),
            ]
        )
        assert receiver.duplicates == 0 and receiver.rejections == []
        completed = [job for kind, job, _ in received("/erp") if kind == "extraction.completed.v1"]
        assert completed == [approved], "exactly once, and never for the rejected job"
        assert len(received("/review-tool")) == 2, "the decisions go to the ERP, not the review tool"
    finally:
        receiver.stop()


# --- retention and migration -----------------------------------------------------------------------------


class NoStore:
    def __init__(self) -> None:
        self.archives: dict[str, bytes] = {}

    def put_archive(self, key: str, body: bytes) -> None:
        self.archives[key] = body

    def delete_versions(self, objects):
        return {}


def test_retention_keeps_a_waiting_review_and_archives_a_decided_one_with_its_decision(
    reviewing, system_db, clean_db
):
    tenant, reviewer, _ = reviewing
    waiting = waiting_review(tenant, system_db, extraction(total="999.70"))
    decided = waiting_review(tenant, system_db, extraction(total="999.70"))
    version = review(reviewer, decided).json["state_version"]
    assert decide(reviewer, decided, {"decision": "approve", "note": "fine"}, version).status == 200
    store = NoStore()

    report = apply_retention(
        system_db,
        FakeClock(SystemClock().now() + timedelta(days=400)),
        store,
        RetentionPolicy(default_days=30),
    )

    assert report.counts()["archived_jobs"] == 1
    remaining = {row["job_id"] for row in query(clean_db, "SELECT job_id::text FROM extraction_jobs")}
    assert remaining == {waiting}
    assert query(clean_db, "SELECT count(*) AS n FROM review_decisions")[0]["n"] == 0
    [archive] = store.archives.values()
    line = json.loads(archive)
    assert line["job_id"] == decided and line["state"] == "SUCCEEDED"
    assert line["review"]["decision"] == "approve" and line["review"]["result_version"] == 2
    assert line["review"]["result"]["total"] == "999.70"


def test_jobs_waiting_before_the_review_migration_become_reviewable(fresh_database, migrations_dir, tmp_path):
    """Migration 0014 on a database with REVIEW_REQUIRED jobs and webhook endpoints from before it: the jobs
    are in the queue (by each reason), can be read and decided; endpoints on the old default stop getting
    review_required, endpoints that chose their types keep them."""
    before = tmp_path / "before-review"
    before.mkdir()
    for path in sorted(migrations_dir.glob("*.sql")):
        if int(path.name[:4]) < 14:
            shutil.copy(path, before / path.name)
    url = fresh_database()
    apply_migrations(url, before)
    tenant_id, job_id, document_id = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    old_default = ["extraction.completed.v1", "extraction.failed.v1", "extraction.review_required.v1"]
    document = canonicalize([TEXT])
    with psycopg.connect(url) as conn:
        conn.execute("INSERT INTO tenants (tenant_id, name) VALUES (%s, 'old')", (tenant_id,))
        conn.execute(
            "INSERT INTO documents (document_id, tenant_id, content_sha256, size_bytes, page_count, body)"
            " VALUES (%s, %s, repeat('a', 64), %s, 1, %s)",
            (document_id, tenant_id, len(document.body), document.body),
        )
        conn.execute(
            "INSERT INTO extraction_jobs (job_id, tenant_id, idempotency_key, request_hash, job_type,"
            " document_id, schema_version, model_policy, max_attempts, estimated_tokens, document_bytes,"
            " deadline_at, state, state_version, attempt, finished_at)"
            " VALUES (%s, %s, 'k', repeat('b', 64), 'invoice_extraction', %s, 'invoice.v1', 'auto', 3, 1000,"
            " 100, now() + interval '1 day', 'REVIEW_REQUIRED', 3, 1, now() - interval '1 hour')",
            (job_id, tenant_id, document_id),
        )
        reasons = [
            {"code": "total_mismatch", "field": "total", "detail": "x"},
            {"code": "evidence_not_found", "field": "total", "detail": "y"},
        ]
        conn.execute(
            "INSERT INTO extraction_results (job_id, tenant_id, attempt, policy_version, result, review_reasons)"
            " VALUES (%s, %s, 1, 'validation.v2', %s, %s)",
            (job_id, tenant_id, Jsonb(extraction(total="999.70").model_dump(mode="json")), Jsonb(reasons)),
        )
        for url_path, types in (("/default", old_default), ("/chosen", ["extraction.review_required.v1"])):
            conn.execute(
                "INSERT INTO webhook_endpoints (endpoint_id, tenant_id, url, event_types, secret)"
                " VALUES (%s, %s, %s, %s, 'whsec_x')",
                (uuid.uuid4(), tenant_id, f"https://erp.example{url_path}", types),
            )

    apply_migrations(url, migrations_dir)

    db = build_database(DatabaseSettings(database_url=url, database_role="tollgate_system"))
    try:
        for reason in (None, "total_mismatch", "evidence_not_found"):
            page = list_all_reviews(db, reason=reason, limit=10, cursor=None)
            assert [item.job_id for item in page.items] == [job_id], reason
        view = get_review(ReviewDeps(db, None, SystemClock(), new_id), tenant_id, job_id)
        assert (view.state, view.state_version, view.result["total"]) == ("REVIEW_REQUIRED", 3, "999.70")
        assert {e.field: e.found for e in view.evidence}["total"]
    finally:
        db.close()
    endpoints = {
        r["url"]: r["event_types"] for r in query(url, "SELECT url, event_types FROM webhook_endpoints")
    }
    assert endpoints == {
        "https://erp.example/default": [
            "extraction.completed.v1",
            "extraction.failed.v1",
            "extraction.rejected.v1",
        ],
        "https://erp.example/chosen": ["extraction.review_required.v1"],
    }


# --- metrics ---------------------------------------------------------------------------------------------


def test_review_metrics_count_each_decision_once_with_its_wait_and_gauge_the_queue(
    reviewing, system_db, clean_db
):
    from tollgate.core.metrics import (
        EXTRACTIONS_VALIDATED,
        OLDEST_WAITING_REVIEW_AGE,
        REVIEW_DECISIONS,
        REVIEW_TIME_TO_DECISION,
        REVIEWS_REQUIRED,
        REVIEWS_WAITING,
        RecordedMetrics,
    )
    from tollgate.core.retry import RetryPolicy
    from tollgate.scheduler.tick import SchedulerDeps, SchedulerReport, publish_review_metrics

    tenant, reviewer, _ = reviewing
    start = SystemClock().now() - timedelta(hours=1)
    worker_metrics = RecordedMetrics()
    jobs = []
    for offset, invoice in (
        (0, extraction(total="999.70")),
        (60, extraction(currency="JPY")),
        (120, extraction()),
    ):
        job_id = tenant.client.submit(invoice_request(TEXT), secrets.token_hex(6)).json["job_id"]
        deps = make_deps(
            system_db, ScriptedLlm(ok(invoice)), clock=FakeClock(start + timedelta(seconds=offset))
        )
        asyncio.run(run_attempt(deps, claim(deps)))
        worker_metrics.counts.update(deps.metrics.counts)
        jobs.append(job_id)
    assert (worker_metrics.counts[EXTRACTIONS_VALIDATED], worker_metrics.counts[REVIEWS_REQUIRED]) == (3, 2)
    version = review(reviewer, jobs[0]).json["state_version"]
    assert decide(reviewer, jobs[0], {"decision": "approve", "note": "fine"}, version).status == 200
    now = SystemClock().now()
    metrics = RecordedMetrics()
    scheduler = SchedulerDeps(
        db=system_db,
        clock=FakeClock(now),
        new_id=new_id,
        metrics=metrics,
        retry_policy=RetryPolicy(base_seconds=2, cap_seconds=60, attempt_timeout_seconds=30),
        jitter=lambda low, high: low,
    )

    publish_review_metrics(scheduler, SchedulerReport())
    publish_review_metrics(scheduler, SchedulerReport())  # the next tick: nothing new to count

    assert metrics.values[REVIEWS_WAITING] == 1
    assert metrics.values[OLDEST_WAITING_REVIEW_AGE] == pytest.approx(
        (now - start).total_seconds() - 60, abs=1
    )
    assert metrics.counts[REVIEW_DECISIONS["approve"]] == 1
    assert metrics.counts[REVIEW_DECISIONS["reject"]] == metrics.counts[REVIEW_DECISIONS["correct"]] == 0
    [waited] = metrics.observed[REVIEW_TIME_TO_DECISION]
    assert (now - start).total_seconds() - 120 < waited <= (now - start).total_seconds()


# --- the queue stays an index range ----------------------------------------------------------------------

# Each listing's parameters. extraction_jobs may be read only through an index of waiting jobs (or by key,
# joined from the queue rows of one reason); the decisions' metrics only through those not yet counted.
QUEUE_SCANS = {
    "list_reviews": {"reason": None},
    "list_reviews_by_reason": {"reason": "total_mismatch"},
    "list_all_reviews": {"reason": None},
    "list_all_reviews_by_reason": {"reason": "total_mismatch"},
    "review_queue_gauges": {},
    "count_review_decisions": {"now": SystemClock().now(), "limit": 500},
}
WAITING_ONLY = {"extraction_jobs_awaiting_review", "extraction_jobs_review_age", "extraction_jobs_pkey"}


# The scans that may read extraction_jobs: by index name, whether as an index scan or a bitmap's.
JOB_INDEX_SCAN = re.compile(
    r"(?:Index (?:Only )?Scan using (extraction_jobs_\w+) on extraction_jobs"
    r"|Bitmap Index Scan on (extraction_jobs_\w+))"
)


@pytest.mark.parametrize("name", QUEUE_SCANS)
def test_each_review_listing_reads_jobs_only_through_indexes_of_what_waits(name, tenant, clean_db):
    """With sequential scans priced out, no listing may read the jobs table but through a partial index of
    waiting jobs (or by key): its cost follows the queue, not every job ever run. Planned on a seeded
    queue, analyzed, so the plan is the same on every run (see query_plan)."""
    from tollgate.db import load_queries

    seed_review_shape(clean_db, tenant.tenant_id, finished_before=SystemClock().now())
    params = {"tenant_id": tenant.tenant_id, "after_waiting_since": None, "after_job_id": None, "limit": 21}
    plan = query_plan(clean_db, getattr(load_queries(), name), {**params, **QUEUE_SCANS[name]})

    job_indexes = {scan or bitmap for scan, bitmap in JOB_INDEX_SCAN.findall(plan)}
    assert "Seq Scan" not in plan, plan
    if name == "count_review_decisions":
        assert " review_decisions_uncounted " in plan, plan
    elif QUEUE_SCANS[name].get("reason"):
        # By key from the reason's queue rows, or through the waiting jobs: never the whole table.
        assert job_indexes and job_indexes <= WAITING_ONLY, plan
        assert "using review_queue" in plan, plan
        if "extraction_jobs_pkey" in job_indexes:
            assert re.search(
                r"extraction_jobs_pkey on extraction_jobs j .*\n\s+Index Cond: \(job_id = ", plan
            ), (
                "the key is probed per queue row, not walked whole",
                plan,
            )
    else:
        assert job_indexes and job_indexes <= WAITING_ONLY - {"extraction_jobs_pkey"}, plan
