"""Standard Webhooks signing and verification: the published test vectors, rotation, and every refusal."""

from __future__ import annotations

import base64
import hmac
from datetime import UTC, datetime, timedelta

import pytest

from tollgate.core.clock import FakeClock
from tollgate.delivery.signing import (
    BadSignature,
    FutureTimestamp,
    InvalidSecret,
    InvalidTimestamp,
    MalformedHeaders,
    MissingHeaders,
    StaleTimestamp,
    decode_secret,
    new_secret,
    sign,
    verify,
)
from tollgate_dev.receiver import WebhookReceiver

# Test vectors published with the Standard Webhooks reference libraries
# (github.com/standard-webhooks/standard-webhooks: libraries/python/tests/test_webhooks.py
# `test_sign_function` and libraries/go/webhook_test.go `TestWebhookSign`): this secret, id, timestamp
# and body must sign to exactly VECTOR_SIGNATURE.
VECTOR_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
VECTOR_MSG_ID = "msg_p5jXN8AQM9LWM0D4loKWxJek"
VECTOR_TIMESTAMP = 1614265330
VECTOR_BODY = b'{"test": 2432232314}'
VECTOR_SIGNATURE = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
# From the same test suites: the vector signature with its last character changed (must fail), and the
# junk entries the multi-signature case surrounds a valid signature with.
VECTOR_WRONG_SIGNATURE = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OA="
VECTOR_JUNK_SIGNATURES = (
    "v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc=",
    "v2,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc=",
)
VECTOR_NOW = datetime.fromtimestamp(VECTOR_TIMESTAMP, UTC)


def vector_headers(**overrides: str) -> dict[str, str]:
    headers = {
        "webhook-id": VECTOR_MSG_ID,
        "webhook-timestamp": str(VECTOR_TIMESTAMP),
        "webhook-signature": VECTOR_SIGNATURE,
    }
    headers.update(overrides)
    return headers


def test_signing_the_published_vector_gives_the_published_signature() -> None:
    headers = sign(VECTOR_SECRET, VECTOR_MSG_ID, VECTOR_TIMESTAMP, VECTOR_BODY)

    assert headers == vector_headers()


def test_the_published_vector_verifies_with_and_without_the_secret_prefix() -> None:
    for secret in (VECTOR_SECRET, VECTOR_SECRET.removeprefix("whsec_")):
        verified = verify(secret, vector_headers(), VECTOR_BODY, now=VECTOR_NOW)
        assert (verified.msg_id, verified.timestamp) == (VECTOR_MSG_ID, VECTOR_TIMESTAMP)


def test_the_published_wrong_signature_is_refused() -> None:
    with pytest.raises(BadSignature):
        verify(
            VECTOR_SECRET,
            vector_headers(**{"webhook-signature": VECTOR_WRONG_SIGNATURE}),
            VECTOR_BODY,
            now=VECTOR_NOW,
        )


def test_the_published_multi_signature_header_verifies_through_its_one_valid_entry() -> None:
    header = " ".join([*VECTOR_JUNK_SIGNATURES, VECTOR_SIGNATURE, VECTOR_JUNK_SIGNATURES[0]])

    verify(VECTOR_SECRET, vector_headers(**{"webhook-signature": header}), VECTOR_BODY, now=VECTOR_NOW)


def test_a_signature_under_another_version_tag_is_not_accepted_as_v1() -> None:
    valid_value = VECTOR_SIGNATURE.removeprefix("v1,")
    with pytest.raises(BadSignature):
        verify(
            VECTOR_SECRET,
            vector_headers(**{"webhook-signature": f"v1a,{valid_value} v2,{valid_value}"}),
            VECTOR_BODY,
            now=VECTOR_NOW,
        )


@pytest.mark.parametrize("missing", ["webhook-id", "webhook-timestamp", "webhook-signature"])
def test_a_missing_header_is_refused_by_name(missing: str) -> None:
    headers = vector_headers()
    del headers[missing]

    with pytest.raises(MissingHeaders, match=missing):
        verify(VECTOR_SECRET, headers, VECTOR_BODY, now=VECTOR_NOW)


@pytest.mark.parametrize("timestamp", ["hello", "", " 1614265330", "+1614265330", "1614265330.0", "-1"])
def test_a_timestamp_that_is_not_plain_unix_seconds_is_refused(timestamp: str) -> None:
    with pytest.raises((InvalidTimestamp, MissingHeaders)):
        verify(VECTOR_SECRET, vector_headers(**{"webhook-timestamp": timestamp}), VECTOR_BODY, VECTOR_NOW)


def test_timestamps_within_the_tolerance_either_way_are_accepted() -> None:
    for offset in (-300, 0, 300):
        verify(VECTOR_SECRET, vector_headers(), VECTOR_BODY, now=VECTOR_NOW + timedelta(seconds=offset))


def test_a_stale_timestamp_is_refused() -> None:
    with pytest.raises(StaleTimestamp, match="301 s old"):
        verify(VECTOR_SECRET, vector_headers(), VECTOR_BODY, now=VECTOR_NOW + timedelta(seconds=301))


def test_a_timestamp_from_the_future_is_refused() -> None:
    with pytest.raises(FutureTimestamp):
        verify(VECTOR_SECRET, vector_headers(), VECTOR_BODY, now=VECTOR_NOW - timedelta(seconds=301))


def test_the_tolerance_is_configurable() -> None:
    later = VECTOR_NOW + timedelta(seconds=30)
    with pytest.raises(StaleTimestamp):
        verify(VECTOR_SECRET, vector_headers(), VECTOR_BODY, now=later, tolerance=timedelta(seconds=10))


@pytest.mark.parametrize(
    "body",
    [
        b'{"test": 2432232315}',
        b'{"test": 2432232314} ',
        b'{"test":2432232314}',  # re-serialized JSON is a different body
        b"",
    ],
)
def test_any_change_to_the_body_breaks_the_signature(body: bytes) -> None:
    with pytest.raises(BadSignature):
        verify(VECTOR_SECRET, vector_headers(), body, now=VECTOR_NOW)


def test_the_id_and_timestamp_are_covered_by_the_signature() -> None:
    with pytest.raises(BadSignature):
        verify(VECTOR_SECRET, vector_headers(**{"webhook-id": "msg_other"}), VECTOR_BODY, VECTOR_NOW)
    with pytest.raises(BadSignature):
        verify(
            VECTOR_SECRET,
            vector_headers(**{"webhook-timestamp": str(VECTOR_TIMESTAMP + 1)}),
            VECTOR_BODY,
            VECTOR_NOW,
        )


def test_header_names_are_matched_case_insensitively() -> None:
    headers = {name.title(): value for name, value in vector_headers().items()}

    verify(VECTOR_SECRET, headers, VECTOR_BODY, now=VECTOR_NOW)


def test_an_id_with_a_dot_is_refused_because_it_would_make_the_signed_content_ambiguous() -> None:
    with pytest.raises(ValueError, match="no dots"):
        sign(VECTOR_SECRET, "msg.1", VECTOR_TIMESTAMP, VECTOR_BODY)
    with pytest.raises(MalformedHeaders):
        verify(VECTOR_SECRET, vector_headers(**{"webhook-id": "msg.1"}), VECTOR_BODY, VECTOR_NOW)


def test_during_rotation_each_active_secret_signs_and_either_one_verifies() -> None:
    old, new = new_secret(), new_secret()
    body = b'{"type":"extraction.completed.v1"}'

    headers = sign([old, new], "dlv_01", VECTOR_TIMESTAMP, body)

    assert len(headers["webhook-signature"].split(" ")) == 2
    assert all(entry.startswith("v1,") for entry in headers["webhook-signature"].split(" "))
    verify(old, headers, body, now=VECTOR_NOW)
    verify(new, headers, body, now=VECTOR_NOW)
    verify([new_secret(), new], headers, body, now=VECTOR_NOW)
    with pytest.raises(BadSignature):
        verify(new_secret(), headers, body, now=VECTOR_NOW)


def test_a_receiver_holding_both_secrets_accepts_a_delivery_signed_with_either() -> None:
    old, new = new_secret(), new_secret()
    body = b"{}"
    for signer in (old, new):
        verify([old, new], sign(signer, "dlv_02", VECTOR_TIMESTAMP, body), body, now=VECTOR_NOW)


def test_an_aware_datetime_signs_as_its_unix_seconds() -> None:
    assert sign(VECTOR_SECRET, VECTOR_MSG_ID, VECTOR_NOW, VECTOR_BODY) == vector_headers()
    with pytest.raises(ValueError, match="naive"):
        sign(VECTOR_SECRET, VECTOR_MSG_ID, VECTOR_NOW.replace(tzinfo=None), VECTOR_BODY)


def test_new_secrets_are_prefixed_random_and_at_least_24_bytes() -> None:
    secrets = {new_secret() for _ in range(20)}

    assert len(secrets) == 20
    for secret in secrets:
        assert secret.startswith("whsec_")
        assert len(base64.b64decode(secret.removeprefix("whsec_"))) == 32
    assert (
        new_secret(24, random_bytes=lambda n: b"\x01" * n)
        == "whsec_" + base64.b64encode(b"\x01" * 24).decode()
    )
    with pytest.raises(InvalidSecret):
        new_secret(16)


@pytest.mark.parametrize(
    "secret",
    ["whsec_not base64!", "whsec_" + base64.b64encode(b"short").decode(), "", "whsec_"],
)
def test_malformed_or_short_secrets_are_refused(secret: str) -> None:
    with pytest.raises(InvalidSecret):
        decode_secret(secret)


def test_signatures_are_compared_in_constant_time(monkeypatch: pytest.MonkeyPatch) -> None:
    compared: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        compared.append((a, b))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", spy)

    verify(VECTOR_SECRET, vector_headers(), VECTOR_BODY, now=VECTOR_NOW)

    assert compared == [(VECTOR_SIGNATURE[3:].encode(), VECTOR_SIGNATURE[3:].encode())]


def test_the_independent_receiver_agrees_with_the_signer_on_the_published_vector() -> None:
    # The receiver shares no code with the signer, so agreement here is two readings of the spec meeting.
    receiver = WebhookReceiver(VECTOR_SECRET, clock=FakeClock(VECTOR_NOW))
    try:
        reply = receiver.receive("/hook", vector_headers(), VECTOR_BODY)
        tampered = receiver.receive(
            "/hook", vector_headers(**{"webhook-signature": VECTOR_WRONG_SIGNATURE}), VECTOR_BODY
        )
    finally:
        receiver.stop()

    assert reply.status == 200
    assert reply.body["status"] == "accepted"
    assert tampered.status == 401
