"""The job types Tollgate runs, by name. Adding one is a folder with its schema (options, output, policy) and
its prompt, and one entry here: the API, the worker, the simulator, the stacks and the docs read this."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Literal

from tollgate.jobtypes.base import JobType, Routing
from tollgate.jobtypes.document_classification import policy as classification_policy
from tollgate.jobtypes.document_classification import prompt as classification_prompt
from tollgate.jobtypes.document_classification import schema as classification_schema
from tollgate.jobtypes.document_summary import policy as summary_policy
from tollgate.jobtypes.document_summary import prompt as summary_prompt
from tollgate.jobtypes.document_summary import schema as summary_schema
from tollgate.jobtypes.invoice_extraction import evidence as invoice_evidence
from tollgate.jobtypes.invoice_extraction import prompt as invoice_prompt
from tollgate.jobtypes.invoice_extraction import schema as invoice_schema
from tollgate.jobtypes.invoice_extraction import validation as invoice_validation
from tollgate.jobtypes.invoice_extraction.options import InvoiceOptions

INVOICE_EXTRACTION = JobType(
    name="invoice_extraction",
    summary="the ERP fields of an invoice, each with its evidence (options: InvoiceOptions).",
    schema_version="invoice.v1",
    options=InvoiceOptions,
    output=invoice_schema.Invoice,
    schema_name=invoice_schema.SCHEMA_NAME,
    prompt_version=invoice_prompt.PROMPT_VERSION,
    system_prompt=lambda _options: invoice_prompt.SYSTEM,
    policy_version=invoice_validation.POLICY_VERSION,
    validate=lambda output, pages, _options, policy: invoice_validation.validate_invoice(
        output, pages, policy
    ),
    review_reasons=invoice_validation.REASON_CODES,
    evidence_fields=invoice_evidence.evidence_fields,
    # A short single-page invoice is the small model's; arithmetic over many lines is not.
    routing=Routing(max_pages=1, max_chars=6000, max_lines=80),
    max_output_tokens=4096,
    queue="invoice-extraction",
)

DOCUMENT_SUMMARY = JobType(
    name="document_summary",
    summary="a summary within a word limit and key facts, each with its evidence (options: SummaryOptions).",
    schema_version=summary_schema.SCHEMA_VERSION,
    options=summary_schema.SummaryOptions,
    output=summary_schema.DocumentSummary,
    schema_name=summary_schema.SCHEMA_NAME,
    prompt_version=summary_prompt.PROMPT_VERSION,
    system_prompt=summary_prompt.system_prompt,
    policy_version=summary_policy.POLICY_VERSION,
    validate=summary_policy.validate_summary,
    review_reasons=summary_policy.REASON_CODES,
    evidence_fields=summary_schema.evidence_fields,
    routing=Routing(
        max_pages=3, max_chars=12000, max_lines=400, small_languages=frozenset({"en", "de", "fr"})
    ),
    max_output_tokens=1500,
    queue="document-summary",
)

DOCUMENT_CLASSIFICATION = JobType(
    name="document_classification",
    summary="one label of the set the job names, with its evidence (options: ClassificationOptions).",
    schema_version=classification_schema.SCHEMA_VERSION,
    options=classification_schema.ClassificationOptions,
    output=classification_schema.DocumentClassification,
    schema_name=classification_schema.SCHEMA_NAME,
    prompt_version=classification_prompt.PROMPT_VERSION,
    system_prompt=classification_prompt.system_prompt,
    policy_version=classification_policy.POLICY_VERSION,
    validate=classification_policy.validate_classification,
    review_reasons=classification_policy.REASON_CODES,
    evidence_fields=classification_schema.evidence_fields,
    routing=Routing(max_pages=5, max_chars=20000, max_lines=600),
    max_output_tokens=400,
    queue="document-classification",
)

JOB_TYPES: Mapping[str, JobType] = MappingProxyType(
    {t.name: t for t in (INVOICE_EXTRACTION, DOCUMENT_SUMMARY, DOCUMENT_CLASSIFICATION)}
)
DEFAULT_JOB_TYPE = INVOICE_EXTRACTION.name
# Codes of earlier policy versions that no current policy gives, which results still kept may carry
# (invoices' validation.v2 compared evidence with the value itself).
RETIRED_REVIEW_REASONS = frozenset({"evidence_contradicts"})
# Every reason code a result waiting for review can carry: what the review queue filters by.
REVIEW_REASONS: tuple[str, ...] = tuple(
    sorted(RETIRED_REVIEW_REASONS.union(*(t.review_reasons for t in JOB_TYPES.values())))
)

# The names above as types, so a filter that takes one refuses any other value (422, the values named) and
# the OpenAPI document lists them.
if TYPE_CHECKING:
    JobTypeName = str
    ReviewReasonCode = str
else:
    JobTypeName = Literal[tuple(JOB_TYPES)]
    ReviewReasonCode = Literal[REVIEW_REASONS]


class UnknownJobType(KeyError):
    """A job type no bundle describes (a stored row from a newer release, say)."""


def job_type(name: str) -> JobType:
    try:
        return JOB_TYPES[name]
    except KeyError:
        raise UnknownJobType(name) from None
