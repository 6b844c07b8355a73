"""The results bus on moto's EventBridge: every outcome event reaches a subscriber rule's target once per
publish, with its usage totals, and the relay's retries resend exactly what was not confirmed."""

from __future__ import annotations

import asyncio
import json
import secrets
from collections import Counter
from decimal import Decimal
from typing import Any

import boto3
import pytest
from jsonschema import Draft202012Validator

from tests.integration.test_execution import (
    MISPRINTED,
    TEXT,
    ScriptedLlm,
    claim,
    make_deps,
    misprinted_extraction,
    ok,
    rows,
    supplier_tenant,  # noqa: F401 (a fixture)
)
from tests.integration.test_webhook_endpoints import RecordingStarter
from tests.support import EVENT_SCHEMAS, invoice_request, job_row
from tollgate.core import checkpoints
from tollgate.core.checkpoints import RELAY_AFTER_PUBLISH
from tollgate.core.clock import FakeClock, SystemClock, new_id
from tollgate.events import (
    EXTRACTION_CANCELLED,
    EXTRACTION_COMPLETED,
    EXTRACTION_FAILED,
    EXTRACTION_REJECTED,
    EXTRACTION_REVIEW_REQUIRED,
    OUTCOME_EVENT_TYPES,
    TENANT_SPEND_THRESHOLD,
    TenantSpendThreshold,
    outbox_row,
)
from tollgate.execution.attempt import run_attempt
from tollgate.execution.llm.client import LlmResult, OutcomeClass
from tollgate.outbox.relay import RelayDeps, relay_outbox
from tollgate.review.models import Decision, ReviewDecisionRequest
from tollgate.review.service import ReviewDeps, Reviewer, decide_review
from tollgate.settings import RelaySettings
from tollgate.wiring import build_relay
from tollgate_dev.local.aws import ResultsBus, create_job_type_queues, create_results_bus, queue_urls

pytestmark = pytest.mark.integration

SOURCE = "tollgate.test"


@pytest.fixture
def bus(local_aws) -> ResultsBus:
    """A bus of its own per test, with a subscriber rule for every outcome type."""
    return create_results_bus(
        f"results-{secrets.token_hex(4)}",
        SOURCE,
        detail_types=list(OUTCOME_EVENT_TYPES),
        rule_name="every-outcome",
    )


def relay(clean_db, system_db, bus, *, clock=None, events_client=None) -> RelayDeps:
    """The relay as the Lambda builds it (build_relay), on this test's bus and queue."""
    queues = create_job_type_queues(f"bus-jobs-{secrets.token_hex(4)}")
    deps = build_relay(
        RelaySettings(
            database_url=clean_db,
            job_queue_urls=queue_urls(queues),
            results_bus_name=bus.name,
            results_event_source=bus.source,
        ),
        db=system_db,
        starter=RecordingStarter(),
        events_client=events_client,
    )
    if clock is None:
        return deps
    return RelayDeps(deps.db, clock, deps.routes, deps.batch_size, deps.claim_seconds)


def received(bus: ResultsBus) -> list[dict[str, Any]]:
    """Everything the subscriber's queue holds now (moto puts a matching event on it during PutEvents)."""
    sqs = boto3.client("sqs")
    found: list[dict[str, Any]] = []
    while batch := sqs.receive_message(
        QueueUrl=bus.subscriber_queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=0
    ).get("Messages", []):
        for message in batch:
            found.append(json.loads(message["Body"]))
            sqs.delete_message(QueueUrl=bus.subscriber_queue_url, ReceiptHandle=message["ReceiptHandle"])
    return found


def valid_detail(event: dict[str, Any]) -> dict[str, Any]:
    """The detail checked against the committed bus schema of its detail-type: the file consumers read."""
    schema = json.loads((EVENT_SCHEMAS / f"{event['detail-type']}.bus.json").read_text(encoding="utf-8"))
    validator = Draft202012Validator(schema, format_checker=Draft202012Validator.FORMAT_CHECKER)
    errors = [error.message for error in validator.iter_errors(event["detail"])]
    assert not errors, f"bus detail breaks its schema: {errors}"
    detail: dict[str, Any] = event["detail"]
    return detail


def one_job_of_each_outcome(tenant, system_db, owner_url) -> dict[str, str]:
    """Job ids by the outcome event each ends with, reached through the producers that write them: the
    worker (completed, review_required, failed), a reviewer (rejected) and the tenant (cancelled)."""
    client = tenant.client
    ids = {
        EXTRACTION_COMPLETED: client.submit(invoice_request(TEXT), "completed").json["job_id"],
        EXTRACTION_REJECTED: client.submit(invoice_request(MISPRINTED), "rejected").json["job_id"],
        EXTRACTION_FAILED: client.submit(invoice_request(TEXT + " "), "failed").json["job_id"],
        EXTRACTION_CANCELLED: client.submit(invoice_request(TEXT + "  "), "cancelled").json["job_id"],
    }
    assert client.request("POST", f"/extraction-jobs/{ids[EXTRACTION_CANCELLED]}/cancel").status == 200
    # Claims take the tenant's oldest job first: completed, then rejected (via review), then failed.
    for llm in (
        ScriptedLlm(ok()),
        ScriptedLlm(ok(misprinted_extraction())),
        ScriptedLlm(LlmResult(OutcomeClass.REFUSED, "", error="refused")),
    ):
        deps = make_deps(system_db, llm)
        asyncio.run(run_attempt(deps, claim(deps)))
    reviews = ReviewDeps(system_db, None, SystemClock(), new_id)
    decide_review(
        reviews,
        tenant.tenant_id,
        ids[EXTRACTION_REJECTED],
        ReviewDecisionRequest(decision=Decision.REJECT, note="the total is misprinted"),
        expected_version=job_row(owner_url, ids[EXTRACTION_REJECTED])["state_version"],
        reviewer=Reviewer("test-reviewer"),
    )
    return ids


def test_every_outcome_reaches_a_subscriber_rule_once_with_its_totals(
    supplier_tenant,  # noqa: F811
    system_db,
    clean_db,
    bus,
):
    ids = one_job_of_each_outcome(supplier_tenant, system_db, clean_db)

    report = relay_outbox(relay(clean_db, system_db, bus))

    assert report.failed == 0 and report.unroutable == 0
    events = received(bus)
    kinds = Counter(event["detail-type"] for event in events)
    assert kinds == Counter(
        {
            EXTRACTION_COMPLETED: 1,
            EXTRACTION_REVIEW_REQUIRED: 1,
            EXTRACTION_REJECTED: 1,
            EXTRACTION_FAILED: 1,
            EXTRACTION_CANCELLED: 1,
        }
    )
    assert {event["source"] for event in events} == {SOURCE}
    by_type = {event["detail-type"]: valid_detail(event) for event in events}
    completed = by_type[EXTRACTION_COMPLETED]
    assert completed["job_id"] == ids[EXTRACTION_COMPLETED] and completed["state"] == "SUCCEEDED"
    # One attempt of 900 + 300 tokens on small-model at 0.4 / 1.6 USD per million: exact, as a string.
    assert (completed["model"], completed["input_tokens"], completed["output_tokens"]) == (
        "small-model",
        900,
        300,
    )
    assert completed["cost_usd"] == "0.000840" and completed["attempts"] == 1
    assert completed["job_type"] == "invoice_extraction"
    # The rejection carries the usage of the attempt the reviewer judged; nothing ran for the cancelled job.
    rejected = by_type[EXTRACTION_REJECTED]
    assert rejected["review_reasons"] == ["total_mismatch"] and Decimal(rejected["cost_usd"]) > 0
    cancelled = by_type[EXTRACTION_CANCELLED]
    assert cancelled["job_id"] == ids[EXTRACTION_CANCELLED] and cancelled["state"] == "CANCELLED"
    assert (cancelled["model"], cancelled["attempts"], cancelled["cost_usd"]) == (None, 0, "0.000000")
    assert by_type[EXTRACTION_FAILED]["reason"] == "refused"
    # A cancel repeated writes nothing more.
    client = supplier_tenant.client
    assert client.request("POST", f"/extraction-jobs/{ids[EXTRACTION_CANCELLED]}/cancel").status == 200
    assert relay_outbox(relay(clean_db, system_db, bus)).claimed == 0
    assert received(bus) == []


class Crash(Exception):
    """The relay process dying at a checkpoint."""


def test_a_republish_after_a_crash_before_marking_delivers_the_same_event_id_again(
    supplier_tenant,  # noqa: F811
    system_db,
    clean_db,
    bus,
):
    job_id = supplier_tenant.client.submit(invoice_request(TEXT), "k").json["job_id"]
    assert supplier_tenant.client.request("POST", f"/extraction-jobs/{job_id}/cancel").status == 200
    clock = FakeClock(SystemClock().now())
    deps = relay(clean_db, system_db, bus, clock=clock)

    def crash(name: str) -> None:
        if name == RELAY_AFTER_PUBLISH:
            raise Crash(name)

    previous = checkpoints.listen(crash)
    try:
        with pytest.raises(Crash):
            relay_outbox(deps)
    finally:
        checkpoints.listen(previous)
    first = received(bus)
    # The claim lease runs out; the next relay finds the rows still unpublished and sends them again.
    clock.advance(deps.claim_seconds + 1)
    assert relay_outbox(deps).failed == 0
    second = received(bus)

    assert [event["detail-type"] for event in first] == [EXTRACTION_CANCELLED]
    assert [event["detail-type"] for event in second] == [EXTRACTION_CANCELLED]
    # Two EventBridge events (their envelope ids differ), one Tollgate event: consumers dedupe on event_id.
    assert first[0]["id"] != second[0]["id"]
    assert first[0]["detail"]["event_id"] == second[0]["detail"]["event_id"]
    assert first[0]["detail"] == second[0]["detail"]


class FailingEntries:
    """EventBridge with entries refused one call: those of ``detail_types`` come back with an ErrorCode and
    are not put, as PutEvents reports a partial failure; the rest go to moto. Records each call's entries."""

    def __init__(self, detail_types: set[str]) -> None:
        self._client = boto3.client("events")
        self.failing = detail_types
        self.calls: list[list[str]] = []

    def put_events(self, *, Entries):
        self.calls.append([entry["DetailType"] for entry in Entries])
        sent = [entry for entry in Entries if entry["DetailType"] not in self.failing]
        answers = iter(self._client.put_events(Entries=sent)["Entries"] if sent else [])
        results = [
            {"ErrorCode": "ThrottlingException", "ErrorMessage": "Rate exceeded"}
            if entry["DetailType"] in self.failing
            else next(answers)
            for entry in Entries
        ]
        return {"FailedEntryCount": sum("ErrorCode" in r for r in results), "Entries": results}


def test_a_partial_put_events_failure_retries_only_the_failed_entries(
    supplier_tenant,  # noqa: F811
    system_db,
    clean_db,
    bus,
):
    one_job_of_each_outcome(supplier_tenant, system_db, clean_db)
    events = FailingEntries({EXTRACTION_FAILED})
    deps = relay(clean_db, system_db, bus, events_client=events)

    first = relay_outbox(deps)
    got_first = received(bus)
    events.failing = set()
    second = relay_outbox(deps)
    got_second = received(bus)

    assert first.failed == 1 and "ThrottlingException" in next(iter(first.errors.values()))
    assert sorted(event["detail-type"] for event in got_first) == sorted(
        set(OUTCOME_EVENT_TYPES) - {EXTRACTION_FAILED}
    )
    assert second.failed == 0 and second.published == 1
    assert events.calls[-1] == [EXTRACTION_FAILED], "the retry sends only the entry that failed"
    assert [event["detail-type"] for event in got_second] == [EXTRACTION_FAILED]


def test_a_spend_threshold_reaches_a_subscriber_rule_of_its_own_and_no_webhook(
    supplier_tenant,  # noqa: F811
    system_db,
    clean_db,
    local_aws,
):
    # Given a subscriber rule for spend thresholds, and the event as the worker writes it (in the commit
    # that recorded the cost that crossed 80 percent).
    bus = create_results_bus(
        f"spend-{secrets.token_hex(4)}", SOURCE, detail_types=[TENANT_SPEND_THRESHOLD], rule_name="spend"
    )
    event = TenantSpendThreshold(
        tenant_id=supplier_tenant.tenant_id,
        month="2026-12",
        threshold_percent=80,
        budget_usd="10.000000",
        spent_usd="8.100000",
    )
    with system_db.transaction() as conn:
        conn.execute(
            system_db.q.insert_outbox_event, outbox_row(event, event_id=new_id(), trace_context=None)
        )

    report = relay_outbox(relay(clean_db, system_db, bus))

    # Then it is published once, on the bus only: no webhook delivery is made for it.
    assert (report.published, report.failed, report.unroutable) == (1, 0, 0)
    [published] = received(bus)
    detail = valid_detail(published)
    assert published["detail-type"] == TENANT_SPEND_THRESHOLD
    assert (detail["tenant_id"], detail["threshold_percent"]) == (str(supplier_tenant.tenant_id), 80)
    assert rows(clean_db, "SELECT count(*) FROM webhook_deliveries") == [(0,)]
