-- Reviews (migration 0014): jobs waiting in REVIEW_REQUIRED, listed oldest first, read with their result and
-- decided once. Tenant queries (the API, tollgate_app) name their tenant; the CLI's cross-tenant listings run
-- as tollgate_system. Each listing walks one index from the start of its page: extraction_jobs_awaiting_review
-- or extraction_jobs_review_age unfiltered, review_queue's by reason.

-- name: get_review
-- A job with what a reviewer reads or decides on: its state and version, its model result (version 1) and
-- its document, and the decision once there is one.
SELECT j.job_id, j.tenant_id, j.state, j.state_version, j.attempt, j.finished_at, j.document_id,
       j.trace_context, j.job_type, j.options,
       r.policy_version, r.result, r.review_reasons, r.located_evidence, r.created_at AS result_created_at,
       d.decision, d.note, d.reviewer, d.reviewer_key_id, d.state_version AS decided_on_version,
       d.review_requested_at, d.decided_at, d.result_version, d.corrections
FROM extraction_jobs j
LEFT JOIN extraction_results r ON r.job_id = j.job_id
LEFT JOIN review_decisions d ON d.job_id = j.job_id
WHERE j.tenant_id = %(tenant_id)s AND j.job_id = %(job_id)s

-- name: list_reviews
-- The tenant's waiting reviews, oldest wait first; the cursor is the (waiting_since, job_id) of the last row
-- of the previous page.
SELECT j.job_id, j.tenant_id, j.state_version, j.finished_at AS waiting_since, j.metadata,
       r.policy_version, r.review_reasons
FROM extraction_jobs j
JOIN extraction_results r ON r.job_id = j.job_id
WHERE j.tenant_id = %(tenant_id)s AND j.state = 'REVIEW_REQUIRED'
  AND (%(after_waiting_since)s::timestamptz IS NULL
       OR (j.finished_at, j.job_id) > (%(after_waiting_since)s::timestamptz, %(after_job_id)s::uuid))
ORDER BY j.finished_at, j.job_id
LIMIT %(limit)s

-- name: list_reviews_by_reason
-- As list_reviews, only jobs whose result broke the rule with this code (one queue row per code).
SELECT j.job_id, j.tenant_id, j.state_version, q.waiting_since, j.metadata, r.policy_version,
       r.review_reasons
FROM review_queue q
JOIN extraction_jobs j ON j.job_id = q.job_id
JOIN extraction_results r ON r.job_id = q.job_id
WHERE q.tenant_id = %(tenant_id)s AND q.reason_code = %(reason)s AND j.state = 'REVIEW_REQUIRED'
  AND (%(after_waiting_since)s::timestamptz IS NULL
       OR (q.waiting_since, q.job_id) > (%(after_waiting_since)s::timestamptz, %(after_job_id)s::uuid))
ORDER BY q.waiting_since, q.job_id
LIMIT %(limit)s

-- name: list_all_reviews
-- Every tenant's waiting reviews, oldest wait first (the CLI, as tollgate_system).
SELECT j.job_id, j.tenant_id, t.name AS tenant, j.state_version, j.finished_at AS waiting_since,
       j.metadata, r.policy_version, r.review_reasons
FROM extraction_jobs j
JOIN extraction_results r ON r.job_id = j.job_id
JOIN tenants t ON t.tenant_id = j.tenant_id
WHERE j.state = 'REVIEW_REQUIRED'
  AND (%(after_waiting_since)s::timestamptz IS NULL
       OR (j.finished_at, j.job_id) > (%(after_waiting_since)s::timestamptz, %(after_job_id)s::uuid))
ORDER BY j.finished_at, j.job_id
LIMIT %(limit)s

-- name: list_all_reviews_by_reason
SELECT j.job_id, j.tenant_id, t.name AS tenant, j.state_version, q.waiting_since, j.metadata,
       r.policy_version, r.review_reasons
FROM review_queue q
JOIN extraction_jobs j ON j.job_id = q.job_id
JOIN extraction_results r ON r.job_id = q.job_id
JOIN tenants t ON t.tenant_id = q.tenant_id
WHERE q.reason_code = %(reason)s AND j.state = 'REVIEW_REQUIRED'
  AND (%(after_waiting_since)s::timestamptz IS NULL
       OR (q.waiting_since, q.job_id) > (%(after_waiting_since)s::timestamptz, %(after_job_id)s::uuid))
ORDER BY q.waiting_since, q.job_id
LIMIT %(limit)s

-- name: find_review_tenant
-- The tenant of a job named by id alone (the CLI); the use cases then run as for that tenant.
SELECT tenant_id FROM extraction_jobs WHERE job_id = %(job_id)s

-- name: decide_review
-- The one way out of REVIEW_REQUIRED, and the decision's record, in one statement. The update is fenced on
-- the state_version the reviewer read (If-Match): of two reviewers deciding at once, the second's update
-- waits for the first's commit, then finds the version moved and changes nothing, so no row comes back and
-- the use case answers 412. The job's finish time becomes the decision's; the queue rows go (trigger).
WITH decided AS (
    UPDATE extraction_jobs
    SET state = %(state)s, state_version = state_version + 1, finished_at = %(now)s, updated_at = %(now)s
    WHERE tenant_id = %(tenant_id)s AND job_id = %(job_id)s AND state = 'REVIEW_REQUIRED'
      AND state_version = %(state_version)s
    RETURNING job_id, tenant_id, state, state_version, attempt, trace_context
), recorded AS (
    INSERT INTO review_decisions (
        job_id, tenant_id, decision, note, reviewer, reviewer_key_id, state_version, reasons,
        review_requested_at, decided_at, result_version, result, policy_version, corrections,
        located_evidence)
    SELECT job_id, tenant_id, %(decision)s, %(note)s, %(reviewer)s, %(reviewer_key_id)s, %(state_version)s,
           %(reasons)s, %(review_requested_at)s, %(now)s, %(result_version)s, %(result)s, %(policy_version)s,
           %(corrections)s, %(located_evidence)s
    FROM decided
)
SELECT * FROM decided

-- name: count_review_decisions
-- Decisions whose metrics are not yet published, oldest first, marked as published in the scheduler's
-- transaction; it publishes them after the commit. A crash between the two loses that tick's figures, never
-- counts one twice.
UPDATE review_decisions d
SET counted_at = %(now)s
FROM (
    SELECT job_id FROM review_decisions
    WHERE counted_at IS NULL
    ORDER BY decided_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
) due
WHERE d.job_id = due.job_id
RETURNING d.decision, extract(epoch FROM d.decided_at - d.review_requested_at)::float8 AS waited_seconds

-- name: review_queue_gauges
-- How many reviews wait and since when: the ends and the size of a partial index of waiting jobs only.
SELECT (SELECT min(finished_at) FROM extraction_jobs WHERE state = 'REVIEW_REQUIRED') AS oldest,
       (SELECT count(*) FROM extraction_jobs WHERE state = 'REVIEW_REQUIRED') AS waiting
