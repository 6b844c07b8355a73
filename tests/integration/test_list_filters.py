"""The API's list filters as a tenant uses them: ?job_type= keeps that type's jobs, and a filter value the API
does not know is a 422 problem naming the values it takes, never an empty page that looks like an answer."""

from __future__ import annotations

import pytest

from tests.support import invoice_request

pytestmark = pytest.mark.integration

SUMMARY = {"job_type": "document_summary", "document": {"pages": [{"text": "Minutes of the board, 3 May."}]}}


def test_job_type_keeps_that_types_jobs(tenant):
    invoice = tenant.client.submit(invoice_request(), "invoice").json["job_id"]
    summary = tenant.client.submit(SUMMARY, "summary").json["job_id"]

    summaries = tenant.client.request("GET", "/extraction-jobs?job_type=document_summary")
    invoices = tenant.client.request("GET", "/extraction-jobs?job_type=invoice_extraction&state=READY")
    every = tenant.client.request("GET", "/extraction-jobs")

    assert summaries.status == 200, summaries.body
    assert [job["job_id"] for job in summaries.json["items"]] == [summary]
    assert [job["job_id"] for job in invoices.json["items"]] == [invoice]
    assert {job["job_id"] for job in every.json["items"]} == {invoice, summary}


@pytest.mark.parametrize(
    ("path", "names"),
    [
        ("/extraction-jobs?job_type=summary", ["invoice_extraction", "document_summary"]),
        ("/extraction-jobs?state=DONE", ["READY", "FAILED_TERMINAL"]),
        ("/reviews?reason=nope", ["total_mismatch", "evidence_not_found"]),
    ],
    ids=["job-type", "state", "review-reason"],
)
def test_an_unknown_filter_value_is_a_422_that_names_the_values(tenant, path, names):
    tenant.client.submit(invoice_request(), "a job to hide")

    answer = tenant.client.request("GET", path)

    assert answer.status == 422, answer.body
    assert answer.header("content-type") == "application/problem+json"
    problem = answer.json
    assert problem["type"].endswith("validation-failed")
    said = problem["detail"] + str(problem.get("errors"))
    assert all(name in said for name in names), said
