"""Issue-level story of trustworthy results on the whole local system: for each class of plausible wrong
value with real-looking evidence (a date under "Due", an order number as the invoice number, a token cut
short, a look-alike character, a fact whose figure differs from its own quote, a label its evidence does not
show, …) the simulated model answers one document truthfully once and with that one fabricated value once.
Through the API, the queue, the worker and the policy, the truthful job ends SUCCEEDED with where each value
is printed recorded in /result, and the fabricated one ends REVIEW_REQUIRED with the reason that names it."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest

from tests.e2e.test_review_on_local_stack import REALISTIC
from tollgate.core.clock import new_id
from tollgate.settings import REPO_ROOT
from tollgate.tenants.keys import create_tenant
from tollgate.tenants.suppliers import add_supplier
from tollgate_dev.local.client import ApiClient
from tollgate_dev.local.runtime import LocalStack
from tollgate_dev.samples import (
    CLEAN,
    EXTRAS,
    INJECTION,
    LANGUAGES,
    MULTI_PAGE,
    NOTE_CURRENCIES,
    OCR_NOISE,
    SUPPLIERS,
    generate_invoices,
    request_body,
)
from tollgate_dev.simulator.documents import DocumentMistake
from tollgate_dev.simulator.extraction import Mistake, mistake_applies
from tollgate_dev.simulator.server import Fault, Latency, SimulatorConfig

pytestmark = pytest.mark.e2e

# How long the local system may take to get somewhere on a loaded machine; it runs out only when failing.
PATIENCE_SECONDS = 120
TERMINAL = {"SUCCEEDED", "REVIEW_REQUIRED", "FAILED_TERMINAL", "REJECTED", "CANCELLED"}

# The class of fabrication, and the reasons that must name it.
INVOICE_CLASSES = {
    Mistake.ISSUE_DATE_IS_DUE_DATE: [("value_not_labelled", "issue_date")],
    Mistake.DATES_SWAPPED: [("value_not_labelled", "issue_date"), ("dates_out_of_order", "due_date")],
    Mistake.INVOICE_NUMBER_FROM_ORDER: [("value_not_labelled", "invoice_number")],
    Mistake.INVOICE_NUMBER_FROM_TAX_ID: [("value_not_labelled", "invoice_number")],
    Mistake.CURRENCY_FROM_NOTE: [("value_not_labelled", "currency")],
    Mistake.IBAN_FROM_DIRECT_DEBIT: [("value_not_labelled", "iban")],
    Mistake.CUT_INVOICE_NUMBER: [("value_not_printed", "invoice_number")],
    Mistake.CUT_DATE: [("value_not_printed", "issue_date")],
    Mistake.LONG_S: [("value_not_printed", "supplier")],
    Mistake.KELVIN_SIGN: [("value_not_printed", "supplier")],
    Mistake.FULLWIDTH_TOTAL: [("value_not_printed", "total")],
    Mistake.TAX_RATE_CHANGED: [("tax_rate_mismatch", "tax")],
    Mistake.DESCRIPTIONS_SWAPPED: [("line_not_printed", "line_items[0]")],
    Mistake.DESCRIPTION_INVENTED: [("value_not_printed", None)],
}
CONTRACT = [
    "SERVICE AGREEMENT\nbetween Acme GmbH, Hamburg, and Nordwind Logistik GmbH, Bremen\n"
    "The term is 12 months from 01.03.2026.\nThe monthly fee is EUR 1.450,00, payable by the 5th.",
    "Either party may end the agreement with 3 months notice.\nSigned in Hamburg on 14 February 2026",
]
DOCUMENT = {"pages": [{"text": page} for page in CONTRACT]}
SUMMARY = {"job_type": "document_summary", "document": DOCUMENT, "options": {"max_words": 60, "max_facts": 5}}
CLASSIFICATION = {
    "job_type": "document_classification",
    "document": DOCUMENT,
    "options": {"labels": ["invoice", "receipt", "service_agreement"]},
}
DOCUMENT_CLASSES = {
    Fault.FACT_NUMBER_CHANGED: (SUMMARY, [("fact_not_in_quote", None)]),
    Fault.FACT_NAME_CHANGED: (SUMMARY, [("fact_not_in_quote", None)]),
    Fault.SUMMARY_NUMBER_INVENTED: (SUMMARY, [("summary_number_unsupported", "summary")]),
    Fault.LABEL_WITHOUT_CUE: (CLASSIFICATION, [("label_not_evidenced", "label")]),
}


def invoice_for(mistake: Mistake) -> dict[str, Any]:
    """A sample that gives the mistake something to work on, in a language picked by the class."""
    language = LANGUAGES[list(INVOICE_CLASSES).index(mistake) % len(LANGUAGES)]
    for sample in generate_invoices(30, seed=29, kinds=(CLEAN, MULTI_PAGE), language=language, extras=EXTRAS):
        if mistake_applies(mistake, sample.pages):
            return request_body(sample)
    raise AssertionError(f"no sample gives {mistake.value} anything to change")


@dataclass
class Adversary:
    stack: LocalStack
    client: ApiClient

    def run(self, body: dict[str, Any], key: str, fault: Fault | None = None) -> dict[str, Any]:
        """Submits ``body`` with ``fault`` queued for its one provider call; the job's final view."""
        simulator = self.stack.simulator
        assert simulator.queued_faults() == [], "a fault left from another job would be this one's"
        if fault is not None:
            simulator.queue_fault(fault)
        accepted = self.client.submit(body, key)
        assert accepted.status == 202, accepted.json
        job_id = accepted.json["job_id"]
        assert self.stack.wait_for(lambda: self.state(job_id) in TERMINAL, timeout=PATIENCE_SECONDS), (
            f"job {job_id} is still {self.state(job_id)}"
        )
        assert simulator.queued_faults() == [], "the job's call took the fault"
        job: dict[str, Any] = self.client.request("GET", f"/extraction-jobs/{job_id}").json
        return job

    def state(self, job_id: str) -> str:
        with psycopg.connect(self.stack.database_url) as conn:
            row = conn.execute("SELECT state FROM extraction_jobs WHERE job_id = %s", (job_id,)).fetchone()
        return str(row[0])

    def reasons(self, job_id: str) -> set[tuple[str, str]]:
        review = self.client.request("GET", f"/extraction-jobs/{job_id}/review")
        assert review.status == 200, review.json
        return {(r["code"], r["field"]) for r in review.json["reasons"]}


@pytest.fixture(scope="module")
def adversary(fresh_database: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Adversary]:
    """One local system for every class: no escalation, so the fabricated answer is the job's only one."""
    from tollgate.db.migrations import apply_migrations

    url = fresh_database()
    apply_migrations(url, REPO_ROOT / "migrations")
    stack = LocalStack(
        port=0,
        data_dir=tmp_path_factory.mktemp("adversary"),
        database_url=url,
        simulator_config=SimulatorConfig(
            requests_per_minute=None, tokens_per_minute=None, latency=Latency(0.0)
        ),
        worker_overrides={"escalate_to_large_model": False},
    ).start()
    try:
        currencies = sorted({s.currency for s in SUPPLIERS} | set(NOTE_CURRENCIES))
        tenant = create_tenant(stack.system_db, "adversary", new_id, allowed_currencies=currencies)
        for supplier in SUPPLIERS:
            add_supplier(stack.system_db, tenant.tenant_id, supplier.name, supplier.iban or None, new_id)
        yield Adversary(stack, ApiClient(stack.api_url, tenant.api_key))
    finally:
        stack.stop()


def test_every_adversary_class_is_tried_here():
    assert set(INVOICE_CLASSES) == set(Mistake) - set(REALISTIC) - {Mistake.EVIDENCE_ELSEWHERE}
    adversarial = {m.value for m in DocumentMistake} - {
        "over_word_limit",
        "unsupported_fact",
        "label_outside_set",
    }
    assert {fault.value for fault in DOCUMENT_CLASSES} == adversarial


def test_the_truth_of_every_sample_kind_language_and_layout_succeeds(adversary):
    """No false alarm on the truth: every consistent kind (multi-page, OCR noise and planted instructions
    included) in every language, with and without the lines that name other values, ends SUCCEEDED."""
    kinds = (CLEAN, MULTI_PAGE, OCR_NOISE, INJECTION)
    samples = [
        sample
        for language in LANGUAGES
        for extras in ((), EXTRAS)
        for sample in generate_invoices(len(kinds), seed=31, kinds=kinds, language=language, extras=extras)
    ]
    assert adversary.stack.simulator.queued_faults() == []
    job_ids = {}
    for index, sample in enumerate(samples):
        accepted = adversary.client.submit(request_body(sample), f"truth-sample-{index}")
        assert accepted.status == 202, accepted.json
        job_ids[accepted.json["job_id"]] = (sample.kind, sample.language, ",".join(sorted(sample.extras)))
    assert adversary.stack.wait_for(
        lambda: all(adversary.state(j) in TERMINAL for j in job_ids), timeout=PATIENCE_SECONDS
    )
    ended = {described: adversary.state(job_id) for job_id, described in job_ids.items()}
    assert {state for state in ended.values()} == {"SUCCEEDED"}, ended
    assert {sample.language for sample in samples} == set(LANGUAGES) and any(
        len(s.pages) > 1 for s in samples
    )


def assert_named(reasons: set[tuple[str, str]], expected: list[tuple[str, str | None]]) -> None:
    for code, field in expected:
        assert any(c == code and (field is None or f == field) for c, f in reasons), (code, field, reasons)


@pytest.mark.parametrize("mistake", list(INVOICE_CLASSES), ids=lambda m: m.value)
def test_a_fabricated_invoice_value_ends_in_review_and_the_truth_succeeds(adversary, mistake):
    body = invoice_for(mistake)

    truthful = adversary.run(body, f"truth-{mistake.value}")
    fabricated = adversary.run(body, f"fabricated-{mistake.value}", Fault(mistake.value))

    assert truthful["state"] == "SUCCEEDED", truthful
    result = adversary.client.request("GET", f"/extraction-jobs/{truthful['job_id']}/result").json
    assert result["policy_version"] == "validation.v3"
    located = {entry["field"]: entry for entry in result["evidence"]}
    assert (
        located["total"]["label"]["field"] == "total"
        and located["issue_date"]["label"]["field"] == "issue_date"
    )
    page = body["document"]["pages"][located["total"]["page"] - 1]["text"]
    assert page[located["total"]["start"] : located["total"]["end"]] == located["total"]["text"]
    assert fabricated["state"] == "REVIEW_REQUIRED", fabricated
    assert_named(adversary.reasons(fabricated["job_id"]), INVOICE_CLASSES[mistake])


@pytest.mark.parametrize("fault", list(DOCUMENT_CLASSES), ids=lambda f: f.value)
def test_a_fabricated_fact_or_label_ends_in_review_and_the_truth_succeeds(adversary, fault):
    body, expected = DOCUMENT_CLASSES[fault]

    truthful = adversary.run(body, f"truth-{fault.value}")
    fabricated = adversary.run(body, f"fabricated-{fault.value}", fault)

    assert truthful["state"] == "SUCCEEDED", truthful
    result = adversary.client.request("GET", f"/extraction-jobs/{truthful['job_id']}/result").json
    assert result["policy_version"] in {"summary.v2", "classification.v2"} and result["evidence"]
    assert fabricated["state"] == "REVIEW_REQUIRED", fabricated
    assert_named(adversary.reasons(fabricated["job_id"]), expected)
