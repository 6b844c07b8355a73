"""The benchmark's judge of summaries and labels: it calls a fabricated fact wrong and a faithful one right,
reads numbers and dates in any common format, and never looks at the model's quotes."""

from __future__ import annotations

from datetime import date
from decimal import Decimal

import pytest

from tollgate_dev.document_judge import (
    capitalised_names,
    judge_classification,
    judge_summary,
    number_readings,
    read_values,
)
from tollgate_dev.document_samples import faithful_summary, generate_summaries

LEASE = (
    "COMMERCIAL LEASE AGREEMENT\n"
    "Landlord: Isar Immobilien GmbH & Co. KG, Lindwurmstraße 88, 80337 München\n"
    "Tenant:   Meridian Clinics B.V., Stationsplein 8, 3511 ED Utrecht\n"
    "The lease starts on 01.04.2026 and runs for 60 months.\n"
    "Monthly rent: 2.350,00 EUR, payable in advance by the 3rd working day of each month.\n"
    "Security deposit: 7.050,00 EUR, reference PO-4471.\n",
)


def judge(summary: str, *facts: str):
    return judge_summary(summary, facts, LEASE)


def test_a_faithful_fact_is_right_in_the_documents_words_or_a_readers():
    # Given facts that restate printed values, in the document's formats or in others
    faithful = judge(
        "Meridian Clinics B.V. rents office space from Isar Immobilien for 60 months from 1 April 2026.",
        "Monthly rent: 2.350,00 EUR",
        "The lease runs for 60 months from 2026-04-01",
        "Meridian Clinics pays a monthly rent of EUR 2,350 to Isar Immobilien GmbH",
        "Deposit of EUR 7,050.00 (reference PO 4471)",
    )
    # Then the judge calls the summary right
    assert faithful.correct, faithful.problems


@pytest.mark.parametrize(
    ("fact", "why"),
    [
        ("Monthly rent: 2.530,00 EUR", "2.530,00"),  # digits swapped
        ("The lease starts on 01.05.2026", "01.05.2026"),  # another date
        ("The lease runs for 36 months", "36"),  # a duration the document does not give
        ("Rent is paid to Bavaria Estates GmbH", "Bavaria"),  # a landlord the document does not name
        ("Purchase order PO-4417 applies", "PO-4417"),  # a reference with its digits mixed up
        ("Monthly rent of 2.350,00 EUR from 01.04.2026", "not printed together"),  # two lines joined
    ],
)
def test_a_fabricated_fact_is_wrong(fact, why):
    judged = judge("A lease of office space.", fact)
    assert not judged.correct
    assert any(why in problem for problem in judged.problems), judged.problems


def test_a_number_in_the_summary_text_the_document_never_prints_makes_it_wrong():
    judged = judge("The rent rises to 2.500,00 EUR after 12 months.", "Monthly rent: 2.350,00 EUR")
    assert [p for p in judged.problems if p.startswith("summary:")] == [
        "summary: '2.500,00' is printed nowhere in the document",
        "summary: '12' is printed nowhere in the document",
    ]


def test_the_judge_never_reads_quotes_so_a_sloppy_quote_does_not_make_a_true_fact_wrong():
    # The judge takes fact texts and pages only: whatever the model quoted, the fact below is printed
    assert judge("A lease.", "Security deposit 7.050,00 EUR").correct


def test_numbers_are_read_in_every_common_format():
    assert number_readings("1.250,00") == {Decimal("1250")}
    assert number_readings("1,250.00") == {Decimal("1250")}
    assert number_readings("1'250.00") == {Decimal("1250")}
    assert number_readings("1250,5") == {Decimal("1250.5")}
    assert number_readings("1,250") == {Decimal("1250"), Decimal("1.25")}, "en thousands or de decimals"
    assert number_readings("3rd") == {Decimal(3)}
    assert number_readings("1.2.3") == frozenset()


def test_dates_are_read_as_dates_whatever_their_format():
    expected = {date(2026, 4, 1)}
    for text in (
        "01.04.2026",
        "2026-04-01",
        "1 April 2026",
        "April 1, 2026",
        "1. April 2026",
        "1er avril 2026",
    ):
        (claim,) = read_values(text)
        assert claim.kind == "date" and claim.readings == expected, text
    (slashes,) = read_values("04/01/2026")
    assert slashes.readings == {date(2026, 1, 4), date(2026, 4, 1)}, "day or month first"
    (no_year,) = read_values("due 3 May")
    assert no_year.kind == "day" and no_year.readings == {(5, 3)}


def test_references_and_units_are_told_apart():
    kinds = {c.text: c.kind for c in read_values("PO-4471, a 24-month term, A4 paper, at 10:30")}
    assert kinds == {"PO-4471": "code", "24": "number", "A4": "code", "10:30": "code"}


def test_names_are_capitalised_words_that_do_not_start_a_sentence():
    assert capitalised_names("Rent is paid to Isar Immobilien GmbH. The deposit is in EUR in April.") == [
        "Isar",
        "Immobilien",
        "GmbH",
    ]
    assert capitalised_names("Landlord: Rhône-Alpes Conseil's office") == ["Rhône", "Alpes", "Conseil"]


def test_every_faithful_sample_summary_is_right_and_a_tampered_one_is_wrong():
    for sample in generate_summaries(12, seed=15):
        answer = faithful_summary(sample)
        facts = [fact["fact"] for fact in answer["key_facts"]]
        assert judge_summary(answer["summary"], facts, sample.pages).correct
        # When one printed amount or quantity in a fact is changed by a digit
        first = next(i for i, f in enumerate(facts) if any(c.isdigit() for c in f))
        tampered = list(facts)
        tampered[first] = _bump_last_digit(tampered[first])
        assert not judge_summary(answer["summary"], tampered, sample.pages).correct, tampered[first]


def _bump_last_digit(text: str) -> str:
    at = max(i for i, c in enumerate(text) if c.isdigit())
    return text[:at] + str((int(text[at]) + 5) % 10) + text[at + 1 :]


def test_a_label_is_right_only_when_it_is_the_true_one():
    assert judge_classification("payment_reminder", "payment_reminder")
    assert not judge_classification("invoice", "payment_reminder")
    assert not judge_classification(None, "invoice")


def test_a_summary_over_the_tenants_limits_is_not_what_was_asked_for():
    sample = generate_summaries(1)[0]
    answer = faithful_summary(sample)
    facts = [fact["fact"] for fact in answer["key_facts"]]
    assert judge_summary(answer["summary"], facts, sample.pages, max_words=200, max_facts=len(facts)).correct
    too_long = judge_summary(answer["summary"], facts, sample.pages, max_words=3)
    too_many = judge_summary(answer["summary"], facts, sample.pages, max_facts=len(facts) - 1)
    assert too_long.problems[0].startswith("summary: ") and "at most 3" in too_long.problems[0]
    assert too_many.problems == (
        f"key_facts: {len(facts)} facts, the tenant asked for at most {len(facts) - 1}",
    )
