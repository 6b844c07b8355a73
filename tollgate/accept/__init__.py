"""A tenant's jobs: accepting one (request models, idempotency, admission and the one transaction that
writes the job with its ``extraction.requested.v1`` outbox event), reading them and cancelling one."""
