"""Realistic invoice OCR texts with their ground truth, generated from a seed.

Used by the demo, the benchmarks and the tests; the simulated provider (a later piece) extracts from them.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import date, timedelta
from decimal import Decimal

SUPPLIERS = (
    ("Nordwind Logistik GmbH", "DE", "EUR", Decimal("0.19"), "DE89370400440532013000"),
    ("Atelier Lumière SARL", "FR", "EUR", Decimal("0.20"), "FR1420041010050500013M02606"),
    ("Thames Office Supplies Ltd", "GB", "GBP", Decimal("0.20"), "GB29NWBK60161331926819"),
    ("Bergkristall AG", "CH", "CHF", Decimal("0.081"), "CH9300762011623852957"),
    ("Great Lakes Hardware Inc.", "US", "USD", Decimal("0.0625"), ""),
)
ITEMS = (
    ("Pallet transport Hamburg-Berlin", Decimal("420.00")),
    ("A4 copy paper, 80 g, box of 5 reams", Decimal("23.90")),
    ("Toner cartridge TN-2420", Decimal("61.50")),
    ("On-site repair, per hour", Decimal("95.00")),
    ("Ergonomic office chair", Decimal("289.00")),
    ("Cloud backup, monthly", Decimal("14.99")),
    ("Packing tape, 48 mm", Decimal("3.25")),
    ("Consulting day rate", Decimal("1150.00")),
)
CENT = Decimal("0.01")


@dataclass(frozen=True)
class LineItem:
    description: str
    quantity: Decimal
    unit_price: Decimal

    @property
    def amount(self) -> Decimal:
        return (self.quantity * self.unit_price).quantize(CENT)


@dataclass(frozen=True)
class SampleInvoice:
    supplier: str
    country: str
    invoice_number: str
    issue_date: date
    due_date: date
    currency: str
    tax_rate: Decimal
    iban: str
    lines: tuple[LineItem, ...]
    pages: tuple[str, ...] = field(default=())

    @property
    def subtotal(self) -> Decimal:
        return sum((line.amount for line in self.lines), Decimal("0.00"))

    @property
    def tax(self) -> Decimal:
        return (self.subtotal * self.tax_rate).quantize(CENT)

    @property
    def total(self) -> Decimal:
        return self.subtotal + self.tax


def _render(invoice: SampleInvoice, lines_per_page: int) -> tuple[str, ...]:
    header = [
        invoice.supplier,
        f"Invoice no. {invoice.invoice_number}",
        f"Invoice date: {invoice.issue_date.isoformat()}    Due: {invoice.due_date.isoformat()}",
        "",
        "Description                              Qty    Unit price    Amount",
    ]
    currency = invoice.currency
    body = [
        f"{line.description:<40} {line.quantity:>4} {line.unit_price:>12} {line.amount:>10} {currency}"
        for line in invoice.lines
    ]
    footer = [
        "",
        f"Subtotal {invoice.subtotal} {invoice.currency}",
        f"VAT {invoice.tax_rate * 100:.1f}% {invoice.tax} {invoice.currency}",
        f"Total due {invoice.total} {invoice.currency}",
    ]
    if invoice.iban:
        footer.append(f"IBAN {invoice.iban}")
    chunks = [body[i : i + lines_per_page] for i in range(0, len(body), lines_per_page)] or [[]]
    pages = []
    for number, chunk in enumerate(chunks, start=1):
        text = [*header, *chunk] if number == 1 else [f"{invoice.invoice_number} page {number}", *chunk]
        if number == len(chunks):
            text += footer
        pages.append("\n".join(text))
    return tuple(pages)


def generate_invoice(rng: random.Random, number: int) -> SampleInvoice:
    supplier, country, currency, tax_rate, iban = rng.choice(SUPPLIERS)
    issued = date(2026, 1, 1) + timedelta(days=rng.randrange(300))
    lines = tuple(
        LineItem(description, Decimal(rng.randint(1, 12)), price)
        for description, price in rng.sample(ITEMS, rng.randint(1, 6))
    )
    invoice = SampleInvoice(
        supplier=supplier,
        country=country,
        invoice_number=f"{country}-{issued.year}-{number:05d}",
        issue_date=issued,
        due_date=issued + timedelta(days=30),
        currency=currency,
        tax_rate=tax_rate,
        iban=iban,
        lines=lines,
    )
    return SampleInvoice(
        **{**invoice.__dict__, "pages": _render(invoice, lines_per_page=rng.choice((3, 10)))}
    )


def generate_invoices(count: int, seed: int = 7) -> list[SampleInvoice]:
    rng = random.Random(seed)  # noqa: S311 - sample data, not security
    return [generate_invoice(rng, n) for n in range(1, count + 1)]


def request_body(invoice: SampleInvoice, **extra: object) -> dict[str, object]:
    return {"document": {"pages": [{"text": page} for page in invoice.pages]}, **extra}
