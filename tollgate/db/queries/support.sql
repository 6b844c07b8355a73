-- Support staff's queries (tollgate_system): inspect jobs, reset exhausted ones, keep the audit trail.

-- name: support_get_job
SELECT job_id, tenant_id, state, attempt, max_attempts, fence, deadline_at, last_error, created_at,
       finished_at, state_version
FROM extraction_jobs WHERE job_id = %(job_id)s

-- name: support_list_jobs
-- The tenant is resolved to its id first, so an unknown name is an error rather than an empty list.
SELECT j.job_id, j.tenant_id, t.name AS tenant, j.job_type, j.state, j.attempt, j.max_attempts, j.created_at,
       j.finished_at, j.last_error->>'reason' AS reason
FROM extraction_jobs j JOIN tenants t USING (tenant_id)
WHERE (%(state)s::text IS NULL OR j.state = %(state)s::text)
  AND (%(tenant_id)s::uuid IS NULL OR j.tenant_id = %(tenant_id)s::uuid)
  AND (%(job_type)s::text IS NULL OR j.job_type = %(job_type)s::text)
ORDER BY j.created_at DESC
LIMIT %(limit)s

-- name: support_show_job
SELECT j.job_id, j.tenant_id, t.name AS tenant, j.job_type, j.service_tier, j.priority, j.state,
       j.state_version, j.attempt, j.max_attempts, j.deadline_at, j.created_at, j.finished_at, j.last_error,
       r.policy_version, coalesce(r.review_reasons, '[]'::jsonb) AS review_reasons
FROM extraction_jobs j
JOIN tenants t USING (tenant_id)
LEFT JOIN extraction_results r USING (job_id)
WHERE j.job_id = %(job_id)s

-- name: support_job_attempts
SELECT attempt, fence, worker_id, started_at, finished_at, outcome, model, input_tokens, output_tokens,
       cost_usd, latency_ms, provider_request_id, error
FROM job_attempts WHERE job_id = %(job_id)s ORDER BY attempt

-- name: reset_failed_job
-- A new attempt budget (and deadline) for a job that failed terminally; never for any other state.
UPDATE extraction_jobs
SET state = 'READY', max_attempts = attempt + %(extra_attempts)s, fence = fence + 1,
    deadline_at = greatest(deadline_at, %(now)s + make_interval(secs => %(deadline_seconds)s)),
    finished_at = NULL, next_attempt_at = NULL, state_version = state_version + 1, updated_at = %(now)s,
    last_error = jsonb_build_object('reason', 'redriven', 'previous', last_error)
WHERE job_id = %(job_id)s AND state = 'FAILED_TERMINAL'
RETURNING job_id, tenant_id, state_version, job_type

-- name: insert_audit
INSERT INTO support_audit (actor, reason, action, target, outcome, details)
VALUES (%(actor)s, %(reason)s, %(action)s, %(target)s, %(outcome)s, %(details)s)
RETURNING audit_id

-- name: audit_for_target
SELECT audit_id, actor, reason, action, outcome, details, created_at
FROM support_audit WHERE target = %(target)s ORDER BY audit_id

-- name: support_lock_job
-- The job a support action is about to change, locked until the action's transaction (its audit row
-- included) commits, so the decision recorded is the one made on the state that was changed.
SELECT job_id, tenant_id, state, attempt, max_attempts, fence, deadline_at, last_error, created_at,
       finished_at, state_version
FROM extraction_jobs WHERE job_id = %(job_id)s
FOR UPDATE
