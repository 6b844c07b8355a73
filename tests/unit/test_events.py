"""The events' one home: producers build payloads only through tollgate.events, the committed JSON Schemas
are the models' export, and a webhook body is what its schema says."""

from __future__ import annotations

import ast
import json
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from uuid import UUID

import pytest
from pydantic import ValidationError

from tests.support import EVENT_SCHEMAS, valid_webhook
from tollgate.events import (
    BUS_ONLY_EVENT_TYPES,
    DEFAULT_SUBSCRIPTION,
    EXTRACTION_CANCELLED,
    EXTRACTION_COMPLETED,
    EXTRACTION_FAILED,
    EXTRACTION_REJECTED,
    EXTRACTION_REQUESTED,
    EXTRACTION_REVIEW_REQUIRED,
    OUTCOME_EVENT_TYPES,
    PAYLOADS,
    WEBHOOK_EVENT_TYPES,
    WEBHOOKS,
    ExtractionCancelled,
    ExtractionCompleted,
    ExtractionFailed,
    ExtractionRejected,
    ExtractionRequested,
    ExtractionReviewRequired,
    JobOutcome,
    UnknownEventType,
    outbox_row,
    parse_payload,
    schema_documents,
    schema_drift,
    webhook_body,
    write_schemas,
)
from tollgate.settings import REPO_ROOT

JOB = UUID("6f1e7a7e-0000-4000-8000-00000000000a")
TENANT = UUID("6f1e7a7e-0000-4000-8000-00000000000b")
AT = datetime(2026, 3, 1, 12, 30, 0, 123456, tzinfo=UTC)

# --- the producer check: every write of an outbox row goes through tollgate.events.outbox_row ------------

# Where events are written from in production. (The benchmarks build their rows with outbox_row too, but
# prepare them ahead of the timed statement, out of this check's sight.)
PRODUCER_ROOTS = ("tollgate",)


def hand_built_events(source: str, filename: str = "<source>") -> list[str]:
    """Each use of ``insert_outbox_event`` that is not ``execute(<q>.insert_outbox_event, outbox_row(...))``:
    a payload built by hand, parameters from elsewhere, or the statement passed on under another name."""
    tree = ast.parse(source, filename)
    allowed: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and len(node.args) >= 2 and _is_insert_outbox(node.args[0]):
            params = node.args[1]
            if isinstance(params, ast.Call) and _named(params.func, "outbox_row"):
                allowed.add(id(node.args[0]))
    return [
        f"{filename}:{node.lineno}: insert_outbox_event without events.outbox_row(...)"
        for node in ast.walk(tree)
        if _is_insert_outbox(node) and id(node) not in allowed
    ]


def _is_insert_outbox(node: ast.AST) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "insert_outbox_event") or (
        isinstance(node, ast.Name) and node.id == "insert_outbox_event"
    )


def _named(func: ast.AST, name: str) -> bool:
    return (isinstance(func, ast.Name) and func.id == name) or (
        isinstance(func, ast.Attribute) and func.attr == name
    )


def test_every_producer_builds_its_event_through_the_events_module():
    problems = []
    files = [path for root in PRODUCER_ROOTS for path in sorted((REPO_ROOT / root).rglob("*.py"))]
    writers = []
    for path in files:
        source = path.read_text(encoding="utf-8")
        if "insert_outbox_event" in source:
            writers.append(path.relative_to(REPO_ROOT).as_posix())
            problems += hand_built_events(source, path.relative_to(REPO_ROOT).as_posix())
    assert problems == [], "build payloads with tollgate.events models and outbox_row(...)"
    # The check saw the writers (acceptance and support write requested events, outcomes.py every outcome
    # event): it is looking where events are written.
    assert {
        "tollgate/accept/service.py",
        "tollgate/outbox/outcomes.py",
        "tollgate/support/service.py",
    } <= set(writers)


def test_every_outcome_producer_writes_through_the_one_totals_function():
    """Outcome events carry the job's usage totals; a producer writing one past insert_outcome_event would
    send the defaults (zeros) instead."""
    producers = {
        "tollgate/accept/service.py",  # cancel_job
        "tollgate/execution/attempt.py",  # the worker's outcomes
        "tollgate/execution/leasing.py",  # expired leases and deadlines, for the scheduler and the claim
        "tollgate/review/service.py",  # decisions
    }
    outcome_models = {model.__name__ for model in PAYLOADS.values() if issubclass(model, JobOutcome)}
    for path in sorted((REPO_ROOT / "tollgate").rglob("*.py")):
        name = path.relative_to(REPO_ROOT).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"), name)
        called = {
            node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
            for node in ast.walk(tree)
            if isinstance(node, ast.Call)
        }
        assert not (called & outcome_models), f"{name} constructs an outcome event itself"
        if name in producers:
            assert "insert_outcome_event" in called, name


def test_only_one_query_inserts_outbox_rows():
    """The producer check follows insert_outbox_event; a second INSERT would go round it."""
    inserts = [
        path.name
        for path in (REPO_ROOT / "tollgate" / "db" / "queries").glob("*.sql")
        for _ in range(path.read_text(encoding="utf-8").upper().count("INSERT INTO OUTBOX_EVENTS"))
    ]
    assert inserts == ["outbox.sql"]


GOOD = """
def accept(conn, q, deps, job_id, tenant_id):
    conn.execute(
        q.insert_outbox_event,
        outbox_row(ExtractionRequested(job_id=job_id, tenant_id=tenant_id, state_version=1), event_id=deps.new_id(),
                   trace_context=None),
    )
"""

PLANTED = {
    "a hand-built dict": """
def fail(conn, q, job_id, tenant_id):
    conn.execute(
        q.insert_outbox_event,
        {"event_id": 1, "tenant_id": tenant_id, "aggregate_id": job_id, "event_type": "extraction.failed.v1",
         "payload": Jsonb({"job_id": str(job_id), "state": "FAILED_TERMINAL"}), "trace_context": None},
    )
""",
    "params from a variable": """
def fail(conn, q, params):
    conn.execute(q.insert_outbox_event, params)
""",
    "the statement under another name": """
def fail(conn, q, params):
    statement = q.insert_outbox_event
    conn.execute(statement, outbox_row(event, event_id=1, trace_context=None))
""",
    "a dict spread over outbox_row": """
def fail(conn, q, event):
    conn.execute(q.insert_outbox_event, {**outbox_row(event, event_id=1, trace_context=None), "payload": {}})
""",
}


def test_the_check_passes_a_producer_that_uses_the_events_module():
    assert hand_built_events(GOOD) == []


@pytest.mark.parametrize("source", PLANTED.values(), ids=PLANTED.keys())
def test_the_check_catches_a_planted_hand_built_event(source):
    assert len(hand_built_events(source)) == 1


# --- the committed schemas are the export ------------------------------------------------------------


def test_the_committed_schemas_are_the_models_export():
    assert schema_drift(EVENT_SCHEMAS) == [], "run `make schemas` and commit events/schemas/"


def test_the_drift_check_sees_a_changed_a_missing_and_a_stale_file(tmp_path: Path):
    write_schemas(tmp_path)
    assert schema_drift(tmp_path) == []
    changed = tmp_path / f"{EXTRACTION_FAILED}.webhook.json"
    document = json.loads(changed.read_text())
    del document["$defs"]["ExtractionFailedData"]["properties"]["attempt"]
    changed.write_text(json.dumps(document))
    (tmp_path / f"{EXTRACTION_REQUESTED}.payload.json").unlink()
    (tmp_path / "extraction.started.v1.payload.json").write_text("{}")

    assert schema_drift(tmp_path) == [
        "extraction.failed.v1.webhook.json",
        "extraction.requested.v1.payload.json",
        "extraction.started.v1.payload.json",
    ]
    write_schemas(tmp_path)
    assert schema_drift(tmp_path) == []


def test_there_is_a_schema_per_payload_per_webhook_body_and_per_bus_detail():
    names = set(schema_documents())
    assert {f"{t}.payload.json" for t in PAYLOADS} | {f"{t}.webhook.json" for t in WEBHOOK_EVENT_TYPES} | {
        f"{t}.bus.json" for t in (*OUTCOME_EVENT_TYPES, *BUS_ONLY_EVENT_TYPES)
    } == names
    assert set(WEBHOOKS) == set(WEBHOOK_EVENT_TYPES) and EXTRACTION_REQUESTED not in WEBHOOKS


def test_every_field_in_every_schema_is_described():
    def fields(schema: dict) -> list[tuple[str, dict]]:
        found = list(schema.get("properties", {}).items())
        for definition in schema.get("$defs", {}).values():
            found += list(definition.get("properties", {}).items())
        return found

    for name, schema in schema_documents().items():
        undescribed = [field for field, spec in fields(schema) if not spec.get("description")]
        assert undescribed == [], f"{name}: {undescribed}"


# --- the models ------------------------------------------------------------------------------------------


def failed(**overrides) -> ExtractionFailed:
    values = {"job_id": JOB, "tenant_id": TENANT, "state_version": 4, "attempt": 2, "reason": "refused"}
    return ExtractionFailed(**{**values, **overrides})


def test_a_failed_event_has_one_shape_whoever_ends_the_job():
    assert failed().model_dump(mode="json") == {
        "job_id": str(JOB),
        "tenant_id": str(TENANT),
        "state": "FAILED_TERMINAL",
        "state_version": 4,
        "attempt": 2,
        "review_reasons": [],
        "reason": "refused",
        "job_type": "invoice_extraction",
        "model": None,
        "input_tokens": 0,
        "output_tokens": 0,
        "cost_usd": "0.000000",
        "attempts": 0,
    }


def test_an_outcome_stored_before_the_totals_still_parses_with_zero_totals():
    stored = {
        "job_id": str(JOB),
        "tenant_id": str(TENANT),
        "state": "SUCCEEDED",
        "state_version": 3,
        "attempt": 1,
        "review_reasons": [],
        "reason": None,
    }
    event = parse_payload(EXTRACTION_COMPLETED, stored)
    assert (event.job_type, event.model, event.input_tokens, event.cost_usd, event.attempts) == (
        "invoice_extraction",
        None,
        0,
        Decimal("0"),
        0,
    )


def test_cost_is_an_exact_decimal_string_with_six_places():
    event = ExtractionCompleted(
        job_id=JOB, tenant_id=TENANT, state_version=3, attempt=2, cost_usd=Decimal("0.1") + Decimal("0.2")
    )
    sent = event.model_dump(mode="json")
    assert sent["cost_usd"] == "0.300000"  # 0.1 + 0.2 as floats would be 0.30000000000000004
    assert parse_payload(EXTRACTION_COMPLETED, sent).cost_usd == Decimal("0.3")
    with pytest.raises(ValidationError):
        ExtractionCompleted(job_id=JOB, tenant_id=TENANT, state_version=3, attempt=2, cost_usd=Decimal("-1"))


@pytest.mark.parametrize(
    "overrides",
    [{"reason": None}, {"attempt": "2"}, {"state_version": 0}, {"review_reasons": ["total_mismatch"]}],
    ids=["no-reason", "attempt-as-text", "version-zero", "review-reasons-on-a-failure"],
)
def test_a_payload_that_breaks_the_contract_is_refused_where_it_is_built(overrides):
    with pytest.raises(ValidationError):
        failed(**overrides)


def test_a_field_too_many_is_refused():
    with pytest.raises(ValidationError):
        ExtractionRequested(job_id=JOB, tenant_id=TENANT, state_version=1, priority=5)  # type: ignore[call-arg]


def test_review_required_needs_its_reasons_and_completed_has_none():
    with pytest.raises(ValidationError):
        ExtractionReviewRequired(job_id=JOB, tenant_id=TENANT, state_version=3, attempt=1, review_reasons=[])
    with pytest.raises(ValidationError):
        ExtractionCompleted(job_id=JOB, tenant_id=TENANT, state_version=3, attempt=1, review_reasons=["x"])


def test_a_rejection_names_the_rules_the_rejected_result_broke():
    rejected = ExtractionRejected(
        job_id=JOB, tenant_id=TENANT, state_version=4, attempt=1, review_reasons=["total_mismatch"]
    )
    assert rejected.model_dump(mode="json")["state"] == "REJECTED"
    with pytest.raises(ValidationError):
        ExtractionRejected(job_id=JOB, tenant_id=TENANT, state_version=4, attempt=1, review_reasons=[])


def test_the_default_subscription_is_what_an_erp_acts_on_and_review_required_is_opt_in():
    assert set(DEFAULT_SUBSCRIPTION) == {EXTRACTION_COMPLETED, EXTRACTION_FAILED, EXTRACTION_REJECTED}
    assert EXTRACTION_REVIEW_REQUIRED in WEBHOOK_EVENT_TYPES
    assert set(DEFAULT_SUBSCRIPTION) < set(WEBHOOK_EVENT_TYPES)


def test_the_outbox_row_takes_type_tenant_and_aggregate_from_the_event():
    row = outbox_row(failed(), event_id=TENANT, trace_context="00-abc-def-01")
    assert (row["event_type"], row["tenant_id"], row["aggregate_id"]) == (EXTRACTION_FAILED, TENANT, JOB)
    assert row["payload"].obj == failed().model_dump(mode="json")
    assert parse_payload(EXTRACTION_FAILED, row["payload"].obj) == failed()


def test_an_unknown_event_type_is_refused():
    with pytest.raises(UnknownEventType):
        parse_payload("extraction.started.v1", {})
    with pytest.raises(UnknownEventType):
        webhook_body(
            EXTRACTION_REQUESTED, {"job_id": str(JOB), "tenant_id": str(TENANT), "state_version": 1}, AT
        )


# --- webhook bodies --------------------------------------------------------------------------------------

USAGE = {
    "model": "gpt-4.1-mini",
    "input_tokens": 1200,
    "output_tokens": 340,
    "cost_usd": Decimal("0.001024"),
    "attempts": 1,
}
EVENTS = {
    EXTRACTION_COMPLETED: ExtractionCompleted(
        job_id=JOB, tenant_id=TENANT, state_version=3, attempt=1, **USAGE
    ),
    EXTRACTION_REVIEW_REQUIRED: ExtractionReviewRequired(
        job_id=JOB, tenant_id=TENANT, state_version=3, attempt=1, review_reasons=["total_mismatch"]
    ),
    EXTRACTION_REJECTED: ExtractionRejected(
        job_id=JOB, tenant_id=TENANT, state_version=4, attempt=1, review_reasons=["total_mismatch"]
    ),
    EXTRACTION_FAILED: failed(),
    EXTRACTION_CANCELLED: ExtractionCancelled(job_id=JOB, tenant_id=TENANT, state_version=2, attempt=0),
}


@pytest.mark.parametrize("event_type", WEBHOOK_EVENT_TYPES)
def test_each_webhook_body_matches_its_committed_schema(event_type):
    body = webhook_body(event_type, EVENTS[event_type].model_dump(mode="json"), AT)
    document = valid_webhook(body)
    assert document["type"] == event_type
    assert document["data"]["links"] == {
        "job": f"/extraction-jobs/{JOB}",
        "result": f"/extraction-jobs/{JOB}/result",
    }


def test_the_body_keeps_the_bytes_tenants_got_before_the_models():
    """Compact, keys sorted, the timestamp as isoformat (+00:00): stored bodies and new ones look alike."""
    body = webhook_body(EXTRACTION_FAILED, failed().model_dump(mode="json"), AT)
    assert body == (
        '{"data":{"attempt":2,"attempts":0,"cost_usd":"0.000000","input_tokens":0,'
        '"job_id":"6f1e7a7e-0000-4000-8000-00000000000a","job_type":"invoice_extraction",'
        '"links":{"job":"/extraction-jobs/6f1e7a7e-0000-4000-8000-00000000000a",'
        '"result":"/extraction-jobs/6f1e7a7e-0000-4000-8000-00000000000a/result"},"model":null,'
        '"output_tokens":0,"reason":"refused","review_reasons":[],"state":"FAILED_TERMINAL","state_version":4,'
        '"tenant_id":"6f1e7a7e-0000-4000-8000-00000000000b"},'
        '"timestamp":"2026-03-01T12:30:00.123456+00:00","type":"extraction.failed.v1"}'
    )


def test_the_schema_refuses_the_shape_the_scheduler_used_to_send():
    """The failed event the scheduler wrote before it had a model: no attempt, no review_reasons."""
    old = {
        "type": EXTRACTION_FAILED,
        "timestamp": AT.isoformat(),
        "data": {
            "job_id": str(JOB),
            "tenant_id": str(TENANT),
            "state": "FAILED_TERMINAL",
            "state_version": 4,
            "reason": "deadline_exceeded",
            "links": {"job": f"/extraction-jobs/{JOB}", "result": f"/extraction-jobs/{JOB}/result"},
        },
    }
    with pytest.raises(AssertionError, match="breaks its schema"):
        valid_webhook(json.dumps(old))


def test_the_readme_names_every_event_and_points_at_the_schemas():
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    assert "(events/schemas/)" in readme and "make schemas" in readme
    for event_type in PAYLOADS:
        assert f"`{event_type}`" in readme, event_type


def test_the_openapi_webhooks_section_is_built_from_the_same_models_as_the_schema_files():
    from tollgate.api.app import export_openapi

    document = json.loads(export_openapi())
    assert set(document["webhooks"]) == set(WEBHOOK_EVENT_TYPES)
    components = document["components"]["schemas"]
    for event_type in WEBHOOK_EVENT_TYPES:
        ref = document["webhooks"][event_type]["post"]["requestBody"]["content"]["application/json"]["schema"]
        body = components[ref["$ref"].rsplit("/", 1)[1]]
        committed = json.loads((EVENT_SCHEMAS / f"{event_type}.webhook.json").read_text(encoding="utf-8"))
        assert body["properties"].keys() == committed["properties"].keys()
        data = components[body["properties"]["data"]["$ref"].rsplit("/", 1)[1]]
        (committed_data,) = [d for name, d in committed["$defs"].items() if name.endswith("Data")]
        assert data["properties"].keys() == committed_data["properties"].keys()
        assert set(data["required"]) == set(committed_data["required"])


def test_a_job_state_change_is_an_internal_event_parsed_by_its_model_and_published_nowhere_as_such():
    """Live notifications send their own messages: the trigger's payload (migration 0021) parses, but the
    event has no schema file, no webhook body and no bus detail."""
    from tollgate.events import BUS_DETAILS, JOB_STATE_CHANGED, JobStateChanged

    stored = {
        "tenant_id": str(TENANT),
        "job_id": str(JOB),
        "job_type": "invoice_extraction",
        "state": "RUNNING",
        "state_version": 2,
        "sequence": 7,
        "occurred_at": "2026-03-01T12:00:00.250000Z",
    }
    event = parse_payload(JOB_STATE_CHANGED, stored)

    assert isinstance(event, JobStateChanged) and (event.sequence, event.state) == (7, "RUNNING")
    assert event.aggregate_id == JOB
    assert JOB_STATE_CHANGED not in PAYLOADS and JOB_STATE_CHANGED not in WEBHOOK_EVENT_TYPES
    assert JOB_STATE_CHANGED not in BUS_DETAILS
    assert not any(name.startswith(JOB_STATE_CHANGED) for name in schema_documents())
    for broken in ({"state": "DONE"}, {"sequence": 0}, {"occurred_at": "2026-03-01T12:00:00"}):
        with pytest.raises(ValidationError):
            parse_payload(JOB_STATE_CHANGED, {**stored, **broken})
