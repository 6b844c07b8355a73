-- Queries only the batch path benchmark runs, as the scratch database's owner: where each path's jobs are,
-- what their attempts paid, and the provider batches the batch path made. Each path has its own tenant.

-- name: path_unfinished
-- Jobs of the path not yet in a state the run waits for (review is where a job stops without a reviewer),
-- and provider batches not yet settled: the run of a path ends when both are 0.
SELECT
    (SELECT count(*) FROM extraction_jobs
     WHERE tenant_id = %(tenant_id)s
       AND state NOT IN ('SUCCEEDED', 'REVIEW_REQUIRED', 'FAILED_TERMINAL', 'CANCELLED')) AS jobs,
    (SELECT count(*) FROM provider_batches WHERE settled_at IS NULL) AS open_batches

-- name: path_job_states
SELECT state, count(*) AS jobs
FROM extraction_jobs
WHERE tenant_id = %(tenant_id)s
GROUP BY state
ORDER BY state

-- name: path_attempts
-- Every attempt of the path's jobs, by how it went out (a provider batch's line or an immediate call), its
-- model and its outcome; sums are exact numerics, as stored.
SELECT
    (a.batch_id IS NOT NULL) AS via_batch,
    coalesce(a.model, '') AS model,
    coalesce(a.outcome, 'open') AS outcome,
    count(*) AS attempts,
    coalesce(sum(a.cost_usd), 0) AS cost_usd,
    coalesce(sum(a.discount_usd), 0) AS discount_usd,
    coalesce(sum(a.input_tokens), 0) AS input_tokens,
    coalesce(sum(a.output_tokens), 0) AS output_tokens
FROM job_attempts a
WHERE a.tenant_id = %(tenant_id)s
GROUP BY 1, 2, 3
ORDER BY 1, 2, 3

-- name: path_batches
-- The provider batches (only the batch path makes them): state, lines, bytes and enqueued tokens.
SELECT state, count(*) AS batches, coalesce(sum(request_count), 0) AS lines,
       coalesce(sum(request_bytes), 0) AS bytes, coalesce(sum(enqueued_tokens), 0) AS enqueued_tokens
FROM provider_batches
GROUP BY state
ORDER BY state

-- name: path_batch_members
SELECT coalesce(outcome, 'unsettled') AS outcome, count(*) AS members
FROM provider_batch_jobs
GROUP BY 1
ORDER BY 1
