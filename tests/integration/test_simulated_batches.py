"""The Batch API adapter against the simulated provider over a real socket: a batch runs on the simulator's
fake clock from upload to output lines, and partial failures, expiry, cancellation, lookup by metadata, file
limits and the enqueued token pool end as OpenAI ends them. Nothing sleeps; the clock is moved."""

from __future__ import annotations

import json
import urllib.request
import uuid
from datetime import timedelta

import pytest
from openai import OpenAI

from tollgate.core.clock import FakeClock
from tollgate.execution.llm.batch_api import (
    LINE_CANCELLED,
    LINE_EXPIRED,
    BatchApiError,
    BatchStatus,
    CustomId,
    OpenAIBatchApi,
    line_result,
    parse_output_line,
    request_line,
)
from tollgate.execution.llm.client import OutcomeClass, Task
from tollgate.execution.llm.output import StructuredOutput
from tollgate.jobtypes.registry import INVOICE_EXTRACTION
from tollgate_dev.samples import expected_invoice, generate_invoices
from tollgate_dev.simulator.server import SimulatedProvider, SimulatorConfig

pytestmark = pytest.mark.integration

PATIENCE_SECONDS = 60.0
API_KEY = "sk-simulated-f00d"
MODEL = "gpt-sim"
SAMPLES = generate_invoices(12, seed=31)


@pytest.fixture
def clock():
    return FakeClock()


@pytest.fixture
def simulator(clock):
    """A provider on the fake clock and the adapter over an SDK client for it; both stopped afterwards."""
    running: list[tuple[SimulatedProvider, OpenAI]] = []

    def start(**batches):
        provider = SimulatedProvider(SimulatorConfig(), clock=clock)
        client = OpenAI(base_url=provider.start(), api_key=API_KEY, max_retries=0, timeout=PATIENCE_SECONDS)
        running.append((provider, client))
        if batches:
            provider.configure_batches(**batches)
        return provider, OpenAIBatchApi(client, clock)

    yield start
    for provider, client in running:
        client.close()
        provider.stop()


def request_file(count: int, *, attempt: int = 1) -> tuple[bytes, dict[str, object]]:
    """``count`` invoice requests; returns the file and each custom id's sample."""
    lines, samples = [], {}
    for index in range(count):
        sample = SAMPLES[index % len(SAMPLES)]
        custom_id = CustomId(uuid.UUID(int=index + 1), attempt, 7)
        lines.append(
            request_line(custom_id, Task.invoice(sample.pages), MODEL, 3000, StructuredOutput.JSON_SCHEMA)
        )
        samples[str(custom_id)] = sample
    return b"".join(lines), samples


def results(api: OpenAIBatchApi, file_id: str | None) -> dict[str, object]:
    if file_id is None:
        return {}
    parsed = [parse_output_line(raw) for raw in api.lines(file_id)]
    return {line.custom_id: (line, line_result(line, INVOICE_EXTRACTION, MODEL)) for line in parsed}


def test_a_batch_runs_from_upload_to_one_ok_result_per_custom_id(simulator, clock):
    provider, api = simulator(completion_seconds=600)
    content, samples = request_file(30)

    file_id = api.upload("batch-1.jsonl", content)
    created = api.create(file_id, metadata={"tollgate_batch": "b-1"})
    assert created.status is BatchStatus.VALIDATING
    clock.advance(300)
    halfway = api.retrieve(created.id)
    assert halfway.status is BatchStatus.IN_PROGRESS and halfway.output_file_id is None
    assert (halfway.total, halfway.completed) == (30, 15)
    clock.advance(300)
    done = api.retrieve(created.id)

    assert done.status is BatchStatus.COMPLETED and done.status.terminal
    assert (done.total, done.completed, done.failed) == (30, 30, 0)
    assert done.error_file_id is None and done.metadata == {"tollgate_batch": "b-1"}
    outcomes = results(api, done.output_file_id)
    assert set(outcomes) == set(samples), "exactly one line per custom id"
    for custom_id, (_, result) in outcomes.items():
        assert result.outcome is OutcomeClass.OK
        assert result.output == expected_invoice(samples[custom_id])
        assert result.input_tokens and result.output_tokens
    stats = provider.stats
    assert stats.batch_files == 1 and stats.batches == {"completed": 1}
    assert stats.batch_lines_answered == 30 and stats.completions == 0, "no chat quota was used"
    assert stats.peak_enqueued_tokens[MODEL] > 0


def test_failed_lines_land_in_the_error_file_and_faulty_answers_are_invalid_output(simulator, clock):
    provider, api = simulator(completion_seconds=60)
    provider.queue_line_faults(["500", "429", "malformed_json", "timeout"])
    content, samples = request_file(8)

    batch = api.create(api.upload("b.jsonl", content), metadata={})
    clock.advance(60)
    done = api.retrieve(batch.id)

    assert (done.status, done.total, done.completed, done.failed) == (BatchStatus.COMPLETED, 8, 5, 3)
    answered, failed = results(api, done.output_file_id), results(api, done.error_file_id)
    assert set(answered) | set(failed) == set(samples) and not set(answered) & set(failed)
    ordered = list(samples)
    assert (
        failed[ordered[0]][1].outcome is OutcomeClass.TRANSIENT and failed[ordered[0]][0].status_code == 500
    )
    assert failed[ordered[1]][1].outcome is OutcomeClass.THROTTLED
    assert failed[ordered[3]][1].outcome is OutcomeClass.TIMEOUT and failed[ordered[3]][0].status_code is None
    assert answered[ordered[2]][1].outcome is OutcomeClass.INVALID_OUTPUT
    assert [answered[c][1].outcome for c in ordered[4:]] == [OutcomeClass.OK] * 4
    assert (provider.stats.batch_lines_answered, provider.stats.batch_lines_failed) == (5, 3)


def test_a_batch_that_expires_returns_what_it_answered_and_marks_the_rest_never_run(simulator, clock):
    provider, api = simulator(completion_seconds=100, expire_after_seconds=50)
    content, samples = request_file(10)

    batch = api.create(api.upload("b.jsonl", content), metadata={})
    clock.advance(49)
    assert api.retrieve(batch.id).status is BatchStatus.IN_PROGRESS
    clock.advance(1)
    expired = api.retrieve(batch.id)

    assert (expired.status, expired.completed, expired.failed) == (BatchStatus.EXPIRED, 5, 5)
    answered, unrun = results(api, expired.output_file_id), results(api, expired.error_file_id)
    assert list(answered) == list(samples)[:5], "the lines whose time had come"
    assert all(result.outcome is OutcomeClass.OK for _, result in answered.values())
    assert all(line.never_ran and line.error_code == LINE_EXPIRED for line, _ in unrun.values())
    assert provider.stats.batch_lines_unrun == 5


def test_a_cancelled_batch_is_cancelling_then_cancelled_with_unrun_lines(simulator, clock):
    _, api = simulator(completion_seconds=40, cancel_seconds=30)
    content, _ = request_file(4)
    batch = api.create(api.upload("b.jsonl", content), metadata={})
    clock.advance(10)

    cancelling = api.cancel(batch.id)
    clock.advance(29)
    still = api.retrieve(batch.id)
    clock.advance(1)
    cancelled = api.retrieve(batch.id)

    assert cancelling.status is BatchStatus.CANCELLING and still.status is BatchStatus.CANCELLING
    assert (cancelled.status, cancelled.completed, cancelled.failed) == (BatchStatus.CANCELLED, 1, 3)
    unrun = results(api, cancelled.error_file_id)
    assert {line.error_code for line, _ in unrun.values()} == {LINE_CANCELLED}
    with pytest.raises(BatchApiError) as refused:
        api.cancel(batch.id)
    assert refused.value.status == 400 and "cancelled" in str(refused.value)


def test_find_pages_the_list_newest_first_and_stops_at_older_batches(simulator, clock):
    _, api = simulator()
    content, _ = request_file(1)
    file_id = api.upload("b.jsonl", content)
    start = clock.now()
    wanted = api.create(file_id, metadata={"tollgate_batch": "wanted"})
    clock.advance(5)
    for index in range(130):  # more than one page of the list (100) after the wanted one
        api.create(file_id, metadata={"tollgate_batch": f"other-{index}"})

    found = api.find("tollgate_batch", "wanted", created_after=start)
    missing = api.find("tollgate_batch", "never-created", created_after=start)
    too_old = api.find("tollgate_batch", "wanted", created_after=start + timedelta(seconds=1))

    assert found is not None and found.id == wanted.id
    assert missing is None and too_old is None


def test_file_limits_are_refused_with_a_clear_error(simulator, clock):
    provider, api = simulator(max_file_bytes=40_000, max_requests_per_file=3)
    big, _ = request_file(12)
    assert len(big) > 40_000
    four, _ = request_file(4)
    assert len(four) <= 40_000

    with pytest.raises(BatchApiError) as too_large:
        api.upload("big.jsonl", big)
    batch = api.create(api.upload("four.jsonl", four), metadata={})
    clock.advance(1)
    failed = api.retrieve(batch.id)

    assert too_large.value.status == 400 and "too large" in str(too_large.value)
    assert API_KEY not in str(too_large.value) + repr(too_large.value.__dict__)
    assert failed.status is BatchStatus.FAILED and failed.output_file_id is None
    assert failed.errors and failed.errors[0].startswith("too_many_tasks: ")
    assert provider.stats.batches == {"failed": 1}


def test_an_invalid_file_fails_the_batch_naming_each_line(simulator, clock):
    _, api = simulator()
    content, _ = request_file(2)
    first = content.split(b"\n")[0]
    other_model = first.replace(b'"model":"gpt-sim"', b'"model":"gpt-other"').replace(b":1:7", b":2:7")
    bad = b"\n".join([first, first, b"{oops", other_model]) + b"\n"

    batch = api.create(api.upload("bad.jsonl", bad), metadata={})
    clock.advance(1)
    failed = api.retrieve(batch.id)

    assert failed.status is BatchStatus.FAILED
    codes = [error.split(":")[0] for error in failed.errors]
    assert codes == ["duplicate_custom_id", "invalid_json_line", "model_mismatch"]
    assert "(line 2)" in failed.errors[0]


def test_a_create_over_the_enqueued_token_limit_fails_and_the_peak_is_reported(simulator, clock):
    provider, api = simulator(completion_seconds=60)
    content, _ = request_file(3)
    file_id = api.upload("b.jsonl", content)
    first = api.create(file_id, metadata={})
    one_batch = provider.stats.peak_enqueued_tokens[MODEL]
    provider.configure_batches(enqueued_token_limit={MODEL: one_batch + one_batch // 2})

    second = api.create(file_id, metadata={})
    clock.advance(1)
    refused = api.retrieve(second.id)
    clock.advance(60)  # the first completes and leaves the queue
    third = api.create(file_id, metadata={})
    clock.advance(1)

    assert refused.status is BatchStatus.FAILED
    assert refused.errors[0].startswith("token_limit_exceeded: Enqueued token limit reached for gpt-sim")
    assert api.retrieve(first.id).status is BatchStatus.COMPLETED
    assert api.retrieve(third.id).status is BatchStatus.IN_PROGRESS
    assert provider.stats.peak_enqueued_tokens[MODEL] == one_batch


def test_batches_are_configured_from_another_process_over_http(simulator, clock):
    provider, api = simulator()
    admin = provider.base_url.removesuffix("/v1") + "/_simulator/batches"
    body = {"settings": {"completion_seconds": 10}, "line_fault": "503", "count": 2}
    request = urllib.request.Request(
        admin, json.dumps(body).encode(), {"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(request, timeout=PATIENCE_SECONDS) as response:
        answer = json.loads(response.read())
    assert answer["settings"]["completion_seconds"] == 10 and answer["line_faults"] == ["503", "503"]
    content, _ = request_file(3)

    batch = api.create(api.upload("b.jsonl", content), metadata={})
    clock.advance(10)
    done = api.retrieve(batch.id)

    assert (done.status, done.completed, done.failed) == (BatchStatus.COMPLETED, 1, 2)
    stats_url = provider.base_url.removesuffix("/v1") + "/_simulator/stats"
    with urllib.request.urlopen(stats_url, timeout=PATIENCE_SECONDS) as response:
        stats = json.loads(response.read())
    assert stats["batches"] == {"completed": 1} and stats["batch_lines_failed"] == 2


def test_the_adapter_refuses_a_client_that_retries_by_itself():
    client = OpenAI(base_url="http://127.0.0.1:9/v1", api_key="sim", max_retries=2)
    try:
        with pytest.raises(ValueError, match="max_retries=0"):
            OpenAIBatchApi(client)
    finally:
        client.close()


def test_an_unreachable_provider_is_a_batch_api_error_without_status(clock):
    client = OpenAI(base_url="http://127.0.0.1:9/v1", api_key="sk-secret-key", max_retries=0, timeout=5)
    try:
        with pytest.raises(BatchApiError) as unreachable:
            OpenAIBatchApi(client, clock).retrieve("batch_1")
    finally:
        client.close()
    assert unreachable.value.status is None
    assert unreachable.value.__cause__ is None and unreachable.value.__suppress_context__
    assert "sk-secret-key" not in repr(unreachable.value.__dict__) + str(unreachable.value)
