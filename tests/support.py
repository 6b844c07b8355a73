"""Helpers shared by the test suites: request bodies, database probes and a stand-in cloud assembly."""

from __future__ import annotations

import json
import socket
from collections.abc import Collection, Mapping, Sequence
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any
from uuid import uuid4

import psycopg
from jsonschema import Draft202012Validator

from tollgate.db.queries import Queries, load_queries
from tollgate.events import EventPayload
from tollgate.outbox.relay import OutboxEvent
from tollgate.settings import REPO_ROOT

EVENT_SCHEMAS = REPO_ROOT / "events" / "schemas"


def invoice_request(
    text: str = "ACME GmbH\nInvoice 2026-001\nTotal EUR 119.00", **extra: Any
) -> dict[str, Any]:
    return {"document": {"pages": [{"text": text}]}, **extra}


def count_rows(owner_url: str) -> dict[str, int]:
    """Row counts of every table a request could write, read as the owner (no row-level security)."""
    tables = (
        *("extraction_jobs", "outbox_events", "documents", "job_attempts", "extraction_results"),
        "webhook_endpoints",
    )
    with psycopg.connect(owner_url) as conn:
        return {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in tables}  # type: ignore[index]


PLAN_QUERIES_DIR = REPO_ROOT / "tests" / "queries"


def plan_queries() -> Queries:
    """The seeds of plan-shape tests (tests/queries/plan_shapes.sql)."""
    return load_queries(PLAN_QUERIES_DIR)


def query_plan(owner_url: str, sql: str, params: Mapping[str, Any] | None = None) -> str:
    """EXPLAIN of ``sql`` with sequential scans priced out, planned on statistics of what the database
    holds now.

    Neither TRUNCATE (clean_db) nor an ANALYZE of an empty table removes a table's column statistics, so a
    plan-shape test that seeds nothing plans with whatever rows the last analyze sampled: earlier tests'
    rows, at a moment autovacuum chose. That made plans flip from run to run. The caller seeds every table
    its query reads (tests/queries/plan_shapes.sql); the ANALYZE here makes the statistics a function of
    that seed alone (it samples every row of tables this small).
    """
    with psycopg.connect(owner_url, autocommit=True) as conn:
        conn.execute(plan_queries().analyze_database)
        conn.execute("SET enable_seqscan = off")
        return "\n".join(str(row[0]) for row in conn.execute("EXPLAIN " + sql, params).fetchall())


def seed_review_shape(owner_url: str, tenant_id: Any, *, finished_before: datetime) -> None:
    """A tenant's jobs as review leaves them after a while: thousands done, hundreds rejected by a reviewer
    (a few not yet counted in the metrics), and sixty waiting, twenty of them for each of three reasons."""
    q = plan_queries()
    with psycopg.connect(owner_url) as conn:
        row = conn.execute(q.seed_plan_document, {"tenant_id": tenant_id}).fetchone()
        assert row is not None
        for state, count in (("SUCCEEDED", 3000), ("REJECTED", 300), ("REVIEW_REQUIRED", 60)):
            conn.execute(
                q.seed_plan_jobs,
                {
                    "tenant_id": tenant_id,
                    "document_id": row[0],
                    "state": state,
                    "count": count,
                    "finished_before": finished_before,
                },
            )
        conn.execute(q.seed_plan_results, {"tenant_id": tenant_id})
        conn.execute(q.seed_plan_decisions, {"tenant_id": tenant_id, "uncounted": 20})


def lease_job(
    owner_url: str, job_id: Any, *, attempt: int, lease_until: Any, fence: int | None = None
) -> int:
    """Puts a job in RUNNING as a worker's claim would (attempt and fence up, lease set); returns the fence."""
    with psycopg.connect(owner_url) as conn:
        row = conn.execute(
            "UPDATE extraction_jobs SET state = 'RUNNING', attempt = %s, fence = coalesce(%s, fence + 1),"
            " lease_owner = 'worker-test', lease_until = %s, next_attempt_at = NULL,"
            " state_version = state_version + 1 WHERE job_id = %s RETURNING fence, tenant_id",
            (attempt, fence, lease_until, job_id),
        ).fetchone()
        conn.execute(
            "INSERT INTO job_attempts (job_id, attempt, tenant_id, fence, worker_id, started_at)"
            " VALUES (%s, %s, %s, %s, 'worker-test', now())",
            (job_id, attempt, row[1], row[0]),
        )
    return int(row[0])


def job_row(owner_url: str, job_id: Any) -> dict[str, Any]:
    from psycopg.rows import dict_row

    with psycopg.connect(owner_url, row_factory=dict_row) as conn:
        row = conn.execute("SELECT * FROM extraction_jobs WHERE job_id = %s", (job_id,)).fetchone()
    assert row is not None
    return row


class Trap:
    """A listening socket that only counts who connected to it: proves a refused target got no byte."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.sock = socket.create_server((host, port))
        self.sock.setblocking(False)
        self.port: int = self.sock.getsockname()[1]

    def connections(self) -> int:
        count = 0
        while True:
            try:
                conn, _ = self.sock.accept()
            except BlockingIOError:
                return count
            conn.close()
            count += 1

    def close(self) -> None:
        self.sock.close()


def outbox_event(payload: EventPayload, *, created_at: datetime | None = None) -> OutboxEvent:
    """An event as the relay hands it on, built through the events module as every producer builds one."""
    return OutboxEvent(
        event_id=uuid4(),
        event_type=payload.event_type,
        tenant_id=payload.tenant_id,
        aggregate_id=payload.job_id,
        payload=payload.model_dump(mode="json"),
        created_at=created_at or datetime.now(UTC),
    )


@cache
def _webhook_validator(event_type: str) -> Draft202012Validator:
    schema = json.loads((EVENT_SCHEMAS / f"{event_type}.webhook.json").read_text(encoding="utf-8"))
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema, format_checker=Draft202012Validator.FORMAT_CHECKER)


def valid_webhook(body: bytes | str) -> dict[str, Any]:
    """A received webhook body, checked against the committed JSON Schema of its type (the file tenants
    read, not the model that wrote it); returns it parsed."""
    document: dict[str, Any] = json.loads(body)
    errors = sorted(_webhook_validator(document["type"]).iter_errors(document), key=str)
    assert not errors, f"webhook body breaks its schema: {[e.message for e in errors]}\n{document}"
    return document


# Public addresses that tests resolve names to; never contacted (a fake connector or a refusal comes first).
PUBLIC_V4 = "93.184.215.14"
PUBLIC_V6 = "2606:2800:21f:cb07:6820:80da:af6b:8b2c"


class FakeResolver:
    """The DNS, in memory, so no test query leaves the machine: ``answers`` by name; a name in ``failing``
    gets no answer at all (the resolver failed); any other name gets ``default`` or, without one, "no such
    name"."""

    def __init__(
        self,
        answers: Mapping[str, Sequence[str]] | None = None,
        *,
        default: Sequence[str] | None = None,
        failing: Collection[str] = (),
    ) -> None:
        self.answers = dict(answers or {})
        self.default = default
        self.failing = set(failing)
        self.calls: list[str] = []

    def __call__(self, host: str, port: int) -> Sequence[str]:
        self.calls.append(host)
        if host in self.failing:
            raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")
        if host in self.answers:
            return self.answers[host]
        if self.default is not None:
            return self.default
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")


def write_assembly(
    root: Path,
    *,
    stage: str = "dev",
    reserved: Sequence[int] = (2, 1),
    bootstrap: int = 6,
    manages_api_gateway_account: bool = False,
    other_stage_reserved: int = 50,
) -> Path:
    """A cloud assembly with one stack of ``stage`` (plus one of another stage, which must not count)."""
    root.mkdir(parents=True, exist_ok=True)
    artifacts = {}
    for name, functions, account in (
        (f"Tollgate-{stage}-Pipeline", list(reserved), manages_api_gateway_account),
        ("Tollgate-other-Pipeline", [other_stage_reserved], False),
    ):
        resources: dict[str, dict[str, object]] = {
            f"Function{index}": {
                "Type": "AWS::Lambda::Function",
                "Properties": {"ReservedConcurrentExecutions": count},
            }
            for index, count in enumerate(functions)
        }
        resources["Unreserved"] = {"Type": "AWS::Lambda::Function", "Properties": {}}
        if account:
            resources["ApiAccount"] = {"Type": "AWS::ApiGateway::Account", "Properties": {}}
        (root / f"{name}.template.json").write_text(json.dumps({"Resources": resources}))
        artifacts[name] = {
            "type": "aws:cloudformation:stack",
            "environment": "aws://unknown-account/unknown-region",
            "properties": {
                "templateFile": f"{name}.template.json",
                "requiresBootstrapStackVersion": bootstrap,
                "bootstrapStackVersionSsmParameter": "/cdk-bootstrap/hnb659fds/version",
            },
        }
    (root / "manifest.json").write_text(json.dumps({"artifacts": artifacts}))
    return root
