-- Read-only summaries for the demo, the support CLI and reports (tollgate_system).

-- name: job_states_for_tenants
SELECT state, count(*) AS jobs FROM extraction_jobs
WHERE tenant_id = ANY(%(tenant_ids)s)
GROUP BY state

-- name: jobs_for_tenants
SELECT j.job_id, j.tenant_id, j.state, j.attempt, j.metadata, j.last_error, j.created_at, j.finished_at,
       r.review_reasons
FROM extraction_jobs j LEFT JOIN extraction_results r USING (job_id)
WHERE j.tenant_id = ANY(%(tenant_ids)s)

-- name: attempts_by_model
SELECT coalesce(a.model, '(no call)') AS model, count(*) AS attempts,
       coalesce(sum(a.input_tokens), 0) AS input_tokens, coalesce(sum(a.output_tokens), 0) AS output_tokens,
       coalesce(sum(a.cost_usd), 0) AS cost_usd,
       count(*) FILTER (WHERE a.outcome IS DISTINCT FROM 'ok') AS failed_attempts
FROM job_attempts a WHERE a.tenant_id = ANY(%(tenant_ids)s)
GROUP BY 1 ORDER BY 1

-- name: completion_latency
SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM finished_at - created_at)) AS p50,
       percentile_cont(0.95) WITHIN GROUP (ORDER BY extract(epoch FROM finished_at - created_at)) AS p95
FROM extraction_jobs WHERE tenant_id = ANY(%(tenant_ids)s) AND finished_at IS NOT NULL

-- name: delivery_states_for_tenants
SELECT state, count(*) AS deliveries FROM webhook_deliveries
WHERE tenant_id = ANY(%(tenant_ids)s)
GROUP BY state
