"""`tollgate reviews` as a reviewer runs it, in this process against real PostgreSQL: the queue oldest first
and by reason, a job's review with its evidence, and decisions through the same use cases as the API, each
audited; bad input is an error with exit code 2 and nothing written."""

from __future__ import annotations

import json

import psycopg
import pytest
from psycopg.rows import dict_row
from typer.testing import CliRunner

from tests.integration.test_execution import extraction
from tests.integration.test_reviews import waiting_review
from tests.support import invoice_request, job_row
from tollgate.cli.main import app
from tollgate.core.clock import new_id
from tollgate.tenants.suppliers import add_supplier

pytestmark = pytest.mark.integration


@pytest.fixture
def reviews(tenant, system_db, stack, clean_db, monkeypatch, tmp_path):
    """Two results waiting for review (a wrong total, then a currency the tenant does not take), and an
    environment that names only the database."""
    add_supplier(system_db, tenant.tenant_id, "Nordwind Logistik GmbH", "DE89370400440532013000", new_id)
    jobs = [
        waiting_review(tenant, system_db, extraction(total="999.70")),
        waiting_review(tenant, system_db, extraction(currency="JPY")),
    ]
    for name in ("DATABASE_SECRET_ARN", "DOCUMENTS_BUCKET", "TOLLGATE_ACTOR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DATABASE_URL", clean_db)
    return jobs, tmp_path


def cli(data_dir, *args):
    return CliRunner().invoke(app, [*args, "--data-dir", str(data_dir)], env={"COLUMNS": "200"})


def rows(url, sql, *args):
    with psycopg.connect(url, row_factory=dict_row) as conn:
        return conn.execute(sql, args).fetchall()


def test_the_queue_lists_oldest_first_with_reasons_and_filters_by_one(reviews, clean_db):
    (wrong_total, wrong_currency), data_dir = reviews

    listed = cli(data_dir, "reviews", "list")
    filtered = cli(data_dir, "reviews", "list", "--reason", "currency_not_allowed", "-o", "json")

    assert listed.exit_code == 0, listed.output
    assert listed.stdout.index(wrong_total) < listed.stdout.index(wrong_currency)
    assert "total_mismatch" in listed.stdout and "acme" in listed.stdout
    assert filtered.exit_code == 0, filtered.output
    items = json.loads(filtered.stdout)
    assert [item["job_id"] for item in items] == [wrong_currency]
    assert items[0]["reason_codes"] == ["currency_not_allowed", "value_not_printed"]
    assert items[0]["tenant"] == "acme"


def test_an_unknown_reason_is_an_error_that_names_the_reasons_not_an_empty_queue(reviews):
    _, data_dir = reviews

    result = cli(data_dir, "reviews", "list", "--reason", "nope")

    assert result.exit_code == 2
    assert "'nope' is not a review reason" in result.stderr
    assert "total_mismatch" in result.stderr and "currency_not_allowed" in result.stderr
    assert result.stdout == ""


def test_show_prints_the_reasons_and_each_values_evidence_in_the_document(reviews):
    (wrong_total, _), data_dir = reviews

    shown = cli(data_dir, "reviews", "show", wrong_total)
    as_json = cli(data_dir, "reviews", "show", wrong_total, "--output", "json")

    assert shown.exit_code == 0, shown.output
    assert "total_mismatch (total)" in shown.stdout
    assert 'quote   "Total due 999.60 EUR"\n            the quote is at page 1, ' in shown.stdout, (
        "not located"
    )
    assert "iban: DE89370400440532013000\n    found   by the policy, page 1, " in shown.stdout
    assert 'under "IBAN" (iban)' in shown.stdout, "where the policy found it and the label there"
    assert "[[Total due 999.60 EUR]]" in shown.stdout, "the quote marked in its context"
    assert json.loads(as_json.stdout)["state"] == "REVIEW_REQUIRED"


def test_a_decision_at_the_cli_is_recorded_with_the_reviewer_and_audited(reviews, clean_db):
    (wrong_total, wrong_currency), data_dir = reviews

    approved = cli(
        data_dir,
        "reviews",
        "decide",
        wrong_total,
        "--approve",
        "--note",
        "total is right",
        "--reviewer",
        "alice",
    )
    rejected = cli(data_dir, "reviews", "decide", wrong_currency, "--reject", "--note", "not ours")

    assert approved.exit_code == 0, approved.output
    assert f"job {wrong_total} is SUCCEEDED" in approved.stdout and "result version 2" in approved.stdout
    assert rejected.exit_code == 0, rejected.output
    assert job_row(clean_db, wrong_currency)["state"] == "REJECTED"
    [decision] = rows(
        clean_db,
        "SELECT reviewer, reviewer_key_id, note FROM review_decisions WHERE job_id = %s",
        wrong_total,
    )
    assert decision == {"reviewer": "alice", "reviewer_key_id": None, "note": "total is right"}
    audit = rows(
        clean_db, "SELECT actor, action, target, outcome, reason FROM support_audit ORDER BY audit_id"
    )
    assert [(a["action"], a["target"], a["outcome"]) for a in audit] == [
        ("review_decide", wrong_total, "approve"),
        ("review_decide", wrong_currency, "reject"),
    ]
    assert audit[0]["actor"] == "alice" and audit[0]["reason"] == "total is right"


def test_a_correction_from_a_file_is_re_validated_and_refused_with_its_reasons_when_it_still_fails(
    reviews, clean_db, tmp_path
):
    (wrong_total, _), data_dir = reviews
    still_wrong, right = tmp_path / "wrong.json", tmp_path / "right.json"
    still_wrong.write_text(json.dumps({"total": "999.80"}))
    right.write_text(json.dumps({"total": "999.60"}))

    refused = cli(data_dir, "reviews", "decide", wrong_total, "--correct", str(still_wrong), "--note", "try")
    accepted = cli(data_dir, "reviews", "decide", wrong_total, "--correct", str(right), "--note", "misread")

    assert refused.exit_code == 2
    assert "still fails validation" in refused.stderr and "total_mismatch (total)" in refused.stderr
    assert accepted.exit_code == 0, accepted.output
    [decision] = rows(clean_db, "SELECT decision, result->>'total' AS total FROM review_decisions")
    assert decision == {"decision": "correct", "total": "999.60"}
    assert [a["outcome"] for a in rows(clean_db, "SELECT outcome FROM support_audit")] == ["correct"]


@pytest.mark.parametrize(
    "args",
    [
        ["--note", "no decision"],
        ["--approve", "--reject", "--note", "both"],
        ["--approve", "--note", "x"],
        ["--approve"],
        ["--approve", "--note", "stale", "--expect-version", "1"],
    ],
    ids=["no-decision", "two-decisions", "a-note-too-short", "no-note", "a-stale-version"],
)
def test_a_decision_that_cannot_be_made_is_an_error_and_writes_nothing(reviews, clean_db, args):
    (wrong_total, _), data_dir = reviews
    version = job_row(clean_db, wrong_total)["state_version"]

    result = cli(data_dir, "reviews", "decide", wrong_total, *args)

    assert result.exit_code == 2, result.output
    assert job_row(clean_db, wrong_total)["state_version"] == version
    assert rows(clean_db, "SELECT count(*) AS n FROM support_audit")[0]["n"] == 0


def test_a_job_without_a_review_or_an_unknown_job_is_an_error(reviews, tenant, clean_db):
    _, data_dir = reviews
    ready = tenant.client.submit(invoice_request(), "not-reviewed").json["job_id"]

    assert cli(data_dir, "reviews", "show", ready).exit_code == 2
    assert cli(data_dir, "reviews", "decide", ready, "--approve", "--note", "nothing").exit_code == 2
    missing = cli(data_dir, "reviews", "show", "6f1e7a7e-0000-4000-8000-00000000000a")
    assert missing.exit_code == 2 and "no extraction job" in missing.stderr
