"""Each job type's queue comes from one JSON map per entrypoint, checked at cold start: a registered type
without a queue, or a name no type has, stops the process with a message naming it."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from tollgate.jobtypes.registry import JOB_TYPES
from tollgate.settings import RelaySettings, SupportSettings, WorkerSettings

QUEUES = {name: f"https://sqs.example/tollgate-{t.queue}.fifo" for name, t in JOB_TYPES.items()}
DLQS = {name: f"https://sqs.example/tollgate-{t.queue}-dlq.fifo" for name, t in JOB_TYPES.items()}


def test_the_maps_are_read_from_json_environment_variables(monkeypatch):
    monkeypatch.setenv("DATABASE_URL", "postgresql://x")
    monkeypatch.setenv("JOB_QUEUE_URLS", json.dumps(QUEUES))
    monkeypatch.setenv("JOB_DLQ_URLS", json.dumps(DLQS))

    assert RelaySettings().job_queue_urls == QUEUES
    support = SupportSettings()
    assert (support.job_queue_urls, support.job_dlq_urls) == (QUEUES, DLQS)


@pytest.mark.parametrize("model", [RelaySettings, WorkerSettings, SupportSettings])
def test_a_registered_type_without_a_queue_is_named(model):
    missing = {name: url for name, url in QUEUES.items() if name != "document_summary"}

    with pytest.raises(ValidationError, match="JOB_QUEUE_URLS has no queue for job type 'document_summary'"):
        model(
            database_url="postgresql://x",
            job_queue_urls=missing,
            job_dlq_urls=DLQS,
            documents_bucket="b",
            openai_api_key="k",
        )


def test_a_name_no_type_has_is_refused_with_the_registered_ones():
    with pytest.raises(
        ValidationError, match="names job type 'invoices', which is not registered"
    ) as refused:
        RelaySettings(database_url="postgresql://x", job_queue_urls={**QUEUES, "invoices": "https://q"})
    assert "invoice_extraction, document_summary, document_classification" in str(refused.value)


def test_an_empty_url_counts_as_missing():
    with pytest.raises(ValidationError, match="no queue for job type 'invoice_extraction'"):
        RelaySettings(database_url="postgresql://x", job_queue_urls={**QUEUES, "invoice_extraction": ""})


def test_the_support_cli_needs_every_types_dead_letter_queue_too():
    with pytest.raises(ValidationError, match="JOB_DLQ_URLS has no dead-letter queue for job type"):
        SupportSettings(database_url="postgresql://x", job_queue_urls=QUEUES, job_dlq_urls={})
