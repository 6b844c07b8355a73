"""Summary and classification documents with their truth, generated from a seed: the real-model benchmark's
samples for the job types beside invoice extraction.

Each document is OCR-like text (one or two pages, letterheads, column gaps, stray spacing) rendered from
structured truth, so the truth knows where everything is printed: a summary sample's parties, dates,
amounts, durations, quantities and references each sit on a known page and line; a classification sample
knows its one true label and the line that shows it. Mostly English, a few German and French documents,
and the kinds of text that make classification hard (a reminder cites an invoice, a delivery note an order).
``faithful_summary`` and ``faithful_classification`` are what a careful reader would answer, for asking
whether a correct answer can pass a policy at all.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, timedelta
from decimal import Decimal
from typing import Any

from tollgate_dev.samples import MONTHS as INVOICE_MONTHS
from tollgate_dev.samples import money_text

SUMMARY = "document_summary"
CLASSIFICATION = "document_classification"

# Summary document kinds, in the order a set cycles through them (so a prefix already mixes kinds).
SERVICE_AGREEMENT = "service_agreement"
DELIVERY_NOTE = "delivery_note"
PAYMENT_REMINDER = "payment_reminder"
MEETING_MINUTES = "meeting_minutes"
LEASE_CONTRACT = "lease_contract"
RECALL_NOTICE = "recall_notice"
SUMMARY_KINDS = (
    SERVICE_AGREEMENT,
    DELIVERY_NOTE,
    PAYMENT_REMINDER,
    MEETING_MINUTES,
    LEASE_CONTRACT,
    RECALL_NOTICE,
)

# The label set a classification job sends.
LABELS = (
    "invoice",
    "receipt",
    "purchase_order",
    "service_agreement",
    "delivery_note",
    "payment_reminder",
    "credit_note",
)

# What a printed value is, for the truth and the reports.
PARTY = "party"
DATE = "date"
AMOUNT = "amount"
DURATION = "duration"
QUANTITY = "quantity"
REFERENCE = "reference"

MONTHS = {
    "en": INVOICE_MONTHS,
    "de": (
        "Januar",
        "Februar",
        "März",
        "April",
        "Mai",
        "Juni",
        "Juli",
        "August",
        "September",
        "Oktober",
        "November",
        "Dezember",
    ),
    "fr": (
        "janvier",
        "février",
        "mars",
        "avril",
        "mai",
        "juin",
        "juillet",
        "août",
        "septembre",
        "octobre",
        "novembre",
        "décembre",
    ),
}


# ----------------------------------------------------------------------------------------------- the truth


@dataclass(frozen=True)
class PrintedLine:
    """A line of the document: its page and line number (both from 1) and its text as printed."""

    page: int
    line: int
    text: str


@dataclass(frozen=True)
class PrintedValue:
    """One value of the truth and where it is printed. ``value`` is canonical (an ISO date, a decimal, a
    name, a reference as printed); ``printed`` is the exact text on the line; ``unit`` is the currency of
    an amount, or what a duration or quantity counts."""

    kind: str
    name: str
    value: str
    printed: str
    unit: str | None
    at: PrintedLine


@dataclass(frozen=True)
class SummaryTruth:
    kind: str
    language: str  # ISO 639-1
    title: str
    parties: tuple[str, ...]
    values: tuple[PrintedValue, ...]
    summary: str  # a faithful summary, its numbers and dates as the document prints them

    def value(self, name: str) -> PrintedValue:
        return next(v for v in self.values if v.name == name)


@dataclass(frozen=True)
class SummarySample:
    pages: tuple[str, ...]
    truth: SummaryTruth
    max_words: int = 120
    max_facts: int = 5


@dataclass(frozen=True)
class LabelGuide:
    """A tenant's description of a label and the cue words its evidence should carry."""

    description: str | None
    cues: tuple[str, ...]

    def as_option(self) -> dict[str, Any]:
        return {"description": self.description, "cues": list(self.cues)}


@dataclass(frozen=True)
class ClassificationSample:
    pages: tuple[str, ...]
    labels: tuple[str, ...]
    label_guides: Mapping[str, LabelGuide]  # empty: the tenant gave no guide
    truth_label: str
    evidence: PrintedLine  # the line that shows the true label (the document's title)
    language: str = "en"


# What a tenant that configured its labels says about them (sent with the guided samples).
TENANT_GUIDES: Mapping[str, LabelGuide] = {
    "invoice": LabelGuide(
        "A bill for goods or services delivered, asking for payment by a due date.",
        ("invoice", "Rechnung", "facture", "bill"),
    ),
    "receipt": LabelGuide(
        "Proof that a payment has already been made.", ("receipt", "Quittung", "Kassenbon", "reçu")
    ),
    "purchase_order": LabelGuide(
        "A buyer's order for goods or services, sent to the supplier.",
        ("purchase", "order", "Bestellung", "commande"),
    ),
    "service_agreement": LabelGuide(None, ("agreement", "contract", "Vertrag", "contrat")),
    "delivery_note": LabelGuide(
        "Goes with delivered goods and lists what was shipped, without prices.",
        ("delivery", "Lieferschein", "livraison", "packing"),
    ),
    "payment_reminder": LabelGuide(
        "Asks for payment of an invoice that is overdue.",
        ("reminder", "overdue", "Zahlungserinnerung", "Mahnung", "rappel", "relance"),
    ),
    "credit_note": LabelGuide(
        "Reduces or cancels an amount invoiced before.", ("credit", "Gutschrift", "avoir")
    ),
}


def label_cues(label: str, guides: Mapping[str, LabelGuide]) -> tuple[str, ...]:
    """The words that show a label: the tenant's cues when it gave a guide, else the label's own words."""
    guide = guides.get(label)
    return guide.cues if guide is not None else tuple(w for w in re.split(r"[_.\-]", label) if w)


def carries_cue(text: str, cues: Sequence[str]) -> bool:
    """Whether a cue starts a word of ``text``, case-insensitively (how the samples are designed)."""
    return any(re.search(rf"(?<!\w){re.escape(cue)}", text, re.IGNORECASE) for cue in cues)


# ------------------------------------------------------------------------------------------ printed forms


@dataclass(frozen=True)
class _Style:
    language: str
    numbers: str  # as tollgate_dev.samples.money_text: plain | en | de | fr
    dates: str  # iso | dots | slashes | day_month | month_day | long_de | long_fr
    currency: str
    currency_first: bool

    def money(self, amount: Decimal) -> str:
        text = money_text(amount, self.numbers)
        return f"{self.currency} {text}" if self.currency_first else f"{text} {self.currency}"

    def date(self, value: date) -> str:
        if self.dates == "dots":
            return f"{value.day:02d}.{value.month:02d}.{value.year}"
        if self.dates == "slashes":
            return f"{value.day:02d}/{value.month:02d}/{value.year}"
        if self.dates == "day_month":
            return f"{value.day} {MONTHS['en'][value.month - 1]} {value.year}"
        if self.dates == "month_day":
            return f"{MONTHS['en'][value.month - 1]} {value.day}, {value.year}"
        if self.dates == "long_de":
            return f"{value.day}. {MONTHS['de'][value.month - 1]} {value.year}"
        if self.dates == "long_fr":
            day = "1er" if value.day == 1 else str(value.day)
            return f"{day} {MONTHS['fr'][value.month - 1]} {value.year}"
        return value.isoformat()

    def number(self, value: Decimal) -> str:
        text = format(value, "f")
        return text.replace(".", ",") if self.numbers in {"de", "fr"} else text


ENGLISH_STYLES = (
    _Style("en", "en", "day_month", "GBP", True),
    _Style("en", "en", "month_day", "USD", True),
    _Style("en", "plain", "iso", "EUR", False),
    _Style("en", "de", "dots", "EUR", False),
)
GERMAN_STYLES = (_Style("de", "de", "dots", "EUR", False), _Style("de", "de", "long_de", "EUR", False))
FRENCH_STYLES = (_Style("fr", "fr", "long_fr", "EUR", False), _Style("fr", "fr", "slashes", "EUR", False))
STYLES = {"en": ENGLISH_STYLES, "de": GERMAN_STYLES, "fr": FRENCH_STYLES}


@dataclass(frozen=True)
class _Company:
    name: str
    street: str
    city: str  # the postal line
    town: str


COMPANIES = {
    "en": (
        _Company("Brightwater Facilities Ltd", "14 Canal Street", "Manchester M1 3HE", "Manchester"),
        _Company("Harbor Retail Group Ltd", "1 Dock Street", "Leith EH6 6EZ", "Edinburgh"),
        _Company("Cascade Robotics Inc.", "901 Pine St", "Seattle, WA 98101", "Seattle"),
        _Company("Meridian Clinics B.V.", "Stationsplein 8", "3511 ED Utrecht", "Utrecht"),
        _Company("Kestrel Logistics Ltd", "Unit 7, Thorpe Way", "Banbury OX16 4SP", "Banbury"),
        _Company("Northgate Property Holdings plc", "22 Queen Square", "Bristol BS1 4ND", "Bristol"),
        _Company("Oakridge Analytics Inc.", "77 Summer Street", "Boston, MA 02110", "Boston"),
        _Company("Summit Dental Group LLC", "3050 Larimer St", "Denver, CO 80205", "Denver"),
        _Company("Greystone Hotels Ltd", "5 Marine Parade", "Brighton BN2 1TL", "Brighton"),
        _Company("Pelican Print Works Ltd", "40 Fore Street", "Exeter EX4 3AN", "Exeter"),
    ),
    "de": (
        _Company("Nordwind Logistik GmbH", "Am Sandtorkai 41", "20457 Hamburg", "Hamburg"),
        _Company("Rheinland Gebäudeservice GmbH", "Deutzer Freiheit 12", "50679 Köln", "Köln"),
        _Company("Isar Immobilien GmbH & Co. KG", "Lindwurmstraße 88", "80337 München", "München"),
        _Company("Alpenblick Hotels GmbH", "Seestraße 5", "83700 Rottach-Egern", "Rottach-Egern"),
        _Company("Elbe Fachbuch Verlag KG", "Hafenstraße 3", "01067 Dresden", "Dresden"),
        _Company("Schwarzwald Werkzeuge AG", "Industriestraße 19", "79108 Freiburg", "Freiburg"),
    ),
    "fr": (
        _Company("Atelier Lumière SARL", "12 rue des Lilas", "69003 Lyon", "Lyon"),
        _Company("Transports Rhône-Alpes SAS", "8 avenue Jean Jaurès", "38000 Grenoble", "Grenoble"),
        _Company("Cabinet Dufresne Conseil", "45 boulevard Haussmann", "75009 Paris", "Paris"),
        _Company("Boulangerie Martin & Fils", "3 place du Marché", "33000 Bordeaux", "Bordeaux"),
    ),
}
PEOPLE = (
    "Sarah Whitfield",
    "Daniel Okafor",
    "Priya Raman",
    "Tomasz Nowak",
    "Helen Park",
    "Marcus Lindqvist",
    "Aisha Bello",
    "Jonas Becker",
    "Claire Dubois",
    "Felix Hartmann",
)
MANUFACTURERS = (
    _Company("Voltaris Appliances Ltd", "Unit 3, Riverside Park", "Leeds LS10 1AB", "Leeds"),
    _Company("Northlight Electronics Inc.", "2200 Mission St", "San Francisco, CA 94110", "San Francisco"),
    _Company("Helix Home Products Ltd", "9 Mill Lane", "Nottingham NG1 6AA", "Nottingham"),
)
RETAILERS = ("BrightHome Stores", "ValueMart", "Currents Electrical", "HomeWorks Direct")
CARRIERS = ("DHL Freight", "DB Schenker", "Kuehne+Nagel", "Geodis", "DPD")
GOODS = (
    ("Euro pallet, heat-treated", "pcs"),
    ("Stretch film 500 mm x 300 m", "rolls"),
    ("Corrugated box 600 x 400 x 400", "pcs"),
    ("Safety gloves, size L", "pairs"),
    ("Cable ties 300 mm, bag of 100", "bags"),
    ("Printer paper A4, 80 g", "boxes"),
)
GOODS_DE = (
    ("Europalette, hitzebehandelt", "Stk."),
    ("Stretchfolie 500 mm x 300 m", "Rollen"),
    ("Wellpappkarton 600 x 400 x 400", "Stk."),
    ("Schutzhandschuhe Gr. L", "Paar"),
    ("Kabelbinder 300 mm, 100er Beutel", "Beutel"),
)
PRODUCTS = (
    ("PowerCube 65W USB-C charger", "PC-65W"),
    ("AquaPure electric kettle 1.7 l", "AP-17K"),
    ("TrailLite LED headlamp", "TL-300"),
    ("CozyHeat fan heater 2000 W", "CH-2000"),
)


# ------------------------------------------------------------------------------------------------ writing


@dataclass(frozen=True)
class _Value:
    kind: str
    value: str
    printed: str
    unit: str | None = None


@dataclass
class _Writer:
    """Writes a document line by line and remembers where each value of the truth is printed."""

    rng: random.Random
    style: _Style
    pages: list[list[str]] = field(default_factory=lambda: [[]])
    values: list[PrintedValue] = field(default_factory=list)
    protected: dict[tuple[int, int], list[str]] = field(default_factory=dict)
    marked: PrintedLine | None = None

    # values
    def party(self, name: str) -> _Value:
        return _Value(PARTY, name, name)

    def date(self, value: date) -> _Value:
        return _Value(DATE, value.isoformat(), self.style.date(value))

    def money(self, amount: Decimal) -> _Value:
        return _Value(AMOUNT, format(amount, "f"), self.style.money(amount), self.style.currency)

    def count(self, number: int | Decimal, unit: str, kind: str = QUANTITY) -> _Value:
        return _Value(kind, format(number, "f"), self.style.number(Decimal(number)), unit)

    def ref(self, code: str) -> _Value:
        return _Value(REFERENCE, code, code)

    # lines
    def line(
        self, template: str = "", *, mark: bool = False, line: int | None = None, **values: _Value
    ) -> None:
        """One printed line; ``{name}`` fields are the values it prints (named ``name_<line>`` in the truth
        when ``line`` numbers a table row), ``mark`` makes it the evidence line."""
        text = template.format(**{name: value.printed for name, value in values.items()})
        at = PrintedLine(len(self.pages), len(self.pages[-1]) + 1, text)
        self.pages[-1].append(text)
        self.protected[(at.page, at.line)] = [value.printed for value in values.values()]
        for name, value in values.items():
            named = name if line is None else f"{name}_{line}"
            self.values.append(PrintedValue(value.kind, named, value.value, value.printed, value.unit, at))
        if mark:
            self.marked = at

    def page_break(self) -> None:
        self.pages.append([])

    def finish(self) -> tuple[tuple[str, ...], tuple[PrintedValue, ...], PrintedLine | None]:
        """The pages with OCR spacing added, and where every value and the marked line are printed then."""
        texts: list[str] = []
        moved: dict[tuple[int, int], str] = {}
        for page_number, lines in enumerate(self.pages, start=1):
            noisy = []
            for line_number, text in enumerate(lines, start=1):
                keep = self.protected.get((page_number, line_number), [])
                new = _ocr_spacing(self.rng, text, keep) if text.strip() else text
                moved[(page_number, line_number)] = new
                noisy.append(new)
            texts.append("\n".join(noisy))

        def relocated(at: PrintedLine) -> PrintedLine:
            return PrintedLine(at.page, at.line, moved[(at.page, at.line)])

        values = tuple(
            PrintedValue(v.kind, v.name, v.value, v.printed, v.unit, relocated(v.at)) for v in self.values
        )
        return tuple(texts), values, relocated(self.marked) if self.marked else None


def _ocr_spacing(rng: random.Random, line: str, keep: Sequence[str]) -> str:
    """OCR spacing that never touches a word, a digit or a printed value: a doubled gap between words,
    a little indentation, trailing blanks."""
    taken = [(m.start(), m.end()) for printed in keep for m in re.finditer(re.escape(printed), line)]
    if rng.random() < 0.3:
        gaps = [i for i, c in enumerate(line) if c == " " and not any(a <= i < b for a, b in taken)]
        if gaps:
            at = rng.choice(gaps)
            line = line[:at] + " " + line[at:]
    if rng.random() < 0.15:
        line = " " * rng.randint(1, 3) + line
    if rng.random() < 0.2:
        line += " " * rng.randint(1, 2)
    return line


def _pad(left: str, right: str, width: int = 48) -> str:
    """Two columns on one line, as a letterhead or a table prints them."""
    return f"{left:<{width}}{right}"


def _pick(rng: random.Random, items: Sequence[_Company], count: int) -> list[_Company]:
    return rng.sample(list(items), count)


def _day(rng: random.Random, start: date = date(2026, 1, 5), span: int = 300) -> date:
    return start + timedelta(days=rng.randrange(span))


def _money_amount(rng: random.Random, low: int, high: int, step: int = 5) -> Decimal:
    return Decimal(rng.randrange(low, high, step)) + Decimal(rng.choice((0, 0, 50, 90))) / 100


# ------------------------------------------------------------------------------------- summary documents


SummaryBody = Callable[[_Writer], tuple[str, tuple[str, ...], str]]  # -> title, parties, faithful summary


def _service_agreement_en(w: _Writer) -> tuple[str, tuple[str, ...], str]:
    rng = w.rng
    provider, client = _pick(rng, COMPANIES["en"], 2)
    signer_a, signer_b = rng.sample(PEOPLE, 2)
    signed = _day(rng)
    start = signed + timedelta(days=rng.randint(10, 40))
    ref = f"SA-{signed.year}-{rng.randint(100, 999):04d}"
    v = {
        "ref": w.ref(ref),
        "provider": w.party(provider.name),
        "client": w.party(client.name),
        "visits": w.count(rng.choice((2, 3, 5)), "days per week"),
        "start": w.date(start),
        "months": w.count(rng.choice((12, 24, 36)), "months", DURATION),
        "notice": w.count(rng.choice((30, 60, 90)), "days", DURATION),
        "fee": w.money(_money_amount(rng, 900, 6000)),
        "payterm": w.count(rng.choice((14, 30)), "days", DURATION),
        "hours": w.count(rng.choice((4, 8, 24)), "hours", DURATION),
        "cap": w.money(Decimal(rng.choice((50000, 100000, 250000)))),
        "signed": w.date(signed),
    }
    w.line(provider.name)
    w.line(f"{provider.street}, {provider.city}")
    w.line("Tel. +44 161 496 0732")
    w.line()
    w.line(_pad("SERVICE AGREEMENT", "Agreement no. {ref}"), ref=v["ref"])
    w.line()
    w.line('between  {provider} ("Provider")', provider=v["provider"])
    w.line(f'and      {{client}}, {client.street}, {client.city} ("Client")', client=v["client"])
    w.line()
    w.line("1. Services")
    w.line("The Provider cleans the Client's offices on {visits} days per week.", visits=v["visits"])
    w.line("2. Term")
    w.line(
        "This agreement starts on {start} and runs for {months} months.", start=v["start"], months=v["months"]
    )
    w.line(
        "It renews for 12 months at a time unless terminated with {notice} days' notice.", notice=v["notice"]
    )
    w.line("3. Fees")
    w.line("Monthly fee: {fee} plus VAT, invoiced monthly in arrears.", fee=v["fee"])
    w.line("Invoices are payable within {payterm} days of their date.", payterm=v["payterm"])
    w.line("4. Service levels")
    w.line("Urgent requests are answered within {hours} hours, every day of the year.", hours=v["hours"])
    w.line()
    w.line(_pad("", "Page 1 of 2"))
    w.page_break()
    w.line(f"Service agreement {ref} - page 2")
    w.line()
    w.line("5. Liability")
    w.line("The Provider's liability is limited to {cap} per contract year.", cap=v["cap"])
    w.line("6. General")
    w.line("This agreement is governed by the law of the place where the Client's offices are.")
    w.line()
    w.line(f"Signed in {client.town} on {{signed}}", signed=v["signed"])
    w.line()
    w.line(_pad("for the Provider", "for the Client"))
    w.line(_pad(signer_a, signer_b))
    w.line(_pad(provider.name, client.name))
    w.line(_pad("", "Page 2 of 2"))
    p = {name: value.printed for name, value in v.items()}
    summary = (
        f"Service agreement {p['ref']} between {p['provider']} and {p['client']}: office cleaning on "
        f"{p['visits']} days per week from {p['start']} for {p['months']} months, at {p['fee']} per month "
        f"plus VAT, terminable with {p['notice']} days' notice."
    )
    return "SERVICE AGREEMENT", (provider.name, client.name), summary


def _goods(rng: random.Random, catalogue: Sequence[tuple[str, str]]) -> list[tuple[str, str, str, int]]:
    chosen = rng.sample(list(catalogue), 3)
    return [(f"AR-{rng.randint(1000, 9999)}", name, unit, rng.randint(2, 48)) for name, unit in chosen]


def _delivery_note_en(w: _Writer) -> tuple[str, tuple[str, ...], str]:
    rng = w.rng
    supplier, customer = _pick(rng, COMPANIES["en"], 2)
    shipped = _day(rng)
    goods = _goods(rng, GOODS)
    v = {
        "ref": w.ref(f"DN-{rng.randint(10000, 99999)}"),
        "date": w.date(shipped),
        "po": w.ref(f"PO-{rng.randint(1000, 9999)}"),
        "ordered": w.date(shipped - timedelta(days=rng.randint(3, 20))),
        "customer": w.party(customer.name),
        "packages": w.count(rng.randint(2, 12), "packages"),
        "weight": w.count(rng.randint(40, 900), "kg"),
        "carrier": w.party(rng.choice(CARRIERS)),
    }
    w.line(supplier.name)
    w.line(f"{supplier.street} · {supplier.city}")
    w.line()
    w.line(_pad("", "DELIVERY NOTE"))
    w.line(_pad("Delivery note no.: {ref}", "Date: {date}"), ref=v["ref"], date=v["date"])
    w.line("Your order: {po} of {ordered}", po=v["po"], ordered=v["ordered"])
    w.line()
    w.line("Deliver to:")
    w.line("{customer}", customer=v["customer"])
    w.line(f"Goods receiving, Gate {rng.randint(1, 9)}")
    w.line(f"{customer.street}, {customer.city}")
    w.line()
    w.line(f"{'Pos':<5}{'Article no.':<13}{'Description':<36}{'Qty':>5}  Unit")
    for pos, (article, name, unit, qty) in enumerate(goods, start=1):
        w.line(f"{pos:<5}{article:<13}{name:<36}{{qty:>5}}  {unit}", qty=w.count(qty, unit), line=pos)
    w.line()
    w.line(
        "Total packages: {packages}        Gross weight: {weight} kg",
        packages=v["packages"],
        weight=v["weight"],
    )
    w.line("Carrier: {carrier}", carrier=v["carrier"])
    w.line("Goods remain our property until paid in full. The invoice follows separately.")
    w.line()
    w.line("Received in good condition:")
    w.line("Name: ______________   Signature: ______________   Date: __________")
    p = {name: value.printed for name, value in v.items()}
    first = goods[0]
    summary = (
        f"Delivery note {p['ref']} of {p['date']} from {supplier.name} to {p['customer']} for order "
        f"{p['po']}: {p['packages']} packages, {p['weight']} kg gross, carried by {p['carrier']}, including "
        f"{first[3]} {first[2]} of {first[1].split(',')[0]}."
    )
    return "DELIVERY NOTE", (supplier.name, customer.name), summary


def _delivery_note_de(w: _Writer) -> tuple[str, tuple[str, ...], str]:
    rng = w.rng
    supplier, customer = _pick(rng, COMPANIES["de"], 2)
    shipped = _day(rng)
    goods = _goods(rng, GOODS_DE)
    v = {
        "ref": w.ref(f"LS-{rng.randint(10000, 99999)}"),
        "date": w.date(shipped),
        "po": w.ref(f"B-{rng.randint(1000, 9999)}"),
        "ordered": w.date(shipped - timedelta(days=rng.randint(3, 20))),
        "customer": w.party(customer.name),
        "packages": w.count(rng.randint(2, 12), "Packstücke"),
        "weight": w.count(rng.randint(40, 900), "kg"),
        "carrier": w.party(rng.choice(CARRIERS)),
    }
    w.line(_pad(supplier.name, "Tel. 040 3019 2277"))
    w.line(f"{supplier.street}, {supplier.city}")
    w.line()
    w.line(_pad("", "LIEFERSCHEIN"))
    w.line(_pad("Lieferschein-Nr.: {ref}", "Datum: {date}"), ref=v["ref"], date=v["date"])
    w.line(f"Kunden-Nr.: {rng.randint(20000, 29999)}")
    w.line("Ihre Bestellung: {po} vom {ordered}", po=v["po"], ordered=v["ordered"])
    w.line()
    w.line("Lieferanschrift:")
    w.line("{customer}", customer=v["customer"])
    w.line("Warenannahme")
    w.line(f"{customer.street}, {customer.city}")
    w.line()
    w.line(f"{'Pos.':<6}{'Artikel-Nr.':<13}{'Bezeichnung':<36}{'Menge':>6}  Einheit")
    for pos, (article, name, unit, qty) in enumerate(goods, start=1):
        w.line(f"{pos:<6}{article:<13}{name:<36}{{qty:>6}}  {unit}", qty=w.count(qty, unit), line=pos)
    w.line()
    w.line(
        "Anzahl Packstücke: {packages}      Bruttogewicht: {weight} kg",
        packages=v["packages"],
        weight=v["weight"],
    )
    w.line("Spediteur: {carrier}", carrier=v["carrier"])
    w.line("Die Rechnung folgt separat. Die Ware bleibt bis zur vollständigen Bezahlung unser Eigentum.")
    w.line()
    w.line("Ware in einwandfreiem Zustand erhalten:")
    w.line("Datum, Unterschrift: ______________________")
    p = {name: value.printed for name, value in v.items()}
    summary = (
        f"Delivery note {p['ref']} of {p['date']} from {supplier.name} to {p['customer']} for order "
        f"{p['po']} of {p['ordered']}: {p['packages']} packages, {p['weight']} kg gross, carried by "
        f"{p['carrier']}."
    )
    return "LIEFERSCHEIN", (supplier.name, customer.name), summary


def _iban(rng: random.Random, country: str) -> str:
    digits = "".join(str(rng.randint(0, 9)) for _ in range(18))
    raw = f"{country}{rng.randint(10, 99)}{digits}"
    return " ".join(raw[i : i + 4] for i in range(0, len(raw), 4))


def _payment_reminder_en(w: _Writer) -> tuple[str, tuple[str, ...], str]:
    rng = w.rng
    creditor, debtor = _pick(rng, COMPANIES["en"], 2)
    issued = _day(rng, date(2026, 2, 1))
    due = issued - timedelta(days=rng.randint(10, 40))
    amount = _money_amount(rng, 300, 9000)
    v = {
        "creditor": w.party(creditor.name),
        "debtor": w.party(debtor.name),
        "date": w.date(issued),
        "invoice": w.ref(f"INV-{issued.year}-{rng.randint(1000, 9999)}"),
        "invoiced": w.date(due - timedelta(days=30)),
        "amount": w.money(amount),
        "due": w.date(due),
        "pay_by": w.date(issued + timedelta(days=rng.choice((7, 10, 14)))),
        "fee": w.money(Decimal(rng.choice((5, 10, 15, 25)))),
    }
    w.line("{creditor}", creditor=v["creditor"])
    w.line(f"{creditor.street}, {creditor.city}")
    w.line()
    w.line("{debtor}", debtor=v["debtor"])
    w.line("Attn. Accounts Payable")
    w.line(debtor.street)
    w.line(debtor.city)
    w.line(_pad("", f"{creditor.town}, {{date}}"), date=v["date"])
    w.line()
    w.line("PAYMENT REMINDER")
    w.line(f"Customer no. {rng.randint(40000, 49999)}")
    w.line()
    w.line("Dear Sir or Madam,")
    w.line("according to our records the following invoice is still unpaid:")
    w.line(
        "Invoice no. {invoice}   dated {invoiced}   amount {amount}   due {due}",
        invoice=v["invoice"],
        invoiced=v["invoiced"],
        amount=v["amount"],
        due=v["due"],
    )
    w.line("Please pay the outstanding {amount} by {pay_by}.", amount=v["amount"], pay_by=v["pay_by"])
    w.line("A reminder fee of {fee} has been added to your account.", fee=v["fee"])
    w.line(f"Bank transfer to IBAN {_iban(rng, 'GB')}, quoting the invoice number.")
    w.line("If you have paid in the meantime, please disregard this letter.")
    w.line()
    w.line("Kind regards")
    w.line(rng.choice(PEOPLE))
    w.line("Accounts Receivable")
    p = {name: value.printed for name, value in v.items()}
    summary = (
        f"{p['creditor']} reminds {p['debtor']} that invoice {p['invoice']} of {p['invoiced']} for "
        f"{p['amount']}, due {p['due']}, is unpaid; payment is requested by {p['pay_by']}, and a reminder "
        f"fee of {p['fee']} was added."
    )
    return "PAYMENT REMINDER", (creditor.name, debtor.name), summary


def _payment_reminder_fr(w: _Writer) -> tuple[str, tuple[str, ...], str]:
    rng = w.rng
    creditor, debtor = _pick(rng, COMPANIES["fr"], 2)
    issued = _day(rng, date(2026, 2, 1))
    due = issued - timedelta(days=rng.randint(10, 40))
    v = {
        "creditor": w.party(creditor.name),
        "debtor": w.party(debtor.name),
        "date": w.date(issued),
        "invoice": w.ref(f"FA-{issued.year}-{rng.randint(1000, 9999)}"),
        "invoiced": w.date(due - timedelta(days=30)),
        "amount": w.money(_money_amount(rng, 300, 9000)),
        "due": w.date(due),
        "pay_by": w.date(issued + timedelta(days=rng.choice((8, 10, 15)))),
        "fee": w.money(Decimal(40)),
    }
    w.line("{creditor}", creditor=v["creditor"])
    w.line(creditor.street)
    w.line(creditor.city)
    w.line(_pad("", f"{creditor.town}, le {{date}}"), date=v["date"])
    w.line("{debtor}", debtor=v["debtor"])
    w.line("Service comptabilité fournisseurs")
    w.line(f"{debtor.street}, {debtor.city}")
    w.line()
    w.line("Objet : Rappel de paiement, facture n° {invoice}", invoice=v["invoice"])
    w.line()
    w.line("Madame, Monsieur,")
    w.line(
        "Sauf erreur de notre part, la facture n° {invoice} du {invoiced} d'un montant de {amount}",
        invoice=v["invoice"],
        invoiced=v["invoiced"],
        amount=v["amount"],
    )
    w.line("reste impayée à ce jour. Son échéance était fixée au {due}.", due=v["due"])
    w.line("Nous vous prions de bien vouloir régler cette somme avant le {pay_by}.", pay_by=v["pay_by"])
    w.line("Une indemnité forfaitaire pour frais de recouvrement de {fee} s'y ajoute.", fee=v["fee"])
    w.line(f"Coordonnées bancaires : IBAN {_iban(rng, 'FR')}")
    w.line("Si votre règlement a été effectué entre-temps, merci de ne pas tenir compte de ce courrier.")
    w.line()
    w.line("Veuillez agréer, Madame, Monsieur, nos salutations distinguées.")
    w.line(rng.choice(PEOPLE))
    w.line("Service comptabilité")
    p = {name: value.printed for name, value in v.items()}
    summary = (
        f"{p['creditor']} reminds {p['debtor']} that invoice {p['invoice']} of {p['invoiced']} for "
        f"{p['amount']}, due {p['due']}, is unpaid; payment is requested by {p['pay_by']}, plus {p['fee']} "
        "recovery costs."
    )
    return "RAPPEL DE PAIEMENT", (creditor.name, debtor.name), summary


def _meeting_minutes_en(w: _Writer) -> tuple[str, tuple[str, ...], str]:
    rng = w.rng
    company, supplier = _pick(rng, COMPANIES["en"], 2)
    chair, second, third, scribe, absent = rng.sample(PEOPLE, 5)
    held = _day(rng)
    v = {
        "company": w.party(company.name),
        "date": w.date(held),
        "previous": w.date(held - timedelta(days=rng.choice((28, 35, 42)))),
        "budget": w.money(Decimal(rng.randrange(400_000, 2_500_000, 10_000))),
        "hires": w.count(rng.randint(2, 9), "support agents"),
        "hire_by": w.date(held + timedelta(days=rng.randint(60, 120))),
        "lease_end": w.date(held + timedelta(days=rng.randint(150, 300))),
        "rent": w.money(_money_amount(rng, 4000, 15000, 50)),
        "supplier": w.party(supplier.name),
        "next": w.date(held + timedelta(days=28)),
    }
    city = company.town
    year = held.year + 1
    w.line("{company}", company=v["company"])
    w.line("MINUTES OF THE MANAGEMENT BOARD MEETING")
    w.line(f"Date: {{date}}     Time: 10:00-12:15     Place: Meeting room 3, {city}", date=v["date"])
    w.line(f"Present: {chair} (Chair), {second}, {third}, {scribe}")
    w.line(f"Apologies: {absent}")
    w.line(f"Minutes: {scribe}")
    w.line()
    w.line("1. Minutes of the previous meeting")
    w.line("The minutes of the meeting of {previous} were approved without changes.", previous=v["previous"])
    w.line(f"2. Budget {year}")
    w.line(f"The board approved an operating budget of {{budget}} for {year}.", budget=v["budget"])
    w.line("3. Staffing")
    w.line(
        "The board agreed to hire {hires} customer support agents by {hire_by}.",
        hires=v["hires"],
        hire_by=v["hire_by"],
    )
    w.line("4. Office lease")
    w.line(
        f"{second} reported that the lease of the {city} office ends on {{lease_end}}.",
        lease_end=v["lease_end"],
    )
    w.line(
        "The landlord offers a renewal at {rent} per month; a decision is due next meeting.", rent=v["rent"]
    )
    w.line("5. Suppliers")
    w.line(
        "The contract with {supplier} will not be renewed; its last invoice is disputed.",
        supplier=v["supplier"],
    )
    w.line("6. Any other business")
    w.line("None.")
    w.line()
    w.line("Next meeting: {next}", next=v["next"])
    w.line(f"Approved: {chair}, Chair")
    p = {name: value.printed for name, value in v.items()}
    summary = (
        f"The management board of {p['company']} met on {p['date']}. It approved an operating budget of "
        f"{p['budget']} for {year} and the hiring of {p['hires']} support agents by {p['hire_by']}, and "
        f"will not renew the contract with {p['supplier']}. The next meeting is on {p['next']}."
    )
    return "MINUTES OF THE MANAGEMENT BOARD MEETING", (company.name, chair, second, third, scribe), summary


def _lease_contract_en(w: _Writer) -> tuple[str, tuple[str, ...], str]:
    rng = w.rng
    landlord, tenant = _pick(rng, COMPANIES["en"], 2)
    signed = _day(rng)
    start = date(signed.year + (signed.month == 12), signed.month % 12 + 1, 1)
    rent = _money_amount(rng, 1500, 9000, 50)
    ref = f"L-{rng.randint(1000, 9999)}"
    v = {
        "landlord": w.party(landlord.name),
        "tenant": w.party(tenant.name),
        "area": w.count(rng.randrange(80, 600, 5), "m²"),
        "spaces": w.count(rng.randint(1, 8), "parking spaces"),
        "start": w.date(start),
        "months": w.count(rng.choice((36, 60, 120)), "months", DURATION),
        "notice": w.count(rng.choice((3, 6)), "months", DURATION),
        "rent": w.money(rent),
        "charges": w.money(_money_amount(rng, 150, 900, 10)),
        "deposit": w.money(rent * 3),
        "review": w.count(rng.choice((12, 24)), "months", DURATION),
        "signed": w.date(signed),
    }
    w.line("COMMERCIAL LEASE AGREEMENT")
    w.line(f"Lease no. {ref}")
    w.line()
    w.line(f"Landlord: {{landlord}}, {landlord.street}, {landlord.city}", landlord=v["landlord"])
    w.line(f"Tenant:   {{tenant}}, {tenant.street}, {tenant.city}", tenant=v["tenant"])
    w.line()
    w.line("1. Premises")
    w.line(f"Unit {rng.randint(1, 9)}B, {landlord.street}: {{area}} m² of office space", area=v["area"])
    w.line("with {spaces} parking spaces.", spaces=v["spaces"])
    w.line("2. Term")
    w.line("The lease starts on {start} and runs for {months} months.", start=v["start"], months=v["months"])
    w.line("Notice of termination: {notice} months before the end of the term.", notice=v["notice"])
    w.line("3. Rent")
    w.line("Monthly rent: {rent}, payable in advance by the 3rd working day of each month.", rent=v["rent"])
    w.line("Service charges: {charges} per month on account, settled annually.", charges=v["charges"])
    w.line("4. Deposit")
    w.line(
        "The Tenant pays a security deposit of {deposit} before the keys are handed over.",
        deposit=v["deposit"],
    )
    w.line()
    w.line(_pad("", "Page 1 of 2"))
    w.page_break()
    w.line(f"Lease no. {ref} - page 2")
    w.line()
    w.line("5. Rent review")
    w.line(
        "The rent is reviewed every {review} months in line with the consumer price index.",
        review=v["review"],
    )
    w.line("6. Use")
    w.line("The premises may be used as offices only. Subletting requires the Landlord's written consent.")
    w.line("Invoices for service charges are issued once a year.")
    w.line()
    w.line(f"Signed in {landlord.town} on {{signed}}", signed=v["signed"])
    w.line(_pad("Landlord: ________________", "Tenant: ________________"))
    w.line(_pad(rng.choice(PEOPLE), rng.choice(PEOPLE)))
    w.line(_pad("", "Page 2 of 2"))
    p = {name: value.printed for name, value in v.items()}
    summary = (
        f"{p['landlord']} leases {p['area']} m² of office space to {p['tenant']} for {p['months']} months "
        f"from {p['start']}, at a monthly rent of {p['rent']} plus {p['charges']} service charges, with a "
        f"deposit of {p['deposit']} and {p['notice']} months' notice."
    )
    return "COMMERCIAL LEASE AGREEMENT", (landlord.name, tenant.name), summary


def _lease_contract_de(w: _Writer) -> tuple[str, tuple[str, ...], str]:
    rng = w.rng
    landlord, tenant = _pick(rng, COMPANIES["de"], 2)
    signed = _day(rng)
    start = date(signed.year + (signed.month == 12), signed.month % 12 + 1, 1)
    rent = _money_amount(rng, 1500, 9000, 50)
    ref = f"MV-{rng.randint(1000, 9999)}"
    v = {
        "landlord": w.party(landlord.name),
        "tenant": w.party(tenant.name),
        "area": w.count(rng.randrange(80, 600, 5), "m²"),
        "spaces": w.count(rng.randint(1, 8), "Stellplätze"),
        "start": w.date(start),
        "months": w.count(rng.choice((36, 60, 120)), "Monate", DURATION),
        "notice": w.count(rng.choice((3, 6)), "Monate", DURATION),
        "rent": w.money(rent),
        "charges": w.money(_money_amount(rng, 150, 900, 10)),
        "deposit": w.money(rent * 3),
        "review": w.count(rng.choice((12, 24)), "Monate", DURATION),
        "signed": w.date(signed),
    }
    city = landlord.town
    w.line("GEWERBEMIETVERTRAG")
    w.line(f"Vertrags-Nr. {ref}")
    w.line()
    w.line(f"Vermieter: {{landlord}}, {landlord.street}, {landlord.city}", landlord=v["landlord"])
    w.line(f"Mieter:    {{tenant}}, {tenant.street}, {tenant.city}", tenant=v["tenant"])
    w.line()
    w.line("§ 1 Mietgegenstand")
    w.line(f"Büroeinheit {rng.randint(1, 9)}B, {landlord.street}: {{area}} m² Bürofläche", area=v["area"])
    w.line("mit {spaces} Stellplätzen in der Tiefgarage.", spaces=v["spaces"])
    w.line("§ 2 Mietdauer")
    w.line(
        "Das Mietverhältnis beginnt am {start} und läuft {months} Monate.",
        start=v["start"],
        months=v["months"],
    )
    w.line("Kündigungsfrist: {notice} Monate zum Ende der Laufzeit.", notice=v["notice"])
    w.line("§ 3 Miete und Nebenkosten")
    w.line("Monatliche Miete: {rent}, zahlbar im Voraus bis zum 3. Werktag des Monats.", rent=v["rent"])
    w.line("Nebenkostenvorauszahlung: {charges} monatlich, jährliche Abrechnung.", charges=v["charges"])
    w.line("§ 4 Kaution")
    w.line("Der Mieter leistet vor Übergabe der Schlüssel eine Kaution von {deposit}.", deposit=v["deposit"])
    w.line()
    w.line(_pad("", "Seite 1 von 2"))
    w.page_break()
    w.line(f"Vertrags-Nr. {ref} - Seite 2")
    w.line()
    w.line("§ 5 Mietanpassung")
    w.line("Die Miete wird alle {review} Monate an den Verbraucherpreisindex angepasst.", review=v["review"])
    w.line("§ 6 Nutzung")
    w.line("Die Räume dienen ausschließlich als Büro. Untervermietung nur mit Zustimmung des Vermieters.")
    w.line()
    w.line(f"{city}, den {{signed}}", signed=v["signed"])
    w.line(_pad("Vermieter: ________________", "Mieter: ________________"))
    w.line(_pad("", "Seite 2 von 2"))
    p = {name: value.printed for name, value in v.items()}
    summary = (
        f"{p['landlord']} leases {p['area']} m² of office space to {p['tenant']} for {p['months']} months "
        f"from {p['start']}, at a monthly rent of {p['rent']} plus {p['charges']} service charges, with a "
        f"deposit of {p['deposit']} and {p['notice']} months' notice."
    )
    return "GEWERBEMIETVERTRAG", (landlord.name, tenant.name), summary


def _recall_notice_en(w: _Writer) -> tuple[str, tuple[str, ...], str]:
    rng = w.rng
    maker, retailer = rng.choice(MANUFACTURERS), rng.choice(RETAILERS)
    product, model = rng.choice(PRODUCTS)
    issued = _day(rng, date(2026, 3, 1))
    first_batch = rng.randint(2400, 2600)
    v = {
        "maker": w.party(maker.name),
        "date": w.date(issued),
        "model": w.ref(model),
        "batch_from": w.ref(f"B{first_batch}"),
        "batch_to": w.ref(f"B{first_batch + rng.randint(5, 40)}"),
        "sold_from": w.date(issued - timedelta(days=rng.randint(200, 400))),
        "sold_to": w.date(issued - timedelta(days=rng.randint(10, 60))),
        "retailer": w.party(retailer),
        "units": w.count(rng.randrange(1200, 40000, 100), "units"),
        "incidents": w.count(rng.randint(3, 17), "incidents"),
        "price": w.money(_money_amount(rng, 19, 120, 1)),
    }
    w.line("URGENT PRODUCT SAFETY RECALL")
    w.line("{maker}", maker=v["maker"])
    w.line(f"{maker.street}, {maker.city}")
    w.line("Issued: {date}", date=v["date"])
    w.line()
    w.line(f"Product: {product}")
    w.line(
        "Model number: {model}        Batch codes: {batch_from} to {batch_to}",
        model=v["model"],
        batch_from=v["batch_from"],
        batch_to=v["batch_to"],
    )
    w.line(
        "Sold between {sold_from} and {sold_to} at {retailer} stores and online.",
        sold_from=v["sold_from"],
        sold_to=v["sold_to"],
        retailer=v["retailer"],
    )
    w.line("Units affected: {units}", units=v["units"])
    w.line()
    w.line("Hazard: the product can overheat during use and may cause burns or a fire.")
    w.line(
        "{incidents} incidents have been reported to us so far; nobody was injured.", incidents=v["incidents"]
    )
    w.line()
    w.line("What to do:")
    w.line("Stop using the product immediately and unplug it.")
    w.line(
        "Return it to any store for a full refund of {price}, with or without a receipt.", price=v["price"]
    )
    w.line("Questions: free recall hotline 0800 048 1177 (Monday to Friday, 8:00-18:00).")
    w.line("We apologise for the inconvenience.")
    p = {name: value.printed for name, value in v.items()}
    summary = (
        f"{p['maker']} recalls the {product}, model {p['model']}, batches {p['batch_from']} to "
        f"{p['batch_to']}, sold between {p['sold_from']} and {p['sold_to']} at {p['retailer']}: "
        f"{p['units']} units may overheat and {p['incidents']} incidents were reported. Customers get a "
        f"refund of {p['price']}."
    )
    return "URGENT PRODUCT SAFETY RECALL", (maker.name, retailer), summary


# Each kind's template by language; a set's n-th document of a kind takes the n-th language of its list.
SUMMARY_TEMPLATES: Mapping[str, Sequence[tuple[str, SummaryBody]]] = {
    SERVICE_AGREEMENT: (("en", _service_agreement_en),),
    DELIVERY_NOTE: (("en", _delivery_note_en), ("de", _delivery_note_de)),
    PAYMENT_REMINDER: (("en", _payment_reminder_en), ("fr", _payment_reminder_fr)),
    MEETING_MINUTES: (("en", _meeting_minutes_en),),
    LEASE_CONTRACT: (("en", _lease_contract_en), ("de", _lease_contract_de)),
    RECALL_NOTICE: (("en", _recall_notice_en),),
}


def generate_summary(rng: random.Random, kind: str, round_: int = 0) -> SummarySample:
    """One summary document of ``kind``; ``round_`` picks among its languages (the first is English)."""
    templates = SUMMARY_TEMPLATES[kind]
    language, body = templates[round_ % len(templates)]
    w = _Writer(rng, rng.choice(STYLES[language]))
    title, parties, summary = body(w)
    pages, values, _ = w.finish()
    truth = SummaryTruth(kind, language, title, parties, values, summary)
    return SummarySample(
        pages, truth, max_words=rng.choice((60, 80, 100, 120)), max_facts=rng.choice((4, 5, 6))
    )


def generate_summaries(count: int, seed: int = 15) -> list[SummarySample]:
    """``count`` summary documents, reproducible from ``seed``, cycling through every kind."""
    rng = random.Random(seed)  # noqa: S311 - sample data, not security
    kinds = len(SUMMARY_KINDS)
    return [generate_summary(rng, SUMMARY_KINDS[n % kinds], n // kinds) for n in range(count)]


# ------------------------------------------------------------------------------ classification documents


ClassificationBody = Callable[[_Writer], None]


def _invoice_en(w: _Writer) -> None:
    rng = w.rng
    seller, buyer = _pick(rng, COMPANIES["en"], 2)
    issued = _day(rng)
    net = _money_amount(rng, 400, 5000)
    w.line(_pad(seller.name, "INVOICE"), mark=True)
    w.line(f"{seller.street}, {seller.city}")
    w.line()
    w.line(_pad(f"Bill to: {buyer.name}", f"Invoice no. INV-{rng.randint(10000, 99999)}"))
    w.line(_pad(buyer.street, f"Date: {w.style.date(issued)}"))
    w.line(_pad(buyer.city, f"Your purchase order: PO-{rng.randint(1000, 9999)}"))
    w.line()
    w.line(f"{'Description':<40}{'Qty':>5}{'Amount':>14}")
    w.line(f"{'Quarterly maintenance, site visit':<40}{1:>5}{w.style.money(net):>14}")
    w.line()
    w.line(_pad("", f"Net {w.style.money(net)}"))
    w.line(_pad("", f"VAT 20% {w.style.money(net * Decimal('0.2'))}"))
    w.line(_pad("", f"Total due {w.style.money(net * Decimal('1.2'))}"))
    w.line()
    w.line(f"Payment due by {w.style.date(issued + timedelta(days=30))}. Please quote the invoice number.")


def _invoice_en_references(w: _Writer) -> None:
    rng = w.rng
    seller, buyer = _pick(rng, COMPANIES["en"], 2)
    issued = _day(rng)
    po, dn = f"PO-{rng.randint(1000, 9999)}", f"DN-{rng.randint(10000, 99999)}"
    w.line(seller.name)
    vat_number = f"GB {rng.randint(100, 999)} {rng.randint(1000, 9999)} 21"
    w.line(f"{seller.street}, {seller.city}   VAT Reg. No. {vat_number}")
    w.line()
    w.line("TAX INVOICE", mark=True)
    w.line(f"Number: {rng.randint(2026000, 2026999)}      Date: {w.style.date(issued)}")
    w.line(f"Customer: {buyer.name}, {buyer.city}")
    w.line(f"Purchase order: {po}        Delivery note: {dn} of {w.style.date(issued - timedelta(days=2))}")
    w.line()
    w.line("Goods as per delivery note, delivered complete:")
    rows = rng.sample(list(GOODS), 3)
    total = Decimal(0)
    for name, unit in rows:
        qty, price = rng.randint(2, 30), _money_amount(rng, 5, 90, 1)
        total += qty * price
        w.line(f"  {name:<36}{qty:>4} {unit:<6}{w.style.money(qty * price):>14}")
    w.line()
    w.line(_pad("", f"Total excl. VAT {w.style.money(total)}"))
    w.line(_pad("", f"Total incl. VAT {w.style.money(total * Decimal('1.2'))}"))
    w.line("Terms: 30 days net. Overdue amounts will be sent a payment reminder.")


def _receipt_en(w: _Writer) -> None:
    rng = w.rng
    shop = rng.choice(COMPANIES["en"])
    paid = _day(rng)
    w.line(f"      {shop.name}")
    w.line(f"      {shop.street}")
    w.line(f"      {shop.city}")
    w.line()
    w.line("         SALES RECEIPT", mark=True)
    w.line(f"{w.style.date(paid)}  14:{rng.randint(10, 59)}   Till 3   Receipt {rng.randint(1000, 9999)}")
    w.line("-" * 38)
    total = Decimal(0)
    for name, _unit in rng.sample(list(GOODS), 3):
        price = _money_amount(rng, 3, 60, 1)
        total += price
        w.line(f"{name[:26]:<26}{w.style.money(price):>12}")
    w.line("-" * 38)
    w.line(f"{'TOTAL':<26}{w.style.money(total):>12}")
    w.line(f"{'PAID  VISA ****' + str(rng.randint(1000, 9999)):<26}{w.style.money(total):>12}")
    w.line()
    w.line("Thank you for shopping with us.")
    w.line("A full VAT invoice is available on request.")
    w.line("Returns within 28 days with this receipt.")


def _receipt_de(w: _Writer) -> None:
    rng = w.rng
    shop = rng.choice(COMPANIES["de"])
    paid = _day(rng)
    w.line(f"      {shop.name}")
    w.line(f"      {shop.street}, {shop.city}")
    w.line()
    w.line("            QUITTUNG", mark=True)
    w.line(f"Nr. {rng.randint(100, 999)}        {w.style.date(paid)}")
    amount = _money_amount(rng, 50, 900)
    w.line(f"Betrag: {w.style.money(amount)}")
    w.line("Zahlungsart: bar")
    w.line(f"von: {rng.choice(PEOPLE)}")
    w.line("für: Barzahlung der Rechnung vom Vormonat, Reparatur Kühlanlage")
    tax = (amount * Decimal("0.19") / Decimal("1.19")).quantize(Decimal("0.01"))
    w.line(f"enthaltene MwSt. 19 %: {w.style.money(tax)}")
    w.line("Betrag dankend erhalten.")
    w.line()
    w.line(f"{shop.town}, den {w.style.date(paid)}    Unterschrift: ____________")


def _purchase_order_en(w: _Writer) -> None:
    rng = w.rng
    buyer, supplier = _pick(rng, COMPANIES["en"], 2)
    ordered = _day(rng)
    w.line(buyer.name)
    w.line(f"{buyer.street}, {buyer.city}")
    w.line()
    w.line(_pad("PURCHASE ORDER", f"PO number: PO-{rng.randint(1000, 9999)}"), mark=True)
    w.line(_pad(f"Supplier: {supplier.name}", f"Order date: {w.style.date(ordered)}"))
    w.line(_pad(supplier.city, f"Deliver by: {w.style.date(ordered + timedelta(days=14))}"))
    w.line()
    w.line(f"{'Item':<38}{'Qty':>5}{'Unit price':>14}")
    for name, _unit in rng.sample(list(GOODS), 3):
        w.line(f"{name:<38}{rng.randint(5, 100):>5}{w.style.money(_money_amount(rng, 2, 80, 1)):>14}")
    w.line()
    w.line("Please quote the PO number on your delivery note and on your invoice.")
    w.line("Invoices without a PO number will be returned unpaid.")
    w.line(f"Authorised by: {rng.choice(PEOPLE)}, Procurement")


def _purchase_order_en_short(w: _Writer) -> None:
    rng = w.rng
    buyer, supplier = _pick(rng, COMPANIES["en"], 2)
    ordered = _day(rng)
    w.line(_pad(buyer.name, f"Tel. +44 20 7946 {rng.randint(1000, 9999)}"))
    w.line()
    w.line(f"ORDER No. {ordered.year}-{rng.randint(100, 999)}", mark=True)
    w.line(f"To: {supplier.name}, {supplier.street}, {supplier.city}")
    w.line(f"Date: {w.style.date(ordered)}")
    w.line()
    w.line("We order, according to your quotation Q-" + str(rng.randint(100, 999)) + ":")
    w.line(f"  {rng.randint(2, 12)} x ergonomic office chair, black")
    w.line(f"  {rng.randint(2, 12)} x standing desk with electric frame")
    w.line(
        f"Agreed total: {w.style.money(_money_amount(rng, 2000, 9000))} excl. VAT, delivery free of charge."
    )
    w.line()
    w.line("Please confirm this order within 3 working days.")
    w.line("Send the invoice to accounts payable; a receipt of delivery must be signed on site.")
    w.line(rng.choice(PEOPLE))


def _service_agreement_cls_en(w: _Writer) -> None:
    rng = w.rng
    provider, client = _pick(rng, COMPANIES["en"], 2)
    start = _day(rng)
    w.line("MAINTENANCE AND SUPPORT AGREEMENT", mark=True)
    w.line(f"Contract no. MSA-{rng.randint(100, 999)}")
    w.line()
    w.line(f"between {provider.name}, {provider.city} (the Supplier)")
    w.line(f"and {client.name}, {client.city} (the Customer)")
    w.line()
    w.line(f"1. The Supplier maintains the Customer's {rng.randint(3, 12)} production robots.")
    w.line(f"2. Term: {rng.choice((12, 24))} months from {w.style.date(start)}.")
    w.line(f"3. Fee: {w.style.money(_money_amount(rng, 1000, 5000))} per quarter, invoiced in advance.")
    w.line("4. Spare parts are delivered with a delivery note and invoiced separately.")
    w.line("5. Credit notes are issued for missed response times.")
    w.line()
    w.line(_pad("Signed for the Supplier", "Signed for the Customer"))
    w.line(_pad(rng.choice(PEOPLE), rng.choice(PEOPLE)))


def _service_agreement_fr(w: _Writer) -> None:
    rng = w.rng
    provider, client = _pick(rng, COMPANIES["fr"], 2)
    start = _day(rng)
    w.line("CONTRAT DE PRESTATION DE SERVICES", mark=True)
    w.line(f"N° {start.year}-{rng.randint(10, 99)}")
    w.line()
    w.line(f"Entre {provider.name}, {provider.street}, {provider.city}, ci-après le Prestataire,")
    w.line(f"et {client.name}, {client.street}, {client.city}, ci-après le Client.")
    w.line()
    w.line("Article 1 - Objet : entretien des locaux et des vitres du Client.")
    w.line(f"Article 2 - Durée : {rng.choice((12, 24))} mois à compter du {w.style.date(start)}.")
    price = w.style.money(_money_amount(rng, 500, 3000))
    w.line(f"Article 3 - Prix : {price} HT par mois, facturés mensuellement.")
    w.line("Article 4 - Paiement : à 30 jours date de facture ; tout retard donne lieu à une relance.")
    w.line("Article 5 - Résiliation : par lettre recommandée avec un préavis de 3 mois.")
    w.line()
    w.line(f"Fait à {client.town}, le {w.style.date(start - timedelta(days=10))}, en deux exemplaires.")
    w.line(_pad("Le Prestataire", "Le Client"))


def _delivery_note_cls_en(w: _Writer) -> None:
    rng = w.rng
    supplier, customer = _pick(rng, COMPANIES["en"], 2)
    shipped = _day(rng)
    w.line(supplier.name)
    w.line(f"{supplier.street} · {supplier.city}")
    w.line()
    w.line(_pad("", "DELIVERY NOTE"), mark=True)
    w.line(_pad(f"No. DN-{rng.randint(10000, 99999)}", f"Date: {w.style.date(shipped)}"))
    w.line(f"Order reference: PO-{rng.randint(1000, 9999)}")
    w.line(f"Ship to: {customer.name}, {customer.street}, {customer.city}")
    w.line()
    for name, unit in rng.sample(list(GOODS), 3):
        w.line(f"  {name:<38}{rng.randint(2, 40):>4} {unit}")
    w.line()
    w.line(f"Packages: {rng.randint(1, 9)}   Carrier: {rng.choice(CARRIERS)}")
    w.line("No prices are shown; the invoice follows by e-mail.")
    w.line("Received by: ________________   Date: ________")


def _delivery_note_de_cls(w: _Writer) -> None:
    rng = w.rng
    supplier, customer = _pick(rng, COMPANIES["de"], 2)
    shipped = _day(rng)
    w.line(f"{supplier.name} · {supplier.street} · {supplier.city}")
    w.line()
    w.line(f"{customer.name}")
    w.line(f"{customer.street}")
    w.line(f"{customer.city}")
    w.line()
    w.line(_pad("LIEFERSCHEIN", f"Nr. {rng.randint(40000, 49999)}"), mark=True)
    w.line(f"Datum: {w.style.date(shipped)}     Ihre Bestellung Nr. B-{rng.randint(1000, 9999)}")
    w.line()
    for pos, (name, unit) in enumerate(rng.sample(list(GOODS_DE), 3), start=1):
        w.line(f"{pos:<4}{name:<36}{rng.randint(2, 40):>4} {unit}")
    w.line()
    w.line("Die Rechnung erhalten Sie gesondert per Post.")
    w.line("Ware vollständig und unbeschädigt erhalten: ____________________")


def _payment_reminder_cls_en(w: _Writer) -> None:
    rng = w.rng
    creditor, debtor = _pick(rng, COMPANIES["en"], 2)
    today = _day(rng, date(2026, 3, 1))
    invoice = f"INV-{rng.randint(10000, 99999)}"
    w.line(creditor.name)
    w.line(f"{creditor.street}, {creditor.city}")
    w.line()
    w.line(f"{debtor.name}")
    w.line(f"{debtor.city}")
    w.line(_pad("", w.style.date(today)))
    w.line("SECOND REMINDER: OVERDUE ACCOUNT", mark=True)
    w.line()
    w.line(f"Invoice {invoice} of {w.style.date(today - timedelta(days=60))},")
    amount, due = w.style.money(_money_amount(rng, 200, 6000)), w.style.date(today - timedelta(days=30))
    w.line(f"amount {amount}, was due on {due}.")
    w.line("We have not received your payment despite our first reminder.")
    w.line(f"Please pay within 7 days, quoting {invoice}, or send us the remittance advice.")
    w.line("If we do not hear from you, we will pass the claim to our collection agency.")
    w.line()
    w.line(f"Credit Control, {creditor.name}")


def _payment_reminder_de(w: _Writer) -> None:
    rng = w.rng
    creditor, debtor = _pick(rng, COMPANIES["de"], 2)
    today = _day(rng, date(2026, 3, 1))
    invoice = f"RE-{today.year}-{rng.randint(1000, 9999)}"
    w.line(f"{creditor.name} · {creditor.street} · {creditor.city}")
    w.line()
    w.line(debtor.name)
    w.line(debtor.street)
    w.line(debtor.city)
    w.line(_pad("", f"{creditor.town}, {w.style.date(today)}"))
    w.line("Zahlungserinnerung", mark=True)
    w.line()
    w.line("Sehr geehrte Damen und Herren,")
    w.line(f"sicher haben Sie übersehen, dass unsere Rechnung Nr. {invoice}")
    invoiced, amount = w.style.date(today - timedelta(days=45)), w.style.money(_money_amount(rng, 200, 6000))
    w.line(f"vom {invoiced} über {amount} noch offen ist.")
    w.line(f"Bitte überweisen Sie den Betrag bis zum {w.style.date(today + timedelta(days=10))}.")
    w.line("Sollten Sie inzwischen gezahlt haben, betrachten Sie dieses Schreiben als gegenstandslos.")
    w.line()
    w.line("Mit freundlichen Grüßen")
    w.line(f"Buchhaltung, {creditor.name}")


def _credit_note_en(w: _Writer) -> None:
    rng = w.rng
    seller, buyer = _pick(rng, COMPANIES["en"], 2)
    issued = _day(rng)
    amount = _money_amount(rng, 50, 900)
    w.line(seller.name)
    w.line(f"{seller.street}, {seller.city}")
    w.line()
    w.line(_pad("CREDIT NOTE", f"No. CN-{rng.randint(1000, 9999)}"), mark=True)
    w.line(_pad(f"Customer: {buyer.name}", f"Date: {w.style.date(issued)}"))
    w.line(
        f"Relating to invoice INV-{rng.randint(10000, 99999)} of {w.style.date(issued - timedelta(days=21))}"
    )
    w.line()
    w.line(f"Returned goods: {rng.randint(2, 10)} x {rng.choice(GOODS)[0]}, damaged in transit")
    w.line(_pad("Credit amount incl. VAT", w.style.money(amount)))
    w.line()
    w.line("This amount will be offset against your next invoice.")
    w.line("No payment is required. Please keep this note with your receipt of the return.")


def _credit_note_fr(w: _Writer) -> None:
    rng = w.rng
    seller, buyer = _pick(rng, COMPANIES["fr"], 2)
    issued = _day(rng)
    w.line(seller.name)
    w.line(f"{seller.street} - {seller.city}")
    w.line()
    w.line(_pad("AVOIR", f"N° AV-{rng.randint(100, 999)}"), mark=True)
    w.line(f"Client : {buyer.name}, {buyer.city}")
    w.line(f"Date : {w.style.date(issued)}")
    invoice, invoiced = (
        f"FA-{issued.year}-{rng.randint(1000, 9999)}",
        w.style.date(issued - timedelta(days=15)),
    )
    w.line(f"Annule et remplace la facture n° {invoice} du {invoiced}")
    w.line()
    w.line(f"Remise commerciale accordée : {w.style.money(_money_amount(rng, 40, 600))} HT")
    w.line("TVA 20 % incluse dans le montant remboursé.")
    w.line("Ce montant sera déduit de votre prochaine facture.")
    w.line()
    w.line("Service clients")


@dataclass(frozen=True)
class _ClassificationSpec:
    label: str
    language: str
    guided: bool
    body: ClassificationBody


# One of each label in English first (so a prefix of seven covers the set), then the harder second round:
# references to other document types, other languages, tenant guides; the German receipt has no guide, so
# its title carries none of the label's own words and even a correct answer is expected to go to review.
CLASSIFICATION_SPECS = (
    _ClassificationSpec("invoice", "en", False, _invoice_en),
    _ClassificationSpec("receipt", "en", False, _receipt_en),
    _ClassificationSpec("purchase_order", "en", False, _purchase_order_en),
    _ClassificationSpec("service_agreement", "en", True, _service_agreement_cls_en),
    _ClassificationSpec("delivery_note", "en", False, _delivery_note_cls_en),
    _ClassificationSpec("payment_reminder", "en", False, _payment_reminder_cls_en),
    _ClassificationSpec("credit_note", "en", True, _credit_note_en),
    _ClassificationSpec("invoice", "en", True, _invoice_en_references),
    _ClassificationSpec("receipt", "de", False, _receipt_de),
    _ClassificationSpec("purchase_order", "en", True, _purchase_order_en_short),
    _ClassificationSpec("service_agreement", "fr", True, _service_agreement_fr),
    _ClassificationSpec("delivery_note", "de", True, _delivery_note_de_cls),
    _ClassificationSpec("payment_reminder", "de", True, _payment_reminder_de),
    _ClassificationSpec("credit_note", "fr", True, _credit_note_fr),
)


def generate_classification(rng: random.Random, spec: _ClassificationSpec) -> ClassificationSample:
    w = _Writer(rng, rng.choice(STYLES[spec.language]))
    spec.body(w)
    pages, _, marked = w.finish()
    assert marked is not None, f"{spec.label} template marks no evidence line"
    guides = dict(TENANT_GUIDES) if spec.guided else {}
    return ClassificationSample(pages, LABELS, guides, spec.label, marked, spec.language)


def generate_classifications(count: int, seed: int = 15) -> list[ClassificationSample]:
    """``count`` classification documents, reproducible from ``seed``, cycling through the specs."""
    rng = random.Random(seed)  # noqa: S311 - sample data, not security
    specs = CLASSIFICATION_SPECS
    return [generate_classification(rng, specs[n % len(specs)]) for n in range(count)]


# --------------------------------------------------------------------------------- requests and answers


def _document(pages: Sequence[str]) -> dict[str, Any]:
    return {"pages": [{"text": page} for page in pages]}


def summary_request_body(sample: SummarySample) -> dict[str, Any]:
    return {
        "job_type": SUMMARY,
        "document": _document(sample.pages),
        "options": {"max_words": sample.max_words, "max_facts": sample.max_facts},
    }


def classification_request_body(sample: ClassificationSample, *, send_guides: bool) -> dict[str, Any]:
    """The job's request; ``send_guides`` only where the service knows the ``label_guides`` option."""
    options: dict[str, Any] = {"labels": list(sample.labels)}
    if send_guides and sample.label_guides:
        options["label_guides"] = {label: g.as_option() for label, g in sample.label_guides.items()}
    return {"job_type": CLASSIFICATION, "document": _document(sample.pages), "options": options}


def _quote(at: PrintedLine) -> dict[str, Any]:
    return {"page": at.page, "quote": " ".join(at.text.split())}


def faithful_summary(sample: SummarySample) -> dict[str, Any]:
    """What a careful reader answers, as the job's JSON: the truth's summary, and as key facts the lines
    that print the truth's values (first ones first, at most ``max_facts``), each quoting itself."""
    lines: list[PrintedLine] = []
    for value in sample.truth.values:
        if value.at not in lines:
            lines.append(value.at)
    facts = [{"fact": " ".join(at.text.split()), "evidence": _quote(at)} for at in lines[: sample.max_facts]]
    return {"summary": sample.truth.summary, "key_facts": facts}


def faithful_classification(sample: ClassificationSample) -> dict[str, Any]:
    """The true label, with the document's title line as its evidence."""
    return {"label": sample.truth_label, "evidence": _quote(sample.evidence)}
