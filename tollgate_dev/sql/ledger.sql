-- The ledger check after a chaos run (tollgate_system): everything the run's tenants left in the database,
-- read as plain rows; the reconciliation itself is in tollgate_dev/chaos/ledger.py.

-- name: ledger_jobs
SELECT j.job_id, j.tenant_id, j.state, j.attempt, j.max_attempts, j.last_error, j.fence, j.service_tier,
       j.batch_id, r.attempt AS result_attempt
FROM extraction_jobs j LEFT JOIN extraction_results r USING (job_id)
WHERE j.tenant_id = ANY(%(tenant_ids)s)

-- name: ledger_attempts
SELECT job_id, attempt, fence, outcome, finished_at, batch_id
FROM job_attempts
WHERE tenant_id = ANY(%(tenant_ids)s)
ORDER BY job_id, attempt

-- name: ledger_events
SELECT event_id, tenant_id, aggregate_id, event_type, created_at, published_at,
       payload->>'state' AS state
FROM outbox_events
WHERE tenant_id = ANY(%(tenant_ids)s)

-- name: ledger_inbox
SELECT event_id FROM execution_inbox WHERE tenant_id = ANY(%(tenant_ids)s)

-- name: ledger_endpoints
SELECT endpoint_id, tenant_id, event_types, enabled, created_at, deleted_at
FROM webhook_endpoints
WHERE tenant_id = ANY(%(tenant_ids)s)

-- name: ledger_deliveries
SELECT delivery_id, tenant_id, endpoint_id, event_id, state, attempts
FROM webhook_deliveries
WHERE tenant_id = ANY(%(tenant_ids)s)

-- name: ledger_batches
-- The provider batches that carried any of the tenants' jobs (a batch's first member joins in the
-- transaction that records it, so none is without one).
SELECT b.batch_id, b.model, b.state, b.provider_batch_id, b.holder, b.created_at, b.ended_at, b.settled_at
FROM provider_batches b
WHERE EXISTS (
    SELECT 1 FROM provider_batch_jobs m WHERE m.batch_id = b.batch_id AND m.tenant_id = ANY(%(tenant_ids)s))

-- name: ledger_batch_members
SELECT batch_id, job_id, attempt, fence, settled_at, outcome
FROM provider_batch_jobs
WHERE tenant_id = ANY(%(tenant_ids)s)
ORDER BY job_id, attempt
