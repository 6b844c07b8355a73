"""The event types that leave the outbox; the relay's routing table is keyed by these."""

EXTRACTION_REQUESTED = "extraction.requested.v1"
EXTRACTION_COMPLETED = "extraction.completed.v1"
EXTRACTION_REVIEW_REQUIRED = "extraction.review_required.v1"
EXTRACTION_FAILED = "extraction.failed.v1"
