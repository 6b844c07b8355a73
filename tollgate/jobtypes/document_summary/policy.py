"""Policy ``summary.v2``: what can be checked of a summary is checked against the printed text.

A summary is free text, so the checks are about what it asserts: it stays within the tenant's limits; every
key fact's quote is printed in the document (as whole tokens, case aside; on the page it names, or else
where it is; of a quote of several lines, the lines that are printed); every number, date and name the fact
states is printed in that very quote, its numbers and dates on one line of it (a fact whose figure differs
from the line it quotes, or that joins the figures of two lines, is refused); and every number or date of the
summary text is one the document or a fact prints. ``summary.v1`` only located the quote; its results keep
their version.
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal

from tollgate.jobtypes.base import TenantPolicy, ValidationReport
from tollgate.jobtypes.document_summary.schema import DocumentSummary, SummaryOptions, word_count
from tollgate.jobtypes.printed import Located, PrintedDocument, locate_quote
from tollgate.jobtypes.statements import dates_in, names_in, number_tokens, numbers_in, prints_name, same_day

POLICY_VERSION = "summary.v2"
# Every reason code this policy gives (a test holds it to the policy's code): what `?reason=` filters on.
REASON_CODES = frozenset(
    {
        "evidence_missing",
        "evidence_not_found",
        "fact_not_in_quote",
        "no_key_facts",
        "over_word_limit",
        "summary_number_unsupported",
        "too_many_facts",
    }
)


def validate_summary(
    summary: DocumentSummary, pages: Sequence[str], options: SummaryOptions, policy: TenantPolicy
) -> ValidationReport:
    del policy  # a summary checks no master data
    report = ValidationReport(POLICY_VERSION)
    words = word_count(summary.summary)
    if words > options.max_words:
        report.fail("over_word_limit", "summary", f"{words} words, over the limit of {options.max_words}")
    if not summary.key_facts:
        report.fail("no_key_facts", "key_facts", "the summary lists no key fact")
    if len(summary.key_facts) > options.max_facts:
        report.fail(
            "too_many_facts",
            "key_facts",
            f"{len(summary.key_facts)} facts, over the limit of {options.max_facts}",
        )
    document = PrintedDocument(pages)
    for index, fact in enumerate(summary.key_facts):
        name = f"key_facts[{index}]"
        if fact.evidence is None:
            report.fail("evidence_missing", name, "the fact has no quote of the document")
            continue
        parts = locate_quote(document, fact.evidence.quote, fact.evidence.page)
        if not parts:
            quote = " ".join(fact.evidence.quote.split())[:120]
            report.fail("evidence_not_found", name, f"the quote {quote!r} is printed nowhere in the document")
            continue
        report.located[name] = Located(name, parts[0], None)
        _check_fact(report, name, fact.fact, "\n".join(document.text(part) for part in parts))
    _check_summary_text(report, summary, document)
    return report


def _check_fact(report: ValidationReport, name: str, fact: str, quote: str) -> None:
    """Every number, date and name the fact states is printed in its quote, and its numbers and dates on one
    line of it: a fact that joins the figure of one line to the date of another states what no line does."""
    quoted = numbers_in(quote)
    numbers = number_tokens(fact)
    for token, readings in numbers:
        if not readings & quoted:
            report.fail("fact_not_in_quote", name, f"the fact says {token!r}, which its quote does not print")
    quoted_dates = set(dates_in(quote).values())
    dates = dates_in(fact)
    for token, day in dates.items():
        if not same_day(day, quoted_dates):
            detail = f"the fact says {token!r}, a date its quote does not print"
            report.fail("fact_not_in_quote", name, detail)
    for word in names_in(fact):
        if not prints_name(quote, word):
            report.fail("fact_not_in_quote", name, f"the fact names {word!r}, which its quote does not print")
    stated = [token for token, _ in numbers] + list(dates)
    if len(stated) > 1 and not any(_line_states(line, numbers, dates) for line in quote.splitlines()):
        values = ", ".join(repr(token) for token in stated)
        report.fail(
            "fact_not_in_quote", name, f"the fact joins {values}, which no one line of its quote prints"
        )


def _line_states(
    line: str, numbers: list[tuple[str, frozenset[Decimal | str]]], dates: dict[str, str]
) -> bool:
    printed_numbers, printed_dates = numbers_in(line), set(dates_in(line).values())
    return all(readings & printed_numbers for _, readings in numbers) and all(
        same_day(day, printed_dates) for day in dates.values()
    )


def _check_summary_text(
    report: ValidationReport, summary: DocumentSummary, document: PrintedDocument
) -> None:
    """A number or date in the summary text is one the document prints or a fact states."""
    sources = [page.text for page in document.pages] + [fact.fact for fact in summary.key_facts]
    printed = frozenset().union(*(numbers_in(text) for text in sources))
    printed_dates = {iso for text in sources for iso in dates_in(text).values()}
    for token, readings in number_tokens(summary.summary):
        if not readings & printed:
            report.fail(
                "summary_number_unsupported",
                "summary",
                f"the summary says {token!r}, a number neither the document nor a fact prints",
            )
    for token, day in dates_in(summary.summary).items():
        if not same_day(day, printed_dates):
            report.fail(
                "summary_number_unsupported",
                "summary",
                f"the summary says {token!r}, a date neither the document nor a fact prints",
            )
