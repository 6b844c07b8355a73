-- Queries only the drain benchmark runs, as the scratch database's owner (no row-level security).

-- name: reset_work
-- Each scenario starts from an empty backlog; tenants and their suppliers stay.
TRUNCATE outbox_events, extraction_results, job_attempts, extraction_jobs, documents CASCADE

-- name: job_state
SELECT state, created_at, finished_at FROM extraction_jobs WHERE job_id = %(job_id)s

-- name: unfinished_jobs
-- Jobs of these tenants not yet in a terminal state: the loop's stop condition.
SELECT count(*) AS unfinished
FROM extraction_jobs
WHERE tenant_id = ANY(%(tenant_ids)s::uuid[])
  AND state NOT IN ('SUCCEEDED', 'REVIEW_REQUIRED', 'FAILED_TERMINAL', 'CANCELLED')

-- name: job_times
-- Every job of the scenario: whose, where it ended, and when it was accepted and finished.
SELECT tenant_id, state, created_at, finished_at, estimated_tokens, attempt
FROM extraction_jobs

-- name: attempt_outcomes
SELECT coalesce(outcome, 'unfinished') AS outcome, count(*) AS attempts
FROM job_attempts
GROUP BY 1
ORDER BY 2 DESC

-- name: call_latency
SELECT avg(latency_ms) / 1000.0 AS mean_s FROM job_attempts WHERE outcome = 'ok'

-- name: job_breakdown
-- Where a job's time went: waiting to be claimed, then its attempts (provider calls and the rest).
SELECT j.job_id, j.tenant_id, j.state, j.created_at, j.finished_at,
       min(a.started_at) AS first_claimed_at, coalesce(sum(a.latency_ms), 0) / 1000.0 AS call_s,
       count(a.attempt) AS attempts
FROM extraction_jobs j
LEFT JOIN job_attempts a USING (job_id)
WHERE j.tenant_id = ANY(%(tenant_ids)s::uuid[])
GROUP BY j.job_id

-- name: copy_tenants
-- %(count)s tenants named %(prefix)s000001, %(prefix)s000002, ... in one statement, each with the currencies
-- and suppliers of the template tenant (made by create_tenant and add_supplier): a thousand light tenants
-- through those would be twelve thousand transactions. The trigger on tenants gives each its run-queue row,
-- as it does for create_tenant; the copies get no API key, since the benchmark accepts jobs in-process.
WITH made AS (
    INSERT INTO tenants (tenant_id, name, allowed_currencies)
    SELECT gen_random_uuid(), %(prefix)s::text || lpad(n::text, 6, '0'), t.allowed_currencies
    FROM tenants t CROSS JOIN generate_series(1, %(count)s::int) AS n
    WHERE t.tenant_id = %(template)s
    RETURNING tenant_id, name
), suppliers AS (
    INSERT INTO tenant_suppliers (supplier_id, tenant_id, name, normalized_name, iban)
    SELECT gen_random_uuid(), made.tenant_id, s.name, s.normalized_name, s.iban
    FROM made CROSS JOIN tenant_suppliers s
    WHERE s.tenant_id = %(template)s
)
SELECT tenant_id FROM made ORDER BY name

-- name: tier_job_times
-- The tier benchmark's jobs: their tier, and when each was accepted, first claimed and finished.
SELECT j.job_id, j.service_tier, j.state, j.created_at, j.finished_at, min(a.started_at) AS first_claimed_at,
       coalesce(sum(a.latency_ms), 0) / 1000.0 AS call_s
FROM extraction_jobs j
LEFT JOIN job_attempts a USING (job_id)
WHERE j.tenant_id = ANY(%(tenant_ids)s::uuid[])
GROUP BY j.job_id
