-- extraction_results: the validated (or review-flagged) output of a job, written with the outcome that
-- produced it and read by the tenant through the job.

-- name: insert_result
INSERT INTO extraction_results (job_id, tenant_id, attempt, policy_version, result, review_reasons,
                                located_evidence)
VALUES (%(job_id)s, %(tenant_id)s, %(attempt)s, %(policy_version)s, %(result)s, %(review_reasons)s,
        %(located_evidence)s)

-- name: get_job_result
-- The job's accepted version: a reviewer's (version 2, migration 0014) when there is one, else the model's.
-- An approval keeps the reasons it overrode; a correction passed the policy, so it has none.
SELECT r.job_id, j.state,
       coalesce(d.result_version, 1) AS version,
       coalesce(d.policy_version, r.policy_version) AS policy_version,
       coalesce(d.result, r.result) AS result,
       CASE WHEN d.job_id IS NULL THEN r.located_evidence ELSE d.located_evidence END AS located_evidence,
       CASE WHEN d.decision = 'correct' THEN '[]'::jsonb ELSE r.review_reasons END AS review_reasons,
       coalesce(d.decided_at, r.created_at) AS created_at,
       d.decision, d.reviewer, d.note, d.decided_at,
       j.input_tokens, j.output_tokens, j.cost_usd, j.attempts_recorded
FROM extraction_results r
JOIN extraction_jobs j USING (job_id)
LEFT JOIN review_decisions d ON d.job_id = r.job_id
WHERE r.tenant_id = %(tenant_id)s AND r.job_id = %(job_id)s
