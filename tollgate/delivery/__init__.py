"""Webhook delivery to tenants: Standard Webhooks signing, the SSRF policy, and the safe sender.

The local receiver (``tollgate_dev.receiver``) is imported on its own: it serves the demo and tests.
"""

from pathlib import Path

from tollgate.delivery.sender import DeliveryError, DeliveryResult, SenderLimits, WebhookSender
from tollgate.delivery.signing import (
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
from tollgate.delivery.ssrf import CheckedTarget, ResolutionFailed, TargetRefused, check_url

# The dispatcher state machine's definition: the CDK deploys this file as it is, the local system runs it.
DISPATCHER_DEFINITION = Path(__file__).resolve().parent / "dispatcher.asl.json"

__all__ = [
    "DISPATCHER_DEFINITION",
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
