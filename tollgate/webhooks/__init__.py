"""Webhook delivery to tenants: Standard Webhooks signing, the SSRF policy, and the safe sender.

The local receiver (``tollgate.webhooks.receiver``) is imported on its own: it serves the demo and tests.
"""

from tollgate.webhooks.sender import DeliveryError, DeliveryResult, SenderLimits, WebhookSender
from tollgate.webhooks.signing import (
    BadSignature,
    FutureTimestamp,
    InvalidSecret,
    InvalidTimestamp,
    MalformedHeaders,
    MissingHeaders,
    StaleTimestamp,
    VerifiedWebhook,
    WebhookVerificationError,
    new_secret,
    sign,
    verify,
)
from tollgate.webhooks.ssrf import CheckedTarget, ResolutionFailed, TargetRefused, check_url

__all__ = [
    "BadSignature",
    "CheckedTarget",
    "DeliveryError",
    "DeliveryResult",
    "FutureTimestamp",
    "InvalidSecret",
    "InvalidTimestamp",
    "MalformedHeaders",
    "MissingHeaders",
    "ResolutionFailed",
    "SenderLimits",
    "StaleTimestamp",
    "TargetRefused",
    "VerifiedWebhook",
    "WebhookSender",
    "WebhookVerificationError",
    "check_url",
    "new_secret",
    "sign",
    "verify",
]
