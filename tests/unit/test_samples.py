from tollgate.samples import generate_invoices


def test_sample_invoices_add_up_to_the_cent_and_are_reproducible():
    invoices = generate_invoices(50, seed=3)
    assert invoices == generate_invoices(50, seed=3)
    for invoice in invoices:
        assert invoice.subtotal == sum(line.amount for line in invoice.lines)
        assert invoice.total == invoice.subtotal + invoice.tax
        assert f"Total due {invoice.total} {invoice.currency}" in invoice.pages[-1]
    assert len({i.currency for i in invoices}) >= 3
    assert any(len(i.pages) > 1 for i in invoices)
