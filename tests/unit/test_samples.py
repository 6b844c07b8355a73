"""Sample invoices: reproducible from a seed, every kind represented, and a ground truth whose values are the
printed ones and whose evidence is text of the pages."""

from __future__ import annotations

import hashlib
import json
import random
from decimal import Decimal

import pytest

from tollgate.jobtypes.invoice_extraction.evidence import evidence_fields, locate
from tollgate.jobtypes.invoice_extraction.schema import Evidence, Invoice
from tollgate_dev.samples import (
    CONSISTENT_KINDS,
    INCONSISTENT_TOTAL,
    INJECTION,
    KINDS,
    MULTI_PAGE,
    OCR_NOISE,
    SUPPLIERS,
    SampleInvoice,
    expected_invoice,
    generate_invoice,
    generate_invoices,
    money_text,
    request_body,
)


def evidence_of(truth: Invoice) -> list[tuple[str, Evidence]]:
    return [(name, e) for name, e in evidence_fields(truth) if e is not None]


def test_sample_invoices_add_up_to_the_cent_and_are_reproducible():
    invoices = generate_invoices(50, seed=3)
    assert invoices == generate_invoices(50, seed=3)
    assert invoices != generate_invoices(50, seed=4)
    for invoice in invoices:
        assert invoice.subtotal == sum(line.amount for line in invoice.lines)
        if invoice.kind in CONSISTENT_KINDS:
            assert invoice.total == invoice.subtotal + invoice.tax
        assert invoice.spans is not None
        assert invoice.spans.total.page == len(invoice.pages)
        assert locate(invoice.spans.total, invoice.pages) is not None
    assert len({i.currency for i in invoices}) >= 3
    assert len({i.tax_rate for i in invoices}) >= 3
    assert any(len(i.pages) > 1 for i in invoices)


def test_the_default_mix_has_every_kind_and_a_kinds_list_cycles_through_them():
    assert {i.kind for i in generate_invoices(100, seed=1)} == set(KINDS)
    cycled = generate_invoices(10, seed=1, kinds=KINDS)
    assert [i.kind for i in cycled] == [*KINDS, *KINDS]


def test_every_value_of_the_ground_truth_has_evidence_that_resolves_to_its_page():
    for sample in generate_invoices(200, seed=5, kinds=KINDS):
        truth = expected_invoice(sample)
        fields = dict(evidence_of(truth))
        expected = {"supplier", "invoice_number", "issue_date", "due_date", "currency", "subtotal", "tax"}
        assert expected | {"total", "iban"} if sample.iban else expected | {"total"} <= set(fields)
        assert {f"line_items[{i}]" for i in range(len(sample.lines))} <= set(fields)
        for name, evidence in fields.items():
            assert locate(evidence, sample.pages) is not None, (sample.kind, name, evidence)
            assert evidence.quote == evidence.quote.strip()


def test_the_ground_truth_is_a_valid_extraction_of_the_printed_values():
    sample = generate_invoice(random.Random(2), 42, "clean")
    truth = expected_invoice(sample)
    assert truth.supplier.name == sample.supplier
    assert truth.invoice_number == sample.invoice_number
    assert truth.issue_date == sample.issue_date.isoformat()
    assert truth.currency == sample.currency
    assert truth.total == f"{sample.total:.2f}"
    assert [line.amount for line in truth.line_items] == [f"{line.amount:.2f}" for line in sample.lines]
    assert Decimal(truth.subtotal or "0") + Decimal(truth.tax.amount or "0") == Decimal(truth.total or "0")


def test_an_inconsistent_total_is_printed_and_is_the_ground_truth():
    for seed in range(20):
        sample = generate_invoice(random.Random(seed), seed, INCONSISTENT_TOTAL)
        truth = expected_invoice(sample)
        assert not sample.consistent
        assert sample.total != sample.subtotal + sample.tax
        assert Decimal(truth.total or "0") == sample.total
        assert Decimal(truth.subtotal or "0") + Decimal(truth.tax.amount or "0") != Decimal(
            truth.total or "0"
        )


def test_an_injected_instruction_is_printed_but_changes_nothing_in_the_ground_truth():
    sample = generate_invoice(random.Random(8), 8, INJECTION)
    assert sample.injection is not None
    assert sample.has_injection
    assert any(sample.injection in page for page in sample.pages)
    truth = expected_invoice(sample)
    assert truth.total == f"{sample.subtotal + sample.tax:.2f}" != "0.00"
    assert truth.iban == (sample.iban or None)
    assert all(sample.injection not in e.quote for _, e in evidence_of(truth))


def test_a_multi_page_sample_carries_lines_over_pages_and_ends_with_the_totals():
    sample = generate_invoice(random.Random(4), 4, MULTI_PAGE)
    assert sample.multi_page
    assert sample.spans is not None
    assert sample.spans.subtotal.page == len(sample.pages) and sample.spans.supplier.page == 1
    assert sample.spans.subtotal.quote in sample.pages[-1]
    assert sample.spans.supplier.quote in sample.pages[0]
    pages_with_lines = {line.page for line in sample.spans.lines}
    assert len(pages_with_lines) >= 2
    assert all(line.quote in sample.pages[line.page - 1] for line in sample.spans.lines)


def test_ocr_noise_shifts_spacing_and_wraps_lines_but_keeps_every_value_readable():
    samples = [generate_invoice(random.Random(seed), seed, OCR_NOISE) for seed in range(20)]
    assert any("  " in " ".join(s.pages[0].split("\n")[:8]) for s in samples)
    assert any(
        "\n" in line.evidence.quote
        for s in samples
        for line in expected_invoice(s).line_items
        if line.evidence
    )
    for sample in samples:
        text = " ".join(" ".join(sample.pages).split())
        profile = next(p for p in SUPPLIERS if p.name == sample.supplier)
        for line in sample.lines:
            assert money_text(line.amount, profile.number_style) in text
        assert money_text(sample.total, profile.number_style) in text


def test_every_supplier_iban_passes_its_checksum():
    for profile in SUPPLIERS:
        if profile.iban:
            rearranged = profile.iban[4:] + profile.iban[:4]
            assert int("".join(str(int(c, 36)) for c in rearranged)) % 97 == 1, profile.name


def test_the_existing_api_still_works():
    sample = generate_invoice(random.Random(1), 1)
    assert isinstance(sample, SampleInvoice)
    body = request_body(sample, metadata={"n": 1})
    assert body["document"] == {"pages": [{"text": page} for page in sample.pages]}
    assert body["metadata"] == {"n": 1}
    with pytest.raises(ValueError, match="unknown sample kind"):
        generate_invoice(random.Random(1), 1, "handwritten")
    with pytest.raises(ValueError, match="generated samples"):
        expected_invoice(SampleInvoice(**{**sample.__dict__, "spans": None}))


def fingerprint(samples: list[SampleInvoice]) -> str:
    """One digest of what a benchmark sees of each sample: its kind, its pages and its ground truth."""
    digest = hashlib.sha256()
    for sample in samples:
        seen = {
            "kind": sample.kind,
            "pages": list(sample.pages),
            "truth": expected_invoice(sample).model_dump(mode="json"),
        }
        digest.update(json.dumps(seen, sort_keys=True, ensure_ascii=False).encode())
    return digest.hexdigest()


@pytest.mark.parametrize(
    ("count", "seed", "kinds", "digest"),
    [
        # The 40 invoices of the benchmarks and `make bench-model`.
        (40, 15, KINDS, "1d3de94e1789290f23a5f28b240ed3637e463283a0e3e4d19f5cd4b07ffb1e32"),
        (200, 5, KINDS, "55582d53973227babba8375eaeea7b0cbacfbc2849b05f9355985a544ec09115"),
        (100, 1, None, "8627afc7bba4c53129da3e78410b41e9d165df7b99836aab4316a91c2992f9bc"),
    ],
)
def test_the_default_samples_are_the_same_invoices_byte_for_byte(count, seed, kinds, digest):
    """Benchmarks compare runs over "the same 40 invoices": new options at their defaults change nothing."""
    assert fingerprint(generate_invoices(count, seed=seed, kinds=kinds)) == digest
