-- job_attempts: one row per claim of a job, opened by the claim (claim_tenant_job in jobs.sql) and closed
-- by the outcome, the reaper or a release. Keyed by (job_id, attempt) and written under the claim's fence, like the job itself.

-- name: record_attempt
UPDATE job_attempts
SET finished_at = %(now)s, outcome = %(outcome)s, model = %(model)s, input_tokens = %(input_tokens)s,
    output_tokens = %(output_tokens)s, cost_usd = %(cost_usd)s, latency_ms = %(latency_ms)s,
    provider_request_id = %(provider_request_id)s, error = %(error)s, batch_id = %(batch_id)s,
    discount_usd = %(discount_usd)s
WHERE job_id = %(job_id)s AND attempt = %(attempt)s AND fence = %(fence)s

-- name: close_open_attempt
UPDATE job_attempts
SET finished_at = %(now)s, outcome = %(outcome)s
WHERE job_id = %(job_id)s AND fence = %(fence)s AND finished_at IS NULL

-- name: list_job_attempts
-- A tenant's view of one job's attempts, oldest first (row-level security keeps it to the tenant's own).
SELECT attempt, started_at, finished_at, outcome, model, input_tokens, output_tokens, cost_usd, latency_ms,
       error
FROM job_attempts
WHERE tenant_id = %(tenant_id)s AND job_id = %(job_id)s
ORDER BY attempt

-- name: job_outcome_totals
-- What an outcome event reports about the job's usage, read in the transaction that writes the event (after
-- the finishing attempt's record_attempt): sums over the job's attempt rows, found through the primary key
-- (job_id, attempt), so the cost is bounded by the job's attempt count, never by the table; and the model of
-- its last attempt that called one. Cost keeps the attempts' six places, also when there is none to sum.
SELECT j.job_type,
       (SELECT a.model FROM job_attempts a
        WHERE a.job_id = j.job_id AND a.model IS NOT NULL
        ORDER BY a.attempt DESC LIMIT 1) AS model,
       t.attempts, t.input_tokens, t.output_tokens, t.cost_usd
FROM extraction_jobs j
CROSS JOIN LATERAL (
    SELECT count(*)::integer AS attempts,
           coalesce(sum(a.input_tokens), 0)::bigint AS input_tokens,
           coalesce(sum(a.output_tokens), 0)::bigint AS output_tokens,
           coalesce(sum(a.cost_usd), 0)::numeric(14, 6) AS cost_usd
    FROM job_attempts a
    WHERE a.job_id = j.job_id
) t
WHERE j.job_id = %(job_id)s
