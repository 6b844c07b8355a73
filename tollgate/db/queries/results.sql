-- extraction_results: the validated (or review-flagged) output of a job, written with the outcome that
-- produced it and read by the tenant through the job.

-- name: insert_result
INSERT INTO extraction_results (job_id, tenant_id, attempt, policy_version, result, review_reasons)
VALUES (%(job_id)s, %(tenant_id)s, %(attempt)s, %(policy_version)s, %(result)s, %(review_reasons)s)

-- name: get_job_result
SELECT r.job_id, j.state, r.policy_version, r.result, r.review_reasons, r.created_at
FROM extraction_results r JOIN extraction_jobs j USING (job_id)
WHERE r.tenant_id = %(tenant_id)s AND r.job_id = %(job_id)s
