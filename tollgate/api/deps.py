"""What the API's routes are handed: the use cases' dependencies, built once per process by wiring."""

from __future__ import annotations

from dataclasses import dataclass

from tollgate.accept.service import AcceptanceDeps
from tollgate.delivery.deliveries import ReplayDeps
from tollgate.delivery.endpoints import EndpointDeps
from tollgate.review.service import ReviewDeps

# The JSON envelope around a document (keys, quotes, escapes) on top of the document's own limit.
ENVELOPE_ALLOWANCE = 64 * 1024


@dataclass(frozen=True)
class ApiDeps:
    acceptance: AcceptanceDeps
    webhooks: EndpointDeps | None = None
    # None where no dispatcher is deployed: replays answer 503.
    replays: ReplayDeps | None = None
    reviews: ReviewDeps | None = None

    @property
    def max_request_bytes(self) -> int:
        return self.acceptance.limits.max_document_bytes * 2 + ENVELOPE_ALLOWANCE
