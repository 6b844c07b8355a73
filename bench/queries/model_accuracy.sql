-- Queries only the model accuracy benchmark runs, as the scratch database's owner: where each job ended,
-- what it stored, and what each of its attempts cost.

-- name: model_job_outcome
SELECT state, attempt, max_attempts, next_attempt_at, last_error, created_at, finished_at
FROM extraction_jobs
WHERE job_id = %(job_id)s

-- name: model_job_result
SELECT result, review_reasons, policy_version FROM extraction_results WHERE job_id = %(job_id)s

-- name: model_job_attempts
SELECT attempt, outcome, model, input_tokens, output_tokens, latency_ms, error
FROM job_attempts
WHERE job_id = %(job_id)s
ORDER BY attempt
