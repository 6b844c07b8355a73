"""Executing jobs against the simulated provider over real HTTP: faults end in the right state with the
right attempt history, a worker killed after the provider answered loses nothing and duplicates nothing,
a prompt injection is extracted as data, and every structured-output mode of a provider pool runs a job
through, with a prompt-only model's dressed answer retried and a refused format named in the job's error."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import subprocess
import sys
from dataclasses import replace
from datetime import timedelta

import boto3
import openai
import psycopg
import pytest

from tests.integration.test_execution import claim, make_deps, rows
from tests.support import job_row
from tollgate.core.clock import FakeClock, SystemClock, new_id
from tollgate.core.metrics import RecordedMetrics
from tollgate.core.retry import RetryPolicy
from tollgate.execution.attempt import AttemptEnd, run_attempt
from tollgate.execution.limiter import Denied, Reservation
from tollgate.execution.limiter.local import InProcessLimiter
from tollgate.execution.llm.client import OpenAIExtractor
from tollgate.execution.llm.output import StructuredOutput
from tollgate.jobtypes.registry import JOB_TYPES
from tollgate.scheduler.tick import SchedulerDeps, run_scheduler
from tollgate.tenants.suppliers import add_supplier
from tollgate_dev.local.aws import create_job_type_queues, queue_urls
from tollgate_dev.local.runtime import LOCAL_BUCKET
from tollgate_dev.samples import INJECTION, SUPPLIERS, generate_invoices, request_body
from tollgate_dev.simulator.server import Fault, SimulatedProvider, SimulatorConfig

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def provider():
    with SimulatedProvider(SimulatorConfig(requests_per_minute=None, tokens_per_minute=None)) as simulator:
        yield simulator


@pytest.fixture
def simulator(provider):
    provider.clear_faults()
    yield provider
    provider.release_held()


@pytest.fixture
def known_tenant(make_tenant, system_db, clean_db):
    currencies = sorted({s.currency for s in SUPPLIERS})
    tenant = make_tenant("known-suppliers")
    with psycopg.connect(clean_db) as conn:
        conn.execute(
            "UPDATE tenants SET allowed_currencies = %s WHERE tenant_id = %s", (currencies, tenant.tenant_id)
        )
    for supplier in SUPPLIERS:
        add_supplier(system_db, tenant.tenant_id, supplier.name, supplier.iban, new_id)
    return tenant


# The attempt timeout for provider calls expected to answer: roomy, so a loaded machine does not turn an
# answer into a timeout. The timeout fault's test shortens it only for the attempt meant to time out.
ANSWER_TIMEOUT_SECONDS = 60.0
TIMED_OUT_SECONDS = 1.0


def over_http(
    system_db,
    simulator,
    clock=None,
    timeout_seconds=ANSWER_TIMEOUT_SECONDS,
    mode=StructuredOutput.JSON_SCHEMA,
    **overrides,
):
    clock = clock or SystemClock()
    client = openai.AsyncOpenAI(base_url=simulator.base_url, api_key="simulated", max_retries=0)
    return make_deps(
        system_db,
        OpenAIExtractor(client, clock, mode),
        clock=clock,
        retry_policy=RetryPolicy(base_seconds=2, cap_seconds=60, attempt_timeout_seconds=timeout_seconds),
        **overrides,
    )


def attempts(deps, job_id, count, clock=None, advance=600.0, later=None):
    """Runs ``count`` claim-and-attempt rounds in one event loop (the async HTTP client lives in it);
    returns each round's report and the job row right after it. ``later``, if given, runs the rounds after
    the first (the same client, another retry policy)."""

    async def rounds():
        results = []
        for index in range(count):
            this = deps if index == 0 or later is None else later
            report = await run_attempt(this, claim(this))
            results.append((report, job_row(deps.db.pool.conninfo, job_id)))
            if clock is not None:
                clock.advance(advance)
        return results

    return asyncio.run(rounds())


def submit_sample(tenant, kind="clean", seed=1):
    [invoice] = generate_invoices(1, seed=seed, kinds=[kind])
    return tenant.client.submit(request_body(invoice), secrets.token_hex(6)).json["job_id"], invoice


def test_a_clean_invoice_is_extracted_validated_and_recorded(known_tenant, system_db, simulator, clean_db):
    _, invoice = submit_sample(known_tenant)
    deps = over_http(system_db, simulator)

    report = asyncio.run(run_attempt(deps, claim(deps)))

    assert report.end is AttemptEnd.SUCCEEDED, report.reasons
    [(tokens_in, request_id)] = rows(clean_db, "SELECT input_tokens, provider_request_id FROM job_attempts")
    assert tokens_in > 0 and request_id
    [(total,)] = rows(clean_db, "SELECT result->>'total' FROM extraction_results")
    assert total == f"{invoice.total:.2f}"


def test_the_prompt_injection_invoice_is_extracted_as_data(known_tenant, system_db, simulator, clean_db):
    _, invoice = submit_sample(known_tenant, kind=INJECTION, seed=3)
    assert invoice.has_injection
    deps = over_http(system_db, simulator)

    report = asyncio.run(run_attempt(deps, claim(deps)))

    assert report.end is AttemptEnd.SUCCEEDED, report.reasons
    [(total,)] = rows(clean_db, "SELECT result->>'total' FROM extraction_results")
    assert total == f"{invoice.total:.2f}", "the printed total, not the one the injected line asks for"


@pytest.mark.parametrize(
    ("fault", "outcome"),
    [
        (Fault.RATE_LIMIT, "throttled"),
        (Fault.MALFORMED_JSON, "invalid_output"),
        (Fault.WRONG_SCHEMA, "invalid_output"),
        (Fault.SERVER_ERROR, "transient"),
        (Fault.TIMEOUT, "timeout"),
    ],
)
def test_a_provider_fault_schedules_a_retry_that_then_succeeds(
    known_tenant, system_db, simulator, clean_db, fault, outcome
):
    job_id, _ = submit_sample(known_tenant)
    clock = FakeClock(SystemClock().now())
    simulator.queue_fault(fault)
    if fault is Fault.TIMEOUT:  # only the first attempt, the held one, is meant to time out
        deps = over_http(system_db, simulator, clock, timeout_seconds=TIMED_OUT_SECONDS)
        later = replace(
            deps, retry_policy=replace(deps.retry_policy, attempt_timeout_seconds=ANSWER_TIMEOUT_SECONDS)
        )
    else:
        deps, later = over_http(system_db, simulator, clock), None

    started = clock.now()
    (first, after_first), (second, _) = attempts(deps, job_id, 2, clock, later=later)

    assert (first.end, second.end) == (AttemptEnd.RETRY_SCHEDULED, AttemptEnd.SUCCEEDED)
    history = rows(clean_db, "SELECT attempt, outcome FROM job_attempts ORDER BY attempt")
    assert history == [(1, outcome), (2, "ok")]
    if fault is Fault.RATE_LIMIT:  # the provider's Retry-After (2 s here) is a floor under the backoff
        assert after_first["next_attempt_at"] >= started + timedelta(seconds=2)
    assert rows(clean_db, "SELECT count(*) FROM extraction_results") == [(1,)]


def test_a_429_storm_exhausts_the_attempts_and_fails_with_the_history(
    known_tenant, system_db, simulator, clean_db
):
    job_id, _ = submit_sample(known_tenant)
    clock = FakeClock(SystemClock().now())
    simulator.queue_fault(Fault.RATE_LIMIT, count=5)
    deps = over_http(system_db, simulator, clock)

    ends = [report.end for report, _ in attempts(deps, job_id, 5, clock)]

    assert ends[-1] is AttemptEnd.FAILED_TERMINAL and set(ends[:-1]) == {AttemptEnd.RETRY_SCHEDULED}
    assert rows(clean_db, "SELECT DISTINCT outcome FROM job_attempts") == [("throttled",)]
    assert job_row(clean_db, job_id)["last_error"]["reason"] == "attempts_exhausted"
    assert deps.metrics.counts == {"ProviderCalls": 5, "ProviderThrottled": 5}


def test_an_arithmetic_mistake_goes_to_review(known_tenant, system_db, simulator, clean_db):
    submit_sample(known_tenant)
    simulator.queue_fault(Fault.ARITHMETIC)
    deps = over_http(system_db, simulator)

    report = asyncio.run(run_attempt(deps, claim(deps)))

    assert report.end is AttemptEnd.REVIEW_REQUIRED
    assert "line_amount_mismatch" in [r["code"] for r in report.reasons]


def test_a_worker_killed_after_the_provider_answered_is_retried_and_ends_with_one_result(
    known_tenant, system_db, simulator, clean_db, local_aws
):
    job_id, _ = submit_sample(known_tenant)
    all_queues = create_job_type_queues(f"crash-{secrets.token_hex(4)}")
    env = {
        **os.environ,
        "DATABASE_URL": clean_db,
        "JOB_QUEUE_URLS": json.dumps(queue_urls(all_queues)),
        "DOCUMENTS_BUCKET": LOCAL_BUCKET,
        "OPENAI_BASE_URL": simulator.base_url,
        "OPENAI_API_KEY": "simulated",
        "CRASHPOINTS": json.dumps(["after_provider_response"]),
        "EXECUTION_SLOTS": "1",
        "INGRESS_WAIT_SECONDS": "0",
        "CLAIM_IDLE_SECONDS": "0.2",
    }
    completions_before = simulator.stats.completions

    worker = subprocess.run(
        [sys.executable, "-m", "tollgate_dev.worker"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert worker.returncode == 137, worker.stderr[-2000:]
    assert simulator.stats.completions == completions_before + 1, "the provider answered before the crash"
    assert job_row(clean_db, job_id)["state"] == "RUNNING"
    assert rows(clean_db, "SELECT count(*) FROM extraction_results") == [(0,)]

    clock = FakeClock(SystemClock().now() + timedelta(seconds=61))  # the dead worker's lease runs out
    run_scheduler(SchedulerDeps(system_db, clock, new_id, RecordedMetrics(), RetryPolicy(), lambda lo, hi: 0))
    deps = over_http(system_db, simulator, clock)
    report = asyncio.run(run_attempt(deps, claim(deps)))

    assert report.end is AttemptEnd.SUCCEEDED
    assert rows(clean_db, "SELECT count(*) FROM extraction_results") == [(1,)]
    assert rows(
        clean_db, "SELECT count(*) FROM outbox_events WHERE event_type = 'extraction.completed.v1'"
    ) == [(1,)]
    assert rows(clean_db, "SELECT attempt, outcome FROM job_attempts ORDER BY attempt") == [
        (1, "lease_expired"),
        (2, "ok"),
    ]


def test_a_worker_killed_between_the_inbox_commit_and_the_sqs_delete_records_the_event_once(
    known_tenant, system_db, simulator, clean_db, local_aws
):
    from tollgate.ingress.consumer import IngressDeps, IngressOutcome, ingest_once
    from tollgate.outbox.relay import RelayDeps, relay_outbox
    from tollgate.outbox.sqs import SqsFifoPublisher

    all_queues = create_job_type_queues(f"crash-delete-{secrets.token_hex(4)}")
    queues = all_queues["invoice_extraction"]
    sqs = boto3.client("sqs")
    # A message not deleted comes back as soon as the crashed worker's receive lapses: here, at once.
    sqs.set_queue_attributes(QueueUrl=queues.url, Attributes={"VisibilityTimeout": "0"})
    submit_sample(known_tenant)
    publisher = SqsFifoPublisher(boto3.client("sqs"), queues.url)
    relay_outbox(RelayDeps(db=system_db, clock=SystemClock(), routes={"extraction.requested.v1": publisher}))
    env = {
        **os.environ,
        "DATABASE_URL": clean_db,
        "JOB_QUEUE_URLS": json.dumps(queue_urls(all_queues)),
        "DOCUMENTS_BUCKET": LOCAL_BUCKET,
        "OPENAI_BASE_URL": simulator.base_url,
        "OPENAI_API_KEY": "simulated",
        "CRASHPOINTS": json.dumps(["before_sqs_delete"]),
        "EXECUTION_SLOTS": "1",
        "INGRESS_WAIT_SECONDS": "0",
        "CLAIM_IDLE_SECONDS": "0.2",
    }

    worker = subprocess.run(
        [sys.executable, "-m", "tollgate_dev.worker"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert worker.returncode == 137, worker.stderr[-2000:]
    assert rows(clean_db, "SELECT count(*) FROM execution_inbox") == [(1,)], "committed before the crash"
    again = ingest_once(IngressDeps(system_db, sqs, queues.url, SystemClock(), wait_seconds=0))

    assert again.outcomes[IngressOutcome.DUPLICATE] == 1
    assert rows(clean_db, "SELECT count(*) FROM execution_inbox") == [(1,)]


# -- the provider pool's structured-output capability ---------------------------------------------------

# What the simulator sees of each mode's request: its response_format type ("none" without one).
SENT_FORMAT = {
    StructuredOutput.JSON_SCHEMA: "json_schema",
    StructuredOutput.JSON_OBJECT: "json_object",
    StructuredOutput.PROMPT: "none",
}


def formats_sent(simulator, before):
    after = simulator.stats.response_formats
    return {kind: after[kind] - before.get(kind, 0) for kind in after if after[kind] != before.get(kind, 0)}


@pytest.mark.parametrize("mode", list(StructuredOutput))
def test_a_job_succeeds_in_every_structured_output_mode(known_tenant, system_db, simulator, clean_db, mode):
    job_id, invoice = submit_sample(known_tenant)
    deps = over_http(system_db, simulator, mode=mode)
    before = simulator.stats.response_formats

    report = asyncio.run(run_attempt(deps, claim(deps)))

    assert report.end is AttemptEnd.SUCCEEDED, report.reasons
    assert formats_sent(simulator, before) == {SENT_FORMAT[mode]: 1}
    assert job_row(clean_db, job_id)["state"] == "SUCCEEDED"
    [(total,)] = rows(clean_db, "SELECT result->>'total' FROM extraction_results")
    assert total == f"{invoice.total:.2f}"


@pytest.mark.parametrize(
    ("habit", "named"),
    [
        (Fault.CODE_FENCE, "wrapped in a code fence"),
        (Fault.LEADING_PROSE, "text before the JSON object"),
        (Fault.TRAILING_PROSE, "text after the JSON object"),
    ],
)
def test_in_prompt_mode_a_dressed_answer_is_invalid_output_and_the_retry_succeeds(
    known_tenant, system_db, simulator, clean_db, habit, named
):
    job_id, _ = submit_sample(known_tenant)
    clock = FakeClock(SystemClock().now())
    simulator.queue_fault(habit)
    deps = over_http(system_db, simulator, clock, mode=StructuredOutput.PROMPT)

    (first, after_first), (second, after_second) = attempts(deps, job_id, 2, clock)

    assert (first.end, second.end) == (AttemptEnd.RETRY_SCHEDULED, AttemptEnd.SUCCEEDED)
    assert after_first["last_error"]["outcome"] == "invalid_output"
    assert named in after_first["last_error"]["detail"]
    assert after_second["state"] == "SUCCEEDED"
    assert rows(clean_db, "SELECT attempt, outcome FROM job_attempts ORDER BY attempt") == [
        (1, "invalid_output"),
        (2, "ok"),
    ]
    assert rows(clean_db, "SELECT count(*) FROM extraction_results") == [(1,)]


def llama_cpp_like():
    """A server that takes json_object with a schema, and refuses OpenAI's json_schema."""
    return SimulatedProvider(
        SimulatorConfig(
            requests_per_minute=None, tokens_per_minute=None, supported_formats=frozenset({"json_object"})
        )
    )


def test_a_pool_set_to_a_format_its_provider_refuses_pauses_with_the_format_named_in_the_job_error(
    known_tenant, system_db, clean_db
):
    job_id, _ = submit_sample(known_tenant)
    clock = FakeClock(SystemClock().now())
    limiter = InProcessLimiter(clock, requests_per_minute=1000, tokens_per_minute=10**8, max_in_flight=10)
    with llama_cpp_like() as server:
        deps = over_http(system_db, server, clock, mode=StructuredOutput.JSON_SCHEMA, limiter=limiter)

        [(report, job)] = attempts(deps, job_id, 1)

        assert server.stats.unsupported_formats == 1
    assert report.end is AttemptEnd.RETRY_SCHEDULED, "the pool's configuration is not the job's fault"
    error = job["last_error"]
    assert error["outcome"] == "provider_format_unsupported"
    assert "PROVIDER_STRUCTURED_OUTPUT=json_schema" in error["detail"]
    assert "'response_format' of type 'json_schema' is not supported" in error["detail"]
    paused = limiter.try_acquire(Reservation("test", 100))
    assert isinstance(paused, Denied) and paused.reason == "cooldown", "every worker of the pool waits"


def test_a_job_the_misconfigured_pool_never_served_fails_after_its_attempts_with_the_format_named(
    known_tenant, system_db, clean_db
):
    job_id, _ = submit_sample(known_tenant)
    clock = FakeClock(SystemClock().now())
    limiter = InProcessLimiter(clock, requests_per_minute=1000, tokens_per_minute=10**8, max_in_flight=10)
    with llama_cpp_like() as server:
        deps = over_http(system_db, server, clock, mode=StructuredOutput.JSON_SCHEMA, limiter=limiter)

        results = attempts(deps, job_id, 5, clock)

    ends = [report.end for report, _ in results]
    assert ends == [AttemptEnd.RETRY_SCHEDULED] * 4 + [AttemptEnd.FAILED_TERMINAL]
    error = results[-1][1]["last_error"]
    assert error["reason"] == "attempts_exhausted"
    assert error["outcome"] == "provider_format_unsupported"
    assert "PROVIDER_STRUCTURED_OUTPUT=json_schema" in error["detail"]


def test_the_same_server_serves_a_pool_set_to_json_object(known_tenant, system_db, clean_db):
    job_id, _ = submit_sample(known_tenant)
    with llama_cpp_like() as server:
        deps = over_http(system_db, server, mode=StructuredOutput.JSON_OBJECT)

        report = asyncio.run(run_attempt(deps, claim(deps)))

        assert server.stats.response_formats == {"json_object": 1}
    assert report.end is AttemptEnd.SUCCEEDED, report.reasons
    assert job_row(clean_db, job_id)["state"] == "SUCCEEDED"


def test_the_workers_build_passes_the_pools_setting_to_the_client(
    known_tenant, system_db, simulator, clean_db
):
    from tollgate.settings import WorkerSettings
    from tollgate.wiring import build_execution

    job_id, _ = submit_sample(known_tenant)
    settings = WorkerSettings(
        database_url="postgresql://unused",
        job_queue_urls={name: "unused" for name in JOB_TYPES},
        documents_bucket=LOCAL_BUCKET,
        openai_base_url=simulator.base_url,
        openai_api_key="simulated",
        provider_structured_output="prompt",
        deployed_stage=None,
        limiter_table=None,
        relay_function_name=None,
    )
    limiter = InProcessLimiter(
        SystemClock(), requests_per_minute=1000, tokens_per_minute=10**8, max_in_flight=10
    )
    deps = build_execution(settings, system_db, limiter=limiter)
    before = simulator.stats.response_formats

    report = asyncio.run(run_attempt(deps, claim(deps)))

    assert report.end is AttemptEnd.SUCCEEDED, report.reasons
    assert formats_sent(simulator, before) == {"none": 1}, "prompt mode: no response_format"
    assert job_row(clean_db, job_id)["state"] == "SUCCEEDED"
