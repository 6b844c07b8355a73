"""Standard Webhooks signatures: ``whsec_`` secrets, the three ``webhook-*`` headers, and verification.

The signed content is ``{webhook-id}.{webhook-timestamp}.{body}`` over the body's raw bytes exactly as sent;
during secret rotation one delivery carries a signature per active secret, space-separated.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import secrets as _random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

SECRET_PREFIX = "whsec_"  # noqa: S105 - the format marker, not a secret
SIGNATURE_VERSION = "v1"
HEADER_ID = "webhook-id"
HEADER_TIMESTAMP = "webhook-timestamp"
HEADER_SIGNATURE = "webhook-signature"
DEFAULT_TOLERANCE = timedelta(seconds=300)
# The spec asks for 24 to 64 random bytes (192 to 512 bits).
MIN_SECRET_BYTES = 24
MAX_SECRET_BYTES = 64
DEFAULT_SECRET_BYTES = 32

# A dot would make "{id}.{timestamp}.{body}" ambiguous (the spec warns about it); whitespace and control
# characters could split a header line.
_MSG_ID = re.compile(r"[A-Za-z0-9_\-:]{1,256}")
# int() would also take "+5", " 5", "5_0" and non-ASCII digits; the header is plain decimal seconds.
_TIMESTAMP = re.compile(r"[0-9]{1,12}")


class InvalidSecret(ValueError):
    """A secret that is not ``whsec_`` + base64 of 24 to 64 bytes."""


class WebhookVerificationError(Exception):
    """A delivery that must not be trusted; ``reason`` is a stable machine-readable word."""

    reason = "invalid"


class MissingHeaders(WebhookVerificationError):
    reason = "missing_headers"


class MalformedHeaders(WebhookVerificationError):
    reason = "malformed_headers"


class InvalidTimestamp(MalformedHeaders):
    reason = "invalid_timestamp"


class StaleTimestamp(WebhookVerificationError):
    reason = "stale_timestamp"


class FutureTimestamp(WebhookVerificationError):
    reason = "future_timestamp"


class BadSignature(WebhookVerificationError):
    reason = "bad_signature"


@dataclass(frozen=True)
class VerifiedWebhook:
    """What a verified delivery vouches for: its id (the receiver's idempotency key) and attempt time."""

    msg_id: str
    timestamp: int


def new_secret(
    n_bytes: int = DEFAULT_SECRET_BYTES, random_bytes: Callable[[int], bytes] = _random.token_bytes
) -> str:
    """A fresh endpoint secret, shown to the tenant once."""
    if not MIN_SECRET_BYTES <= n_bytes <= MAX_SECRET_BYTES:
        raise InvalidSecret(f"a secret has {MIN_SECRET_BYTES} to {MAX_SECRET_BYTES} bytes, not {n_bytes}")
    raw = random_bytes(n_bytes)
    if len(raw) != n_bytes:
        raise InvalidSecret("the random source returned the wrong number of bytes")
    return SECRET_PREFIX + base64.b64encode(raw).decode("ascii")


def decode_secret(secret: str) -> bytes:
    """The HMAC key inside a secret. The prefix is optional, as in the spec's reference libraries."""
    encoded = secret.removeprefix(SECRET_PREFIX)
    try:
        key = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise InvalidSecret("a webhook secret is whsec_ followed by base64") from exc
    if not MIN_SECRET_BYTES <= len(key) <= MAX_SECRET_BYTES:
        raise InvalidSecret(f"a webhook secret holds {MIN_SECRET_BYTES} to {MAX_SECRET_BYTES} bytes")
    return key


def compute_signature(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    """One ``v1,<base64>`` signature."""
    _check_msg_id(msg_id)
    digest = hmac.new(decode_secret(secret), _signed_content(msg_id, timestamp, body), hashlib.sha256)
    return f"{SIGNATURE_VERSION},{base64.b64encode(digest.digest()).decode('ascii')}"


def sign(secrets: str | Sequence[str], msg_id: str, timestamp: int | datetime, body: bytes) -> dict[str, str]:
    """The three Standard Webhooks headers for one attempt; one signature per active secret."""
    keys = _as_list(secrets)
    if not keys:
        raise InvalidSecret("signing needs at least one secret")
    seconds = _unix_seconds(timestamp)
    return {
        HEADER_ID: msg_id,
        HEADER_TIMESTAMP: str(seconds),
        HEADER_SIGNATURE: " ".join(compute_signature(key, msg_id, seconds, body) for key in keys),
    }


def verify(
    secrets: str | Sequence[str],
    headers: Mapping[str, str],
    body: bytes,
    now: datetime,
    tolerance: timedelta = DEFAULT_TOLERANCE,
) -> VerifiedWebhook:
    """Checks a delivery against the receiver's secret(s); raises a ``WebhookVerificationError`` subclass.

    Any one valid ``v1`` signature from any one secret suffices, which is what lets the sender rotate
    secrets without downtime. The timestamp must lie within ``tolerance`` of ``now`` in both directions.
    """
    keys = [decode_secret(key) for key in _as_list(secrets)]
    if not keys:
        raise InvalidSecret("verification needs at least one secret")
    lowered = {name.lower(): value for name, value in headers.items()}
    missing = [h for h in (HEADER_ID, HEADER_TIMESTAMP, HEADER_SIGNATURE) if not lowered.get(h)]
    if missing:
        raise MissingHeaders(f"missing header(s): {', '.join(missing)}")
    msg_id, raw_timestamp = lowered[HEADER_ID], lowered[HEADER_TIMESTAMP]
    if not _MSG_ID.fullmatch(msg_id):
        raise MalformedHeaders("webhook-id holds characters a delivery id never has")
    if not _TIMESTAMP.fullmatch(raw_timestamp):
        raise InvalidTimestamp("webhook-timestamp is not unix seconds")
    timestamp = int(raw_timestamp)
    age = now.timestamp() - timestamp
    limit = tolerance.total_seconds()
    if age > limit:
        raise StaleTimestamp(f"webhook-timestamp is {age:.0f} s old; at most {limit:.0f} s is accepted")
    if -age > limit:
        raise FutureTimestamp(f"webhook-timestamp is {-age:.0f} s ahead; at most {limit:.0f} s is accepted")

    content = _signed_content(msg_id, timestamp, body)
    expected = [base64.b64encode(hmac.new(key, content, hashlib.sha256).digest()) for key in keys]
    offered = list(_v1_signatures(lowered[HEADER_SIGNATURE]))
    # Compare every pair rather than stopping at the first match, so timing says nothing about which
    # secret or position matched; each comparison is constant-time.
    matched = False
    for candidate in offered:
        for wanted in expected:
            matched |= hmac.compare_digest(candidate, wanted)
    if not matched:
        raise BadSignature("no v1 signature matches the secret(s)")
    return VerifiedWebhook(msg_id=msg_id, timestamp=timestamp)


def _v1_signatures(header: str) -> Iterable[bytes]:
    for entry in header.split(" "):
        version, sep, value = entry.partition(",")
        # Other schemes (v1a asymmetric, future versions) may ride along; they are not ours to check.
        if sep and version == SIGNATURE_VERSION and value:
            yield value.encode("utf-8", "surrogateescape")


def _signed_content(msg_id: str, timestamp: int, body: bytes) -> bytes:
    return f"{msg_id}.{timestamp}.".encode() + body


def _check_msg_id(msg_id: str) -> None:
    if not _MSG_ID.fullmatch(msg_id):
        raise ValueError("a webhook id is 1-256 characters of [A-Za-z0-9_-:] (no dots, no whitespace)")


def _unix_seconds(timestamp: int | datetime) -> int:
    if isinstance(timestamp, datetime):
        if timestamp.tzinfo is None:
            raise ValueError("a naive datetime has no unix time; pass an aware one")
        return int(timestamp.astimezone(UTC).timestamp())
    if timestamp < 0:
        raise ValueError("a webhook timestamp is non-negative unix seconds")
    return timestamp


def _as_list(secrets: str | Sequence[str]) -> list[str]:
    # A str is itself a Sequence[str]; one secret must not turn into one secret per character.
    return [secrets] if isinstance(secrets, str) else list(secrets)
