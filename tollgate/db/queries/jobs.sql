-- Leasing and completing jobs (the worker, as tollgate_system). Every write after the claim is conditioned
-- on the fence the claim handed out: a worker that lost its lease changes nothing.

-- name: claim_next_job
-- The first of the fair offers (job_offers, migration 0009) that no other worker holds: SKIP LOCKED lets
-- concurrent workers take the next offer instead of waiting.
WITH picked AS (
    SELECT j.job_id
    FROM extraction_jobs j
    JOIN job_offers(%(now)s, %(tenant_cap)s) o USING (job_id)
    WHERE j.state IN ('READY', 'RETRY_SCHEDULED')
    ORDER BY o.score, o.ready_at
    LIMIT 1
    FOR UPDATE OF j SKIP LOCKED
)
UPDATE extraction_jobs j
SET state = 'RUNNING', attempt = j.attempt + 1, fence = j.fence + 1, lease_owner = %(worker_id)s,
    lease_until = %(lease_until)s, next_attempt_at = NULL, state_version = j.state_version + 1,
    updated_at = %(now)s
FROM picked
WHERE j.job_id = picked.job_id
RETURNING j.job_id, j.tenant_id, j.attempt, j.max_attempts, j.fence, j.deadline_at, j.document_id,
          j.model_policy, j.estimated_tokens, j.trace_context, j.state_version

-- name: peek_next_job
-- The estimated tokens of the job claim_next_job would pick now (the same offers, the same order), without
-- taking it: a slot sizes its budget permit by it before it claims. Nothing is locked, so the job claimed a
-- moment later may be another one; the slot then resizes the permit to that job's estimate.
SELECT o.estimated_tokens
FROM job_offers(%(now)s, %(tenant_cap)s) o
ORDER BY o.score, o.ready_at
LIMIT 1

-- name: insert_attempt
INSERT INTO job_attempts (job_id, attempt, tenant_id, fence, worker_id, started_at)
VALUES (%(job_id)s, %(attempt)s, %(tenant_id)s, %(fence)s, %(worker_id)s, %(now)s)

-- name: extend_lease
UPDATE extraction_jobs SET lease_until = %(lease_until)s
WHERE job_id = %(job_id)s AND fence = %(fence)s AND state = 'RUNNING'
RETURNING job_id

-- name: get_document_for_job
SELECT d.s3_key, d.s3_version_id, d.page_count FROM documents d WHERE d.document_id = %(document_id)s

-- name: tenant_validation_policy
SELECT t.allowed_currencies,
       coalesce(array_agg(s.name) FILTER (WHERE s.name IS NOT NULL), '{}') AS supplier_names,
       coalesce(array_agg(s.iban) FILTER (WHERE s.name IS NOT NULL), '{}') AS supplier_ibans
FROM tenants t LEFT JOIN tenant_suppliers s ON s.tenant_id = t.tenant_id
WHERE t.tenant_id = %(tenant_id)s
GROUP BY t.allowed_currencies

-- name: finish_running_job
-- The one conditional write that ends an attempt: still RUNNING, still our fence, lease not yet run out.
UPDATE extraction_jobs
SET state = %(state)s, lease_owner = NULL, lease_until = NULL, next_attempt_at = %(next_attempt_at)s,
    state_version = state_version + 1, updated_at = %(now)s, last_error = %(last_error)s,
    finished_at = %(finished_at)s
WHERE job_id = %(job_id)s AND state = 'RUNNING' AND fence = %(fence)s AND lease_until > %(now)s
RETURNING job_id, tenant_id, state_version, trace_context

-- name: record_attempt
UPDATE job_attempts
SET finished_at = %(now)s, outcome = %(outcome)s, model = %(model)s, input_tokens = %(input_tokens)s,
    output_tokens = %(output_tokens)s, cost_usd = %(cost_usd)s, latency_ms = %(latency_ms)s,
    provider_request_id = %(provider_request_id)s, error = %(error)s
WHERE job_id = %(job_id)s AND attempt = %(attempt)s AND fence = %(fence)s

-- name: insert_result
INSERT INTO extraction_results (job_id, tenant_id, attempt, policy_version, result, review_reasons)
VALUES (%(job_id)s, %(tenant_id)s, %(attempt)s, %(policy_version)s, %(result)s, %(review_reasons)s)

-- name: insert_supplier
INSERT INTO tenant_suppliers (supplier_id, tenant_id, name, normalized_name, iban)
VALUES (%(supplier_id)s, %(tenant_id)s, %(name)s, %(normalized_name)s, %(iban)s)
ON CONFLICT (tenant_id, normalized_name) DO UPDATE SET iban = EXCLUDED.iban, name = EXCLUDED.name

-- name: release_job
-- A worker shutting down hands back what it cannot finish: runnable again at once, under a new fence.
-- The attempt was cut short by us, not by the job: on its last attempt the budget grows by one, or no claim
-- could take it again and it would wait out its deadline. The attempt counter itself never goes back.
UPDATE extraction_jobs
SET state = 'RETRY_SCHEDULED', fence = fence + 1, lease_owner = NULL, lease_until = NULL,
    max_attempts = greatest(max_attempts, attempt + 1),
    next_attempt_at = %(now)s, state_version = state_version + 1, updated_at = %(now)s,
    last_error = '{"reason": "released_on_shutdown"}'::jsonb
WHERE job_id = %(job_id)s AND fence = %(fence)s AND state = 'RUNNING'
RETURNING job_id
