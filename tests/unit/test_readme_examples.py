"""The README walkthrough's two invoices: the text it shows is the text of the file it submits, and what
the simulated provider reads from them passes validation (the first) or breaks the rules the README lists
(the second), for a tenant set up as the walkthrough sets up acme."""

from __future__ import annotations

import json

import pytest

from tollgate.jobtypes.invoice_extraction.schema import Invoice
from tollgate.jobtypes.invoice_extraction.validation import (
    KnownSupplier,
    TenantPolicy,
    ValidationReport,
    validate_invoice,
)
from tollgate.settings import REPO_ROOT
from tollgate_dev.simulator.extraction import extract

README = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
# acme after `tollgate tenants create acme` (the default currencies) and the walkthrough's add-supplier.
ACME = TenantPolicy(
    allowed_currencies=frozenset({"EUR", "USD", "GBP", "CHF"}),
    suppliers=(KnownSupplier("Nordwind Logistik GmbH", "DE89370400440532013000"),),
)


def pages_of(name: str) -> list[str]:
    document = json.loads((REPO_ROOT / "examples" / name).read_text(encoding="utf-8"))["document"]
    return [page["text"] for page in document["pages"]]


def judged(name: str) -> ValidationReport:
    pages = pages_of(name)
    return validate_invoice(Invoice.model_validate(extract(pages)), pages, ACME)


@pytest.mark.parametrize("name", ["invoice-2026-001.json", "invoice-2026-002.json"])
def test_the_readme_shows_the_text_of_the_file_it_submits(name):
    (text,) = pages_of(name)

    assert f"-d @examples/{name}" in README or f"tollgate submit examples/{name}" in README
    assert f"```text\n{text}```" in README


def test_the_first_invoice_passes_validation():
    assert judged("invoice-2026-001.json").reasons == []


def test_the_second_invoice_needs_review_for_the_reasons_the_readme_shows():
    reasons = judged("invoice-2026-002.json").reasons

    assert [reason.code for reason in reasons] == ["total_mismatch", "supplier_unknown"]
    for reason in reasons:
        assert f'"code": "{reason.code}"' in README
        assert f'"detail": {json.dumps(reason.detail)}' in README


def test_the_readme_shows_the_live_notifications_client_the_integration_tests_run():
    client = (REPO_ROOT / "tollgate_dev" / "live_feed.py").read_text(encoding="utf-8")

    assert f"```python\n{client}```" in README
