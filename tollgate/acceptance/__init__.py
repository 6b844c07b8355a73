"""Accepting extraction jobs: validation, idempotency, admission and the transactional outbox."""
