"""Webhook endpoints over the API, and the relay's fan-out of webhook events into deliveries."""

from __future__ import annotations

from uuid import UUID

import pytest

from tests.support import PUBLIC_V4, PUBLIC_V6, FakeResolver, outbox_event
from tollgate.core.clock import SystemClock, new_id
from tollgate.delivery.deliveries import WebhookDispatcher, delivery_id_for
from tollgate.events import EXTRACTION_FAILED, ExtractionCompleted
from tollgate.outbox.relay import OutboxEvent
from tollgate_dev.local.client import ApiClient

pytestmark = pytest.mark.integration

URL = "https://erp.example.com/hooks/tollgate"
# The DNS the strict stack's registration asks; a name not listed does not exist.
DNS = {
    "erp.example.com": [PUBLIC_V4],
    "erp2.example.com": [PUBLIC_V4, PUBLIC_V6],
    "internal.example": ["10.0.0.7"],
    "metadata.example": ["169.254.169.254"],
    "mixed.example": [PUBLIC_V4, "fd00::1"],
    "as112.example": ["2620:4f:8000::1"],
    "xn--fa-hia.de": [PUBLIC_V4],
    "fass.de": ["127.0.0.1"],
}


class RecordingStarter:
    """The dispatcher's port to Step Functions, in memory: records which executions were started."""

    def __init__(self) -> None:
        self.started: list[tuple[str, str]] = []

    def start(self, delivery_id, name) -> None:
        self.started.append((str(delivery_id), name))


@pytest.fixture
def resolver():
    return FakeResolver(DNS, failing={"flaky.example"})


@pytest.fixture
def strict_stack(stack_factory, clean_db, resolver):
    return stack_factory(webhooks_allow_private_targets=False, webhook_resolver=resolver)


@pytest.fixture
def client(strict_stack, tenant):
    return ApiClient(strict_stack.api_url, tenant.api_key)


def register(client, **body):
    return client.request("POST", "/webhook-endpoints", json_body={"url": URL, **body})


def test_registering_returns_the_secret_once(client):
    created = register(client, description="ERP")

    assert created.status == 201
    assert created.json["secret"].startswith("whsec_")
    # Without a choice, what an ERP acts on; review_required (unaccepted data) only when asked for.
    assert sorted(created.json["event_types"]) == [
        "extraction.completed.v1",
        "extraction.failed.v1",
        "extraction.rejected.v1",
    ]
    listed = client.request("GET", "/webhook-endpoints").json["items"]
    assert [e["endpoint_id"] for e in listed] == [created.json["endpoint_id"]]
    assert "secret" not in listed[0]
    assert "secret" not in client.request("GET", f"/webhook-endpoints/{created.json['endpoint_id']}").json


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({"url": "http://erp.example.com/hooks"}, 422),
        ({"url": "https://user:pass@erp.example.com/hooks"}, 422),
        ({"url": "https:///nohost"}, 422),
        ({"url": URL, "event_types": ["extraction.started.v1"]}, 422),
        ({"url": URL, "event_types": []}, 422),
        ({"url": URL, "callback": "https://elsewhere.example"}, 422),
        ({"url": 42}, 422),
        # PostgreSQL text cannot hold U+0000: refused as input, not failed on as a 500.
        ({"url": URL + "/\u0000"}, 422),
        ({"url": URL, "description": "ERP\u0000"}, 422),
    ],
    ids=[
        "plain-http",
        "credentials",
        "no-host",
        "unknown-event",
        "no-events",
        "unknown-field",
        "not-a-string",
        "nul-in-url",
        "nul-in-description",
    ],
)
def test_bad_registrations_are_refused_and_write_nothing(client, body, status):
    response = client.request("POST", "/webhook-endpoints", json_body=body)

    assert response.status == status
    assert response.header("Content-Type") == "application/problem+json"
    assert client.request("GET", "/webhook-endpoints").json["items"] == []


REFUSED_URLS = {
    "metadata-literal": ("https://169.254.169.254/latest/meta-data/", "instance metadata"),
    "loopback-ssh": ("https://127.0.0.1:22/", "port 22 is not allowed"),
    "loopback-unprivileged": ("https://127.0.0.1:8443/", "loopback"),
    "loopback-decimal": ("https://2130706433/", "loopback"),
    "v6-loopback": ("https://[::1]/", "loopback"),
    "v4-mapped-private": ("https://[::ffff:10.1.2.3]/", "private"),
    "nat64-metadata": ("https://[64:ff9b::a9fe:a9fe]/", "169.254.169.254"),
    "6to4-loopback": ("https://[2002:7f00:1::1]/", "127.0.0.1"),
    "localhost": ("https://localhost/", "localhost"),
    "crlf": ("https://erp.example.com/hooks\r\nX-Injected: 1", "control characters"),
    "lf-in-host": ("https://erp.exam\nple.com/", "control characters"),
    "c1-control": ("https://erp.example.com/\u0085", "control characters"),
    "privileged-port": ("https://erp.example.com:25/", "port 25 is not allowed"),
    "userinfo": ("https://erp.example.com@169.254.169.254/", "userinfo"),
    "private-by-dns": ("https://internal.example/", "resolves to 10.0.0.7"),
    "metadata-by-dns": ("https://metadata.example/", "instance metadata"),
    "one-private-answer": ("https://mixed.example/", "resolves to fd00::1"),
    "as112-v6-by-dns": ("https://as112.example/", "AS112"),
    "no-such-name": ("https://nowhere.example/", "did not resolve"),
    "bad-a-label": ("https://xn--zz.example/", "not a valid internationalized name"),
    "fragment": ("https://erp.example.com/hooks#top", "fragment"),
}


@pytest.mark.parametrize(("url", "reason"), REFUSED_URLS.values(), ids=REFUSED_URLS.keys())
def test_a_url_the_sender_would_refuse_is_a_422_naming_the_field(client, url, reason):
    created = client.request("POST", "/webhook-endpoints", json_body={"url": url})
    endpoint_id = register(client).json["endpoint_id"]
    updated = client.request("PATCH", f"/webhook-endpoints/{endpoint_id}", json_body={"url": url})

    for response in (created, updated):
        assert response.status == 422, response.body
        assert response.header("Content-Type") == "application/problem+json"
        assert response.json["type"].endswith("validation-failed")
        assert reason in response.json["detail"], response.json
        assert [e["loc"] for e in response.json["errors"]] == [["body", "url"]]
    assert [e["url"] for e in client.request("GET", "/webhook-endpoints").json["items"]] == [URL]


def test_a_public_name_is_registered_and_looked_up_in_its_idna2008_form(client, resolver):
    erp2 = client.request("POST", "/webhook-endpoints", json_body={"url": "https://erp2.example.com/h"})
    # faß.de is asked as xn--fa-hia.de (IDNA2008); IDNA2003 would have asked fass.de, another domain.
    german = client.request("POST", "/webhook-endpoints", json_body={"url": "https://faß.de/hooks"})

    assert (erp2.status, german.status) == (201, 201), (erp2.body, german.body)
    assert german.json["url"] == "https://faß.de/hooks"
    assert resolver.calls == ["erp2.example.com", "xn--fa-hia.de"]


def test_a_resolver_that_fails_to_answer_is_a_503_with_retry_after_and_writes_nothing(client):
    response = client.request("POST", "/webhook-endpoints", json_body={"url": "https://flaky.example/h"})

    assert response.status == 503, response.body
    assert response.header("Retry-After") == "5"
    assert client.request("GET", "/webhook-endpoints").json["items"] == []


def test_local_development_registers_private_targets_without_asking_dns(stack_factory, clean_db, tenant):
    resolver = FakeResolver()
    local = ApiClient(
        stack_factory(webhooks_allow_private_targets=True, webhook_resolver=resolver).api_url, tenant.api_key
    )

    for url in ("http://127.0.0.1:9/pending", "https://[::1]:8443/", "http://erp.internal:8081/erp"):
        assert local.request("POST", "/webhook-endpoints", json_body={"url": url}).status == 201, url
    assert local.request("POST", "/webhook-endpoints", json_body={"url": "http://a/\r\n"}).status == 422
    assert resolver.calls == []


@pytest.mark.parametrize(
    ("method", "suffix", "body"),
    [("PATCH", "", {"enabled": 0}), ("PATCH", "", {"enabled": "false"}), ("POST", "/replay", {"since": 0})],
    ids=["enabled-a-number", "enabled-a-string", "since-a-number"],
)
def test_a_value_of_another_json_type_is_refused_not_coerced(client, method, suffix, body):
    endpoint_id = register(client).json["endpoint_id"]

    response = client.request(method, f"/webhook-endpoints/{endpoint_id}{suffix}", json_body=body)

    assert response.status == 422, response.body
    assert client.request("GET", f"/webhook-endpoints/{endpoint_id}").json["enabled"] is True


def test_another_tenants_endpoint_is_404(client, make_tenant, strict_stack):
    endpoint_id = register(client).json["endpoint_id"]
    other = ApiClient(strict_stack.api_url, make_tenant("other").api_key)

    for method, path in [
        ("GET", f"/webhook-endpoints/{endpoint_id}"),
        ("DELETE", f"/webhook-endpoints/{endpoint_id}"),
        ("POST", f"/webhook-endpoints/{endpoint_id}/rotate-secret"),
        ("GET", f"/webhook-endpoints/{endpoint_id}/deliveries"),
    ]:
        assert other.request(method, path).status == 404, path
    assert client.request("GET", f"/webhook-endpoints/{endpoint_id}").status == 200


def test_disable_enable_update_and_delete(client):
    endpoint_id = register(client).json["endpoint_id"]
    path = f"/webhook-endpoints/{endpoint_id}"

    disabled = client.request("PATCH", path, json_body={"enabled": False})
    enabled = client.request("PATCH", path, json_body={"enabled": True, "event_types": [EXTRACTION_FAILED]})
    deleted = client.request("DELETE", path)

    assert (disabled.json["enabled"], disabled.json["disabled_reason"]) == (False, "disabled by the tenant")
    assert (enabled.json["enabled"], enabled.json["disabled_reason"]) == (True, None)
    assert enabled.json["event_types"] == [EXTRACTION_FAILED]
    assert deleted.status == 204
    assert client.request("GET", path).status == 404


def test_a_delete_answers_204_without_a_body_as_documented(client):
    endpoint_id = register(client).json["endpoint_id"]

    deleted = client.request("DELETE", f"/webhook-endpoints/{endpoint_id}")

    document = client.request("GET", "/openapi.json", auth=False).json
    documented = document["paths"]["/webhook-endpoints/{endpoint_id}"]["delete"]["responses"]["204"]
    assert (deleted.status, deleted.body) == (204, b"")
    assert not documented.get("content"), "a 204 has no body, so the document names no media type for it"


def test_rotation_gives_a_new_secret_and_keeps_the_old_one_for_a_grace_period(client):
    created = register(client).json
    rotated = client.request("POST", f"/webhook-endpoints/{created['endpoint_id']}/rotate-secret").json

    assert rotated["secret"].startswith("whsec_") and rotated["secret"] != created["secret"]
    assert rotated["previous_secret_expires_at"] is not None


def test_replay_without_a_dispatcher_is_a_clear_503(client):
    endpoint_id = register(client).json["endpoint_id"]
    response = client.request(
        "POST", f"/webhook-endpoints/{endpoint_id}/replay", json_body={"since": "2026-01-01T00:00:00Z"}
    )
    assert response.status == 503
    assert response.json["type"].endswith("/deliveries-unavailable")


def event(tenant_id) -> OutboxEvent:
    return outbox_event(ExtractionCompleted(job_id=new_id(), tenant_id=tenant_id, state_version=3, attempt=1))


def test_fan_out_creates_one_delivery_per_subscribed_endpoint_and_republishing_adds_none(
    client, tenant, system_db, clean_db
):
    everything = register(client).json["endpoint_id"]
    failures_only = register(client, event_types=[EXTRACTION_FAILED]).json["endpoint_id"]
    disabled = register(client).json["endpoint_id"]
    client.request("PATCH", f"/webhook-endpoints/{disabled}", json_body={"enabled": False})
    starter = RecordingStarter()
    dispatcher = WebhookDispatcher(system_db, starter)
    completed = event(tenant.tenant_id)

    first = dispatcher.publish([completed])
    again = dispatcher.publish([completed])

    assert first == again == {completed.event_id: None}
    expected = str(delivery_id_for(completed.event_id, UUID(everything)))
    assert starter.started == [(expected, expected), (expected, expected)]
    deliveries = client.request("GET", f"/webhook-endpoints/{everything}/deliveries").json["items"]
    assert [d["delivery_id"] for d in deliveries] == [expected]
    assert client.request("GET", f"/webhook-endpoints/{failures_only}/deliveries").json["items"] == []


def test_a_replay_reopens_the_delivery_under_the_same_id(stack_factory, tenant, system_db, clean_db):
    from tollgate.delivery.deliveries import ReplayDeps, replay_delivery

    local = stack_factory()
    client = ApiClient(local.api_url, tenant.api_key)
    endpoint_id = client.request("POST", "/webhook-endpoints", json_body={"url": URL}).json["endpoint_id"]
    starter = RecordingStarter()
    completed = event(tenant.tenant_id)
    WebhookDispatcher(system_db, starter).publish([completed])
    delivery_id = delivery_id_for(completed.event_id, UUID(endpoint_id))

    result = replay_delivery(
        ReplayDeps(system_db, SystemClock(), starter), tenant.tenant_id, UUID(endpoint_id), delivery_id
    )

    assert result.replayed == [delivery_id]
    assert starter.started[-1] == (str(delivery_id), f"{delivery_id}-replay-1")
