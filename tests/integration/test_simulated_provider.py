"""The simulated provider over real HTTP on 127.0.0.1, driven by the openai SDK as the worker drives OpenAI:
wire format, quotas answered with 429 and Retry-After, and each fault as the SDK surfaces it. Rate windows
run on a fake clock; nothing here sleeps to wait for something."""

from __future__ import annotations

import json
import math
import random
import re
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal

import openai
import pytest
from openai import OpenAI
from pydantic import ValidationError

from tollgate.core.clock import FakeClock
from tollgate.jobtypes.invoice_extraction.prompt import build_messages
from tollgate.jobtypes.invoice_extraction.schema import Invoice, response_format
from tollgate_dev.samples import expected_invoice, generate_invoice
from tollgate_dev.simulator.server import (
    Latency,
    SimulatedProvider,
    SimulatorConfig,
    estimate_tokens,
    openai_duration,
    prompt_text,
)

pytestmark = pytest.mark.integration

SAMPLE = generate_invoice(random.Random(21), 21, "clean")
MESSAGES = build_messages(SAMPLE.pages)
PROMPT_TOKENS = estimate_tokens(prompt_text(MESSAGES))
DURATION = re.compile(r"^(\d+h)?(\d+m)?(\d+(\.\d+)?s|\d+ms)$")
# How long a call or wait that should succeed may take on a loaded machine; it only runs out when a test
# is failing. Short client timeouts that a test expects to fire stay short where they are.
PATIENCE_SECONDS = 60.0
# stop() must end a held request rather than let it run out its hold (SimulatorConfig.timeout_hold_seconds,
# 600 s); anything well under that shows it did, however loaded the machine.
PROMPT_STOP_SECONDS = 60.0


@pytest.fixture
def clock():
    return FakeClock()


@pytest.fixture
def simulator(clock):
    """Starts a provider (fake clock, no latency) and an SDK client for it; stops both afterwards."""
    running: list[tuple[SimulatedProvider, OpenAI]] = []

    def start(**overrides):
        settings = {"requests_per_minute": 100, "tokens_per_minute": 1_000_000, "max_concurrency": 8}
        provider = SimulatedProvider(SimulatorConfig(**{**settings, **overrides}), clock=clock)
        client = OpenAI(base_url=provider.start(), api_key="sim", max_retries=0, timeout=PATIENCE_SECONDS)
        running.append((provider, client))
        return provider, client

    yield start
    for provider, client in running:
        client.close()
        provider.stop()


def complete(client: OpenAI, max_completion_tokens: int = 2000, **options):
    return client.chat.completions.create(
        model="gpt-sim",
        messages=MESSAGES,
        max_completion_tokens=max_completion_tokens,
        **{"response_format": response_format(), **options},
    )


def test_a_completion_parses_into_the_invoice_schema_and_carries_usage_and_request_id(simulator):
    provider, client = simulator()
    raw = client.chat.completions.with_raw_response.create(
        model="gpt-sim", messages=MESSAGES, response_format=response_format(), max_completion_tokens=2000
    )
    completion = raw.parse()

    assert completion.object == "chat.completion"
    assert completion.model == "gpt-sim"
    assert completion.id.startswith("chatcmpl-")
    assert completion.choices[0].finish_reason == "stop"
    assert Invoice.model_validate_json(completion.choices[0].message.content) == expected_invoice(SAMPLE)
    usage = completion.usage
    assert usage.prompt_tokens == PROMPT_TOKENS == math.ceil(len(prompt_text(MESSAGES)) / 4)
    assert usage.completion_tokens == math.ceil(len(completion.choices[0].message.content) / 4)
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    assert raw.headers["x-request-id"].startswith("req_")
    assert completion._request_id == raw.headers["x-request-id"]
    assert raw.headers["x-ratelimit-limit-requests"] == "100"
    assert raw.headers["x-ratelimit-remaining-requests"] == "99"
    assert raw.headers["x-ratelimit-limit-tokens"] == "1000000"
    assert raw.headers["x-ratelimit-remaining-tokens"] == str(1_000_000 - PROMPT_TOKENS - 2000)
    assert raw.headers["x-ratelimit-reset-requests"] == "600ms"  # one request back at 100/min
    assert DURATION.match(raw.headers["x-ratelimit-reset-tokens"])
    stats = provider.stats
    assert (stats.requests, stats.completions, stats.prompt_tokens) == (1, 1, PROMPT_TOKENS)


def test_past_the_requests_per_minute_quota_the_answer_is_429_with_retry_after(simulator, clock):
    provider, client = simulator(requests_per_minute=2)
    complete(client)
    complete(client)

    with pytest.raises(openai.RateLimitError) as refused:
        complete(client)

    headers = refused.value.response.headers
    assert headers["retry-after"] == "30"
    assert headers["retry-after-ms"] == "30000"
    assert headers["x-ratelimit-remaining-requests"] == "0"
    assert headers["x-ratelimit-reset-requests"] == "1m0s"
    assert refused.value.request_id == headers["x-request-id"]
    error = refused.value.body
    assert error["code"] == "rate_limit_exceeded"
    assert error["type"] == "requests"
    assert "Limit 2, Used 2" in error["message"]
    clock.advance(30)
    assert complete(client).choices[0].finish_reason == "stop"
    assert provider.stats.rate_limited == 1


def test_the_tokens_per_minute_quota_reserves_the_prompt_and_the_max_tokens(simulator, clock):
    reserved = PROMPT_TOKENS + 2500
    _, client = simulator(tokens_per_minute=2 * reserved + 100)
    complete(client, max_completion_tokens=2500)
    raw = client.chat.completions.with_raw_response.create(
        model="gpt-sim", messages=MESSAGES, response_format=response_format(), max_completion_tokens=2500
    )
    assert raw.headers["x-ratelimit-remaining-tokens"] == "100"

    with pytest.raises(openai.RateLimitError) as refused:
        complete(client, max_completion_tokens=2500)

    assert refused.value.body["type"] == "tokens"
    wait_ms = int(refused.value.response.headers["retry-after-ms"])
    assert wait_ms == math.ceil((reserved - 100) / ((2 * reserved + 100) / 60) * 1000)
    clock.advance(wait_ms / 1000)
    complete(client, max_completion_tokens=2500)


def test_a_request_larger_than_the_whole_token_quota_is_refused_without_a_retry_after(simulator):
    _, client = simulator(tokens_per_minute=1000)
    with pytest.raises(openai.RateLimitError) as refused:
        complete(client, max_completion_tokens=5000)
    assert "Request too large" in refused.value.body["message"]
    assert "retry-after" not in refused.value.response.headers


def test_past_the_concurrency_limit_the_answer_is_429(simulator):
    provider, client = simulator(max_concurrency=1)
    provider.queue_fault("timeout")  # holds the first request in flight until released
    with ThreadPoolExecutor(1) as pool:
        first = pool.submit(complete, client)
        assert provider.wait_for(lambda stats: stats.in_flight == 1, timeout=PATIENCE_SECONDS), (
            "the first request never arrived to be held"
        )

        with pytest.raises(openai.RateLimitError) as refused:
            complete(client)

        assert refused.value.response.headers["retry-after"] == "1"
        assert "concurrent" in refused.value.body["message"]
        provider.release_held()
        assert first.result(timeout=PATIENCE_SECONDS).choices[0].finish_reason == "stop"
    assert provider.stats.max_concurrency == 1


def test_a_timeout_fault_outlasts_the_client_timeout_and_stop_ends_it(simulator):
    provider, client = simulator()
    provider.queue_fault("timeout")

    with pytest.raises(openai.APITimeoutError):
        complete(client, timeout=0.2)

    assert provider.stats.in_flight == 1  # still held on the provider's side
    assert complete(client).choices[0].finish_reason == "stop"  # only the queued request was held
    started = time.monotonic()
    provider.stop()
    assert time.monotonic() - started < PROMPT_STOP_SECONDS, "stop() waited for the held request's hold"
    assert provider.stats.in_flight == 0


def test_malformed_json_fault_sends_content_that_is_not_json(simulator):
    provider, client = simulator()
    provider.queue_fault("malformed_json")
    content = complete(client).choices[0].message.content
    with pytest.raises(json.JSONDecodeError):
        json.loads(content)
    with pytest.raises(ValidationError):
        Invoice.model_validate_json(content)


def test_wrong_schema_fault_sends_valid_json_that_fails_the_schema(simulator):
    provider, client = simulator()
    provider.queue_fault("wrong_schema")
    content = complete(client).choices[0].message.content
    assert isinstance(json.loads(content), dict)
    with pytest.raises(ValidationError):
        Invoice.model_validate_json(content)


@pytest.mark.parametrize(("fault", "statuses"), [("500", {500}), ("503", {503}), ("5xx", {500, 503})])
def test_server_error_faults_raise_internal_server_error(simulator, fault, statuses):
    provider, client = simulator()
    provider.queue_fault(fault)
    with pytest.raises(openai.InternalServerError) as failed:
        complete(client)
    assert failed.value.status_code in statuses
    assert failed.value.body["type"] == "server_error"
    assert failed.value.request_id.startswith("req_")
    assert provider.stats.server_errors == 1


def test_a_429_storm_refuses_the_queued_requests_with_retry_after(simulator):
    provider, client = simulator(storm_retry_after_seconds=2.5)
    provider.queue_fault("429", count=3)
    for _ in range(3):
        with pytest.raises(openai.RateLimitError) as refused:
            complete(client)
        assert refused.value.response.headers["retry-after"] == "3"
        assert refused.value.response.headers["retry-after-ms"] == "2500"
    assert complete(client).choices[0].finish_reason == "stop"
    assert provider.stats.faults == {"429": 3}
    assert provider.stats.rate_limited == 3


def test_an_arithmetic_fault_answers_a_wrong_line_amount(simulator):
    provider, client = simulator()
    provider.queue_fault("arithmetic")
    extracted = Invoice.model_validate_json(complete(client).choices[0].message.content)
    lines = extracted.line_items
    assert any(Decimal(line.quantity) * Decimal(line.unit_price) != Decimal(line.amount) for line in lines)
    assert extracted != expected_invoice(SAMPLE)


def test_faults_can_be_queued_from_another_process_through_the_admin_endpoint(simulator):
    provider, client = simulator()
    root = provider.base_url.removesuffix("/v1")
    request = urllib.request.Request(
        f"{root}/_simulator/faults",
        data=json.dumps({"fault": "wrong_schema", "count": 2}).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=PATIENCE_SECONDS) as response:
        assert json.load(response) == {"queued": ["wrong_schema", "wrong_schema"]}
    for _ in range(2):
        with pytest.raises(ValidationError):
            Invoice.model_validate_json(complete(client).choices[0].message.content)
    with urllib.request.urlopen(f"{root}/_simulator/stats", timeout=PATIENCE_SECONDS) as response:
        assert json.load(response)["faults"] == {"wrong_schema": 2}


def test_fault_probabilities_and_ids_are_reproducible_from_the_seed(simulator):
    def outcomes():
        _, client = simulator(fault_rates={"malformed_json": 0.4, "500": 0.2}, seed=5)
        seen = []
        for _ in range(12):
            try:
                content = complete(client).choices[0].message.content
                seen.append("ok" if content.endswith("}") else "malformed")
            except openai.InternalServerError as error:
                seen.append(error.request_id)
        return seen

    first = outcomes()
    assert first == outcomes()
    assert "ok" in first
    assert "malformed" in first


def test_a_request_without_an_api_key_is_refused(simulator):
    provider, _ = simulator()
    request = urllib.request.Request(
        f"{provider.base_url}/chat/completions",
        data=json.dumps({"model": "gpt-sim", "messages": MESSAGES}).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=PATIENCE_SECONDS)
    assert refused.value.code == 401
    assert json.load(refused.value)["error"]["type"] == "invalid_request_error"
    assert provider.stats.requests == 0


def test_a_completion_longer_than_max_tokens_is_cut_off_with_finish_reason_length(simulator):
    _, client = simulator()
    completion = complete(client, max_completion_tokens=20)
    assert completion.choices[0].finish_reason == "length"
    assert completion.usage.completion_tokens == 20
    assert len(completion.choices[0].message.content) == 80


def test_latency_is_lognormal_around_its_mean_and_reproducible():
    latency = Latency(mean_seconds=0.4, sigma=0.6)
    draws = [latency.sample(random.Random(3)) for _ in range(2)]
    assert draws[0] == draws[1]
    rng = random.Random(1)
    samples = [latency.sample(rng) for _ in range(4000)]
    assert 0.36 < sum(samples) / len(samples) < 0.44
    assert Latency().sample(rng) == 0


def test_durations_use_openais_reset_header_format():
    assert openai_duration(0.02) == "20ms"
    assert openai_duration(1) == "1s"
    assert openai_duration(1.5) == "1.5s"
    assert openai_duration(360) == "6m0s"
    assert openai_duration(3723) == "1h2m3s"
    assert openai_duration(0) == "0s"


def test_stop_returns_promptly_with_idle_keep_alive_connections_open(simulator):
    provider, client = simulator()
    complete(client)  # leaves a pooled keep-alive connection to the provider
    done = threading.Event()
    threading.Thread(target=lambda: (provider.stop(), done.set()), daemon=True).start()
    assert done.wait(timeout=PROMPT_STOP_SECONDS), "stop() never returned with a keep-alive connection open"


# -- answering according to the request's response format -----------------------------------------------

JSON_OBJECT = {"type": "json_object", "schema": response_format()["json_schema"]["schema"]}


def prompt_only(client: OpenAI, **options):
    """A request without a response_format, as a prompt-only pool sends it."""
    return client.chat.completions.create(
        model="gpt-sim", messages=MESSAGES, max_completion_tokens=4000, **options
    )


def test_a_json_object_request_with_a_schema_gets_bare_json(simulator):
    provider, client = simulator()
    completion = complete(client, response_format=JSON_OBJECT)
    assert Invoice.model_validate_json(completion.choices[0].message.content) == expected_invoice(SAMPLE)
    assert provider.stats.response_formats == {"json_object": 1}


def test_a_request_without_a_format_gets_the_json_and_only_the_json_by_default(simulator):
    provider, client = simulator()
    content = prompt_only(client).choices[0].message.content
    assert content.startswith("{") and content.endswith("}")
    assert Invoice.model_validate_json(content) == expected_invoice(SAMPLE)
    assert provider.stats.response_formats == {"none": 1}


@pytest.mark.parametrize(
    ("habit", "check"),
    [
        ("code_fence", lambda text: text.startswith("```json\n") and text.endswith("\n```")),
        ("leading_prose", lambda text: text.startswith("Here is") and text.endswith("}")),
        ("trailing_prose", lambda text: text.startswith("{") and not text.endswith("}")),
    ],
)
def test_a_prompt_only_habit_can_be_queued_and_dresses_the_json(simulator, habit, check):
    provider, client = simulator()
    provider.queue_fault(habit)
    content = prompt_only(client).choices[0].message.content
    assert check(content)
    inner = content[content.index("{") : content.rindex("}") + 1]
    assert Invoice.model_validate_json(inner) == expected_invoice(SAMPLE), "the same answer, dressed"
    assert provider.stats.faults == {habit: 1}


def test_prompt_only_habits_are_drawn_for_unconstrained_requests_only(simulator):
    provider, client = simulator(prompt_only_rates={"code_fence": 1.0})
    assert complete(client).choices[0].message.content.startswith("{"), "json_schema: constrained"
    assert complete(client, response_format=JSON_OBJECT).choices[0].message.content.startswith("{")
    assert prompt_only(client).choices[0].message.content.startswith("```json")
    assert provider.stats.faults == {"code_fence": 1}


def test_prompt_only_habits_are_reproducible_from_the_seed(simulator):
    def dressed():
        _, client = simulator(prompt_only_rates={"code_fence": 0.3, "trailing_prose": 0.3}, seed=11)
        return [prompt_only(client).choices[0].message.content[:3] for _ in range(12)]

    first = dressed()
    assert first == dressed()
    assert {"```", "{\n "} <= set(first)


def test_a_server_that_takes_only_json_object_refuses_json_schema_with_a_400(simulator):
    provider, client = simulator(supported_formats=frozenset({"json_object"}))

    with pytest.raises(openai.BadRequestError) as refused:
        complete(client)

    assert refused.value.param == "response_format"
    assert "'json_schema' is not supported" in refused.value.message
    assert "json_object" in refused.value.message
    assert complete(client, response_format=JSON_OBJECT).choices[0].finish_reason == "stop"
    assert prompt_only(client).choices[0].finish_reason == "stop"
    stats = provider.stats
    assert (stats.unsupported_formats, stats.completions, stats.requests) == (1, 2, 2)


@pytest.mark.parametrize(
    "response_format",
    [{"type": "grammar"}, "json", {"type": "json_schema", "json_schema": {"name": "x"}}],
    ids=["unknown-type", "not-an-object", "json-schema-without-schema"],
)
def test_a_malformed_response_format_is_a_400_naming_it(simulator, response_format):
    provider, client = simulator()
    with pytest.raises(openai.BadRequestError) as refused:
        complete(client, response_format=response_format)
    assert refused.value.param.startswith("response_format")
    assert provider.stats.requests == 0


def test_a_simulator_configured_with_an_unknown_format_or_habit_refuses_to_start():
    with pytest.raises(ValueError, match="unknown response formats"):
        SimulatorConfig(supported_formats=frozenset({"json_object", "grammar"}))
    with pytest.raises(ValueError, match="not a prompt-only habit"):
        SimulatorConfig(prompt_only_rates={"wrong_schema": 0.5})
