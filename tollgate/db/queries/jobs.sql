-- extraction_jobs: a job's whole life, from the insert at acceptance through claim, lease and finish to the
-- scheduler's reaping and deadline expiry. Tenant-facing queries (acceptance, the API) name their tenant
-- explicitly, row-level security being the second wall; the worker and the scheduler run as
-- tollgate_system across tenants, with time passed in as %(now)s so the rules are tested with a controlled
-- clock. Every write after the claim is conditioned on the fence the claim handed out: a worker that lost
-- its lease changes nothing.

-- name: lock_tenant_acceptance
-- Serializes acceptance per tenant, so the idempotency lookup, the admission counts and the inserts
-- see one consistent picture. Other tenants are not blocked.
SELECT pg_advisory_xact_lock(hashtextextended(%(tenant_id)s::text, 7314227))

-- name: find_job_by_idempotency_key
SELECT j.*, d.content_sha256, d.size_bytes, d.page_count
FROM extraction_jobs j JOIN documents d USING (document_id)
WHERE j.tenant_id = %(tenant_id)s AND j.idempotency_key = %(idempotency_key)s

-- name: insert_job
INSERT INTO extraction_jobs (
    job_id, tenant_id, idempotency_key, request_hash, job_type, document_id, schema_version,
    model_policy, options, metadata, priority, max_attempts, estimated_tokens, document_bytes,
    deadline_at, trace_context, reserved_usd, spend_month, service_tier)
VALUES (
    %(job_id)s, %(tenant_id)s, %(idempotency_key)s, %(request_hash)s, %(job_type)s, %(document_id)s,
    %(schema_version)s, %(model_policy)s, %(options)s, %(metadata)s, %(priority)s, %(max_attempts)s,
    %(estimated_tokens)s, %(document_bytes)s, %(deadline_at)s, %(trace_context)s, %(reserved_usd)s,
    %(spend_month)s, %(service_tier)s)
RETURNING *

-- name: get_job
SELECT j.*, d.content_sha256, d.size_bytes, d.page_count
FROM extraction_jobs j JOIN documents d USING (document_id)
WHERE j.tenant_id = %(tenant_id)s AND j.job_id = %(job_id)s

-- name: list_jobs
-- Newest first; the cursor is the (created_at, job_id) of the last row of the previous page.
SELECT j.*, d.content_sha256, d.size_bytes, d.page_count
FROM extraction_jobs j JOIN documents d USING (document_id)
WHERE j.tenant_id = %(tenant_id)s
  AND (%(state)s::text IS NULL OR j.state = %(state)s::text)
  AND (%(job_type)s::text IS NULL OR j.job_type = %(job_type)s::text)
  AND (%(after_created_at)s::timestamptz IS NULL
       OR (j.created_at, j.job_id) < (%(after_created_at)s::timestamptz, %(after_job_id)s::uuid))
ORDER BY j.created_at DESC, j.job_id DESC
LIMIT %(limit)s

-- name: cancel_job
-- A job not running, or one waiting in a provider batch (its line may take hours): the fence moves, so the
-- line's answer, when it comes, is discarded by the fenced commit like any stale attempt's.
UPDATE extraction_jobs
SET state = 'CANCELLED', state_version = state_version + 1, next_attempt_at = NULL,
    fence = fence + (state = 'RUNNING')::integer, lease_owner = NULL, lease_until = NULL,
    finished_at = now(), updated_at = now()
WHERE tenant_id = %(tenant_id)s AND job_id = %(job_id)s
  AND (state IN ('READY', 'RETRY_SCHEDULED') OR (state = 'RUNNING' AND batch_id IS NOT NULL))
RETURNING job_id, tenant_id, state_version, attempt, trace_context

-- name: claim_tenant_job
-- One tenant's best job of one service tier that no other worker holds (SKIP LOCKED): its first READY job
-- of the tier by priority and age, or its earliest due retry if that ranks higher; each probe is an index
-- range (migration 0017's per-tier indexes). The job becomes RUNNING
-- with attempt+1 and fence+1 and its attempt record opens, in this one statement. A job found past its
-- deadline is not claimed: it comes back with outcome 'expired' for the caller to end.
WITH ready AS (
    SELECT job_id, priority, created_at, deadline_at FROM extraction_jobs
    WHERE tenant_id = %(tenant_id)s AND service_tier = %(service_tier)s AND state = 'READY'
      AND attempt < max_attempts
    ORDER BY priority DESC, created_at
    LIMIT 1
    FOR UPDATE SKIP LOCKED
), due AS (
    SELECT job_id, priority, created_at, deadline_at FROM extraction_jobs
    WHERE tenant_id = %(tenant_id)s AND service_tier = %(service_tier)s AND state = 'RETRY_SCHEDULED'
      AND next_attempt_at <= %(now)s AND attempt < max_attempts
    ORDER BY next_attempt_at
    LIMIT 1
    FOR UPDATE SKIP LOCKED
), picked AS (
    SELECT * FROM ready UNION ALL SELECT * FROM due
    ORDER BY priority DESC, created_at
    LIMIT 1
), claimed AS (
    UPDATE extraction_jobs j
    SET state = 'RUNNING', attempt = j.attempt + 1, fence = j.fence + 1, lease_owner = %(worker_id)s,
        lease_until = %(lease_until)s, next_attempt_at = NULL, state_version = j.state_version + 1,
        updated_at = %(now)s
    FROM picked
    WHERE j.job_id = picked.job_id AND picked.deadline_at > %(now)s
    RETURNING j.job_id, j.tenant_id, j.attempt, j.max_attempts, j.fence, j.deadline_at, j.document_id,
              j.model_policy, j.estimated_tokens, j.trace_context, j.state_version, j.job_type, j.options,
              j.model_escalated, j.service_tier, j.batch_offers
), opened AS (
    INSERT INTO job_attempts (job_id, attempt, tenant_id, fence, worker_id, started_at)
    SELECT job_id, attempt, tenant_id, fence, %(worker_id)s, %(now)s FROM claimed
)
SELECT 'claimed' AS outcome, claimed.* FROM claimed
UNION ALL
SELECT 'expired', j.job_id, j.tenant_id, j.attempt, j.max_attempts, j.fence, j.deadline_at, j.document_id,
       j.model_policy, j.estimated_tokens, j.trace_context, j.state_version, j.job_type, j.options,
       j.model_escalated, j.service_tier, j.batch_offers
FROM picked JOIN extraction_jobs j USING (job_id)
WHERE picked.deadline_at <= %(now)s

-- name: extend_lease
UPDATE extraction_jobs SET lease_until = %(lease_until)s
WHERE job_id = %(job_id)s AND fence = %(fence)s AND state = 'RUNNING'
RETURNING job_id

-- name: finish_running_job
-- The one conditional write that ends an attempt: still RUNNING, still our fence, lease not yet run out.
UPDATE extraction_jobs
SET state = %(state)s, lease_owner = NULL, lease_until = NULL, next_attempt_at = %(next_attempt_at)s,
    state_version = state_version + 1, updated_at = %(now)s, last_error = %(last_error)s,
    finished_at = %(finished_at)s, model_escalated = model_escalated OR %(escalate)s
WHERE job_id = %(job_id)s AND state = 'RUNNING' AND fence = %(fence)s AND lease_until > %(now)s
RETURNING job_id, tenant_id, state_version, trace_context

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

-- name: lock_expired_leases
SELECT job_id, tenant_id, attempt, max_attempts, fence, deadline_at, state_version
FROM extraction_jobs
WHERE state = 'RUNNING' AND lease_until <= %(now)s
ORDER BY lease_until
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED

-- name: reap_to_retry
-- The attempt counter is kept as it is: a restart never gives a job its attempts back.
UPDATE extraction_jobs
SET state = 'RETRY_SCHEDULED', fence = fence + 1, lease_owner = NULL, lease_until = NULL,
    next_attempt_at = %(next_attempt_at)s, state_version = state_version + 1, updated_at = %(now)s,
    last_error = %(error)s
WHERE job_id = %(job_id)s AND state = 'RUNNING' AND fence = %(fence)s

-- name: lock_past_deadline
SELECT job_id, tenant_id, fence
FROM extraction_jobs
WHERE state IN ('READY', 'RETRY_SCHEDULED') AND deadline_at <= %(now)s
ORDER BY deadline_at
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED

-- name: fail_job_terminally
-- From RUNNING (lease expired), READY or RETRY_SCHEDULED (deadline passed): the end, with a reason.
UPDATE extraction_jobs
SET state = 'FAILED_TERMINAL', fence = fence + 1, lease_owner = NULL, lease_until = NULL,
    next_attempt_at = NULL, state_version = state_version + 1, updated_at = %(now)s,
    finished_at = %(now)s, last_error = %(error)s
WHERE job_id = %(job_id)s AND state IN ('READY', 'RUNNING', 'RETRY_SCHEDULED') AND fence = %(fence)s
RETURNING job_id, tenant_id, state_version, attempt
