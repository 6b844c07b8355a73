"""The webhook dispatcher end to end: the state machine definition the CDK deploys, executed by moto,
its attempt task running the project's attempt use case, delivering over HTTP on 127.0.0.1 to a receiver
written from the Standard Webhooks spec."""

from __future__ import annotations

import asyncio
import json
import secrets
import threading
from collections import deque
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from uuid import UUID

import boto3
import psycopg
import pytest

from tests.integration.test_execution import TEXT, ScriptedLlm, claim, make_deps, ok
from tests.support import invoice_request, valid_webhook
from tollgate.core.clock import FakeClock, SystemClock, new_id
from tollgate.core.metrics import RecordedMetrics
from tollgate.core.retry import RetryPolicy
from tollgate.delivery.attempts import AttemptDeps, attempt_delivery
from tollgate.delivery.deliveries import (
    NoDispatcher,
    ReplayDeps,
    StepFunctionsStarter,
    WebhookDispatcher,
    replay_delivery,
)
from tollgate.delivery.sender import WebhookSender
from tollgate.events import WEBHOOK_EVENT_TYPES
from tollgate.execution.attempt import run_attempt
from tollgate.outbox.relay import RelayDeps, relay_outbox
from tollgate.scheduler.tick import SchedulerDeps, run_scheduler
from tollgate.tenants.suppliers import add_supplier
from tollgate_dev.local.client import ApiClient
from tollgate_dev.local.stepfunctions import create_dispatcher, release_dispatcher
from tollgate_dev.receiver import WebhookReceiver

pytestmark = pytest.mark.integration

FINAL = {"DELIVERED", "FAILED", "ENDPOINT_DISABLED"}


class FlakyFront:
    """Answers the first requests with scripted statuses, then hands requests to the real receiver."""

    def __init__(self, receiver: WebhookReceiver, script: list[tuple[int, dict[str, str]]]) -> None:
        self.script = deque(script)
        self.receiver = receiver
        self.seen: list[str] = []
        self.bodies: list[bytes] = []  # every body sent, answered by the script or by the receiver
        front = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                headers = {k.lower(): v for k, v in self.headers.items()}
                front.seen.append(headers.get("webhook-id", ""))
                front.bodies.append(body)
                if front.script:
                    status, extra = front.script.popleft()
                    payload = b"{}"
                else:
                    reply = front.receiver.receive(self.path, headers, body)
                    status, extra, payload = reply.status, {}, json.dumps(reply.body).encode()
                self.send_response(status)
                for key, value in extra.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/hooks"

    def __enter__(self) -> FlakyFront:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


# How long a delivery's executions (moto's state machine, the attempts, PostgreSQL) may take to settle on a
# loaded machine; it runs out only when a test is failing.
SETTLE_SECONDS = 120.0


class Dispatcher:
    """The moto-executed dispatcher plus a way to wait for deliveries to settle without polling."""

    def __init__(self, system_db) -> None:
        self.changed = threading.Condition()
        self.deps = AttemptDeps(
            db=system_db,
            clock=SystemClock(),
            sender=WebhookSender(allow_private_targets=True),
            jitter=lambda low, high: 0.0,
            time_scale=0.0,  # the state machine's waits are compressed; recorded delays are the real ones
        )

        def attempt(payload):
            outcome = attempt_delivery(self.deps, UUID(payload["delivery_id"])).as_state_output()
            with self.changed:
                self.changed.notify_all()
            return outcome

        self.arn = create_dispatcher(attempt, suffix=f"-{secrets.token_hex(4)}")
        self.starter = StepFunctionsStarter(boto3.client("stepfunctions"), self.arn)

    def wait_until(self, predicate, timeout=SETTLE_SECONDS) -> bool:
        with self.changed:
            return self.changed.wait_for(predicate, timeout)


@pytest.fixture
def dispatcher(system_db, local_aws):
    dispatcher = Dispatcher(system_db)
    yield dispatcher
    release_dispatcher(dispatcher.arn)


@pytest.fixture
def secured_tenant(make_tenant, stack_factory, system_db):
    """A tenant on a stack that lets endpoints live on 127.0.0.1 (local development), with the supplier of
    the invoice its jobs extract on file: they succeed, and an ERP endpoint gets their completed event."""
    stack = stack_factory(webhooks_allow_private_targets=True)
    tenant = make_tenant("erp-owner", base_url=stack.api_url)
    add_supplier(system_db, tenant.tenant_id, "Nordwind Logistik GmbH", "DE89370400440532013000", new_id)
    return tenant, ApiClient(stack.api_url, tenant.api_key)


def finished_job(client, system_db) -> str:
    """A job run by a worker to its end; the worker writes its webhook event to the outbox."""
    job_id = client.submit(invoice_request(TEXT), secrets.token_hex(4)).json["job_id"]
    deps = make_deps(system_db, ScriptedLlm(ok()))
    asyncio.run(run_attempt(deps, claim(deps)))
    return job_id


def deliver(system_db, dispatcher, client, clean_db, front_script, receiver_secret_holder):
    endpoint = client.request(
        "POST", "/webhook-endpoints", json_body={"url": "http://127.0.0.1:9/placeholder"}
    )
    secret = endpoint.json["secret"]
    receiver = WebhookReceiver(secret).start()
    receiver_secret_holder.append(receiver)
    front = FlakyFront(receiver, front_script).__enter__()
    receiver_secret_holder.append(front)
    client.request(
        "PATCH", f"/webhook-endpoints/{endpoint.json['endpoint_id']}", json_body={"url": front.url}
    )
    finished_job(client, system_db)
    webhooks = WebhookDispatcher(system_db, dispatcher.starter)
    relay = RelayDeps(db=system_db, clock=SystemClock(), routes=dict.fromkeys(WEBHOOK_EVENT_TYPES, webhooks))
    relay_outbox(relay)
    return endpoint.json["endpoint_id"], receiver, front


def delivery(clean_db):
    with psycopg.connect(clean_db) as conn:
        return conn.execute(
            "SELECT delivery_id, state, attempts FROM webhook_deliveries ORDER BY created_at DESC LIMIT 1"
        ).fetchone()


def attempts(clean_db):
    with psycopg.connect(clean_db) as conn:
        return conn.execute(
            "SELECT attempt, status, next_delay_seconds FROM webhook_delivery_attempts ORDER BY attempt"
        ).fetchall()


@pytest.fixture
def cleanup():
    servers = []
    yield servers
    for server in servers:
        if isinstance(server, FlakyFront):
            server.__exit__()
        else:
            server.stop()
    # Every body any test here sent, retries and replays included, is what its committed schema says.
    for server in servers:
        bodies = server.bodies if isinstance(server, FlakyFront) else [r.body for r in server.accepted]
        for body in bodies:
            valid_webhook(body)


def settled(clean_db):
    return lambda: (row := delivery(clean_db)) is not None and row[1] in FINAL


def test_delivered_the_first_time_and_verified_by_the_receiver(
    secured_tenant, dispatcher, system_db, clean_db, cleanup
):
    _, client = secured_tenant
    _, receiver, _ = deliver(system_db, dispatcher, client, clean_db, [], cleanup)

    assert dispatcher.wait_until(settled(clean_db)), "the delivery never reached a final state"
    delivery_id, state, count = delivery(clean_db)
    assert (state, count) == ("DELIVERED", 1)
    [received] = receiver.accepted
    assert received.webhook_id == str(delivery_id)
    assert valid_webhook(received.body)["type"] in WEBHOOK_EVENT_TYPES
    # The webhook continues the trace the API request started, one hop further (a span of its own).
    with psycopg.connect(clean_db) as conn:
        (job_trace,) = conn.execute("SELECT trace_context FROM extraction_jobs").fetchone()
    sent = received.headers["traceparent"]
    assert sent.split("-")[1] == job_trace.split("-")[1] and sent != job_trace


def test_503_then_200_is_delivered_on_the_second_attempt(
    secured_tenant, dispatcher, system_db, clean_db, cleanup
):
    _, client = secured_tenant
    _, receiver, front = deliver(system_db, dispatcher, client, clean_db, [(503, {})], cleanup)

    assert dispatcher.wait_until(settled(clean_db)), "the delivery never reached a final state"
    assert delivery(clean_db)[1:] == ("DELIVERED", 2)
    assert len(receiver.accepted) == 1
    assert attempts(clean_db) == [(1, 503, 5), (2, 200, None)]
    assert len(set(front.seen)) == 1, "every attempt carries the same webhook-id"
    assert dispatcher.deps.metrics.counts == {"DeliveryAttemptsFailed": 1}


def test_429_with_retry_after_waits_at_least_that_long(
    secured_tenant, dispatcher, system_db, clean_db, cleanup
):
    _, client = secured_tenant
    deliver(system_db, dispatcher, client, clean_db, [(429, {"Retry-After": "120"})], cleanup)

    assert dispatcher.wait_until(settled(clean_db)), "the delivery never reached a final state"
    assert attempts(clean_db)[0] == (1, 429, 120)
    assert delivery(clean_db)[1] == "DELIVERED"


def test_410_disables_the_endpoint_and_stops(secured_tenant, dispatcher, system_db, clean_db, cleanup):
    _, client = secured_tenant
    endpoint_id, _, _ = deliver(system_db, dispatcher, client, clean_db, [(410, {})], cleanup)

    assert dispatcher.wait_until(settled(clean_db)), "the delivery never reached a final state"
    assert delivery(clean_db)[1:] == ("ENDPOINT_DISABLED", 1)
    endpoint = client.request("GET", f"/webhook-endpoints/{endpoint_id}").json
    assert (endpoint["enabled"], endpoint["disabled_reason"]) == (False, "the endpoint answered 410 Gone")
    assert dispatcher.deps.metrics.counts == {"DeliveryAttemptsFailed": 1, "EndpointsDisabled": 1}


def test_a_schedule_spent_on_failures_gives_up_records_it_and_counts_it(
    secured_tenant, dispatcher, system_db, clean_db, cleanup
):
    _, client = secured_tenant
    deliver(system_db, dispatcher, client, clean_db, [(503, {})] * 8, cleanup)

    assert dispatcher.wait_until(settled(clean_db)), "the delivery never reached a final state"
    assert delivery(clean_db)[1:] == ("FAILED", 8)
    assert [delay for _, _, delay in attempts(clean_db)] == [5, 300, 1800, 7200, 18000, 36000, 36000, None]
    assert dispatcher.deps.metrics.counts == {"DeliveryAttemptsFailed": 8, "DeliveriesGaveUp": 1}


def test_an_erp_down_for_two_simulated_hours_is_retried_on_schedule_without_re_extraction(
    secured_tenant, dispatcher, system_db, clean_db, cleanup
):
    _, client = secured_tenant
    down = [(503, {})] * 5  # attempts 1-5 fail; their waits add up to 5 s + 5 min + 30 min + 2 h
    deliver(system_db, dispatcher, client, clean_db, down, cleanup)

    assert dispatcher.wait_until(settled(clean_db)), "the delivery never reached a final state"
    history = attempts(clean_db)
    assert delivery(clean_db)[1:] == ("DELIVERED", 6)
    assert [delay for _, _, delay in history[:5]] == [5, 300, 1800, 7200, 18000]
    assert sum(delay for _, _, delay in history[:4]) >= 2 * 3600
    with psycopg.connect(clean_db) as conn:
        assert conn.execute("SELECT count(*) FROM job_attempts").fetchone()[0] == 1, "the job ran once, only"


def test_a_replay_resends_with_the_same_webhook_id_and_the_receiver_deduplicates(
    secured_tenant, dispatcher, system_db, clean_db, cleanup
):
    tenant, client = secured_tenant
    endpoint_id, receiver, front = deliver(system_db, dispatcher, client, clean_db, [], cleanup)
    assert dispatcher.wait_until(settled(clean_db)), "the delivery never reached a final state"
    delivery_id = delivery(clean_db)[0]

    replay_delivery(
        ReplayDeps(system_db, SystemClock(), dispatcher.starter),
        tenant.tenant_id,
        UUID(endpoint_id),
        delivery_id,
    )

    assert dispatcher.wait_until(lambda: len(front.seen) == 2 and delivery(clean_db)[1] in FINAL), (
        "the replay never reached the endpoint and settled"
    )
    assert front.seen == [str(delivery_id), str(delivery_id)]
    assert len(receiver.accepted) == 1 and receiver.duplicates == 1
    assert len(front.bodies) == 2 and front.bodies[0] == front.bodies[1], "a replay sends the same bytes"


def test_the_scheduler_restarts_a_delivery_no_execution_drives_and_leaves_live_ones_alone(
    secured_tenant, dispatcher, system_db, clean_db, cleanup
):
    _, client = secured_tenant
    endpoint = client.request("POST", "/webhook-endpoints", json_body={"url": "http://127.0.0.1:9/x"}).json
    receiver = WebhookReceiver(endpoint["secret"]).start()
    cleanup.append(receiver)
    client.request("PATCH", f"/webhook-endpoints/{endpoint['endpoint_id']}", json_body={"url": receiver.url})
    finished_job(client, system_db)
    # The delivery is recorded, but its execution never runs (as if it had ended during an outage).
    lost = WebhookDispatcher(system_db, NoDispatcher())
    relay_outbox(
        RelayDeps(db=system_db, clock=SystemClock(), routes=dict.fromkeys(WEBHOOK_EVENT_TYPES, lost))
    )
    now = SystemClock().now()

    def tick(at):
        metrics = RecordedMetrics()
        deps = SchedulerDeps(
            system_db,
            FakeClock(at),
            new_id,
            metrics,
            RetryPolicy(),
            lambda lo, hi: 0.0,
            deliveries=dispatcher.starter,
        )
        return run_scheduler(deps), metrics

    soon, _ = tick(now + timedelta(minutes=5))
    assert soon.deliveries_restarted == 0, "due only minutes ago: its execution may still be on its way"

    later, metrics = tick(now + timedelta(minutes=16))
    assert later.deliveries_restarted == 1 and metrics.counts["DeliveriesRestarted"] == 1
    assert dispatcher.wait_until(settled(clean_db)), "the delivery never reached a final state"
    assert delivery(clean_db)[1:] == ("DELIVERED", 1)
    [received] = receiver.accepted
    assert received.webhook_id == str(delivery(clean_db)[0])
    valid_webhook(received.body)

    again, _ = tick(now + timedelta(minutes=32))
    assert again.deliveries_restarted == 0, "a delivered delivery is never restarted"


def test_a_late_failed_attempt_never_overwrites_what_a_newer_execution_delivered(
    secured_tenant, system_db, clean_db, cleanup
):
    from types import SimpleNamespace

    from tollgate.delivery.attempts import Next
    from tollgate.delivery.sender import DeliveryResult

    # Given a delivery no execution drives yet, to an endpoint that accepts it
    _, client = secured_tenant
    deliver(system_db, SimpleNamespace(starter=NoDispatcher()), client, clean_db, deque(), cleanup)
    delivery_id = delivery(clean_db)[0]

    def deps(sender):
        return AttemptDeps(
            db=system_db, clock=SystemClock(), sender=sender, jitter=lambda low, high: 0.0, time_scale=0.0
        )

    class OvertakenSend:
        """An attempt that hangs until it times out; meanwhile a newer execution delivers the webhook."""

        newer = None

        def post(self, url, body, headers):
            def newer_execution():  # elsewhere: another Lambda, so a thread of its own here
                self.newer = attempt_delivery(deps(WebhookSender(allow_private_targets=True)), delivery_id)

            thread = threading.Thread(target=newer_execution)
            thread.start()
            thread.join()
            return DeliveryResult(status=503, elapsed=30.0)

    late = OvertakenSend()

    # When the first attempt's failure comes back after the newer attempt delivered
    outcome = attempt_delivery(deps(late), delivery_id)

    # Then the delivery stays delivered, both attempts are on record, and the late execution ends delivered
    assert late.newer.next is Next.DELIVERED
    assert outcome.next is Next.DELIVERED
    assert tuple(delivery(clean_db))[1:] == ("DELIVERED", 2)
    assert [row[:2] for row in attempts(clean_db)] == [(1, 503), (2, 200)]
