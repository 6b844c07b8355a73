-- The scheduler's queries, run as tollgate_system across tenants. Time comes in as %(now)s so the rules
-- are tested with a controlled clock.

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

-- name: fail_job_terminally
-- From RUNNING (lease expired), READY or RETRY_SCHEDULED (deadline passed): the end, with a reason.
UPDATE extraction_jobs
SET state = 'FAILED_TERMINAL', fence = fence + 1, lease_owner = NULL, lease_until = NULL,
    next_attempt_at = NULL, state_version = state_version + 1, updated_at = %(now)s,
    finished_at = %(now)s, last_error = %(error)s
WHERE job_id = %(job_id)s AND state IN ('READY', 'RUNNING', 'RETRY_SCHEDULED') AND fence = %(fence)s
RETURNING job_id, tenant_id, state_version, attempt

-- name: close_open_attempt
UPDATE job_attempts
SET finished_at = %(now)s, outcome = %(outcome)s
WHERE job_id = %(job_id)s AND fence = %(fence)s AND finished_at IS NULL

-- name: lock_past_deadline
SELECT job_id, tenant_id, fence
FROM extraction_jobs
WHERE state IN ('READY', 'RETRY_SCHEDULED') AND deadline_at <= %(now)s
ORDER BY deadline_at
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED

-- name: backlog_metrics
SELECT count(*) FILTER (WHERE state = 'READY'
                           OR (state = 'RETRY_SCHEDULED' AND next_attempt_at <= %(now)s)) AS runnable,
       count(*) FILTER (WHERE state = 'RUNNING') AS running,
       count(*) FILTER (WHERE state = 'RETRY_SCHEDULED' AND next_attempt_at > %(now)s) AS waiting,
       min(CASE WHEN state = 'READY' THEN created_at
                WHEN state = 'RETRY_SCHEDULED' AND next_attempt_at <= %(now)s THEN next_attempt_at
           END) AS oldest_eligible
FROM extraction_jobs
WHERE state IN ('READY', 'RUNNING', 'RETRY_SCHEDULED')

-- name: pipeline_progress
SELECT (SELECT count(*) FROM outbox_events) AS events,
       (SELECT count(*) FROM outbox_events WHERE published_at IS NOT NULL) AS published,
       (SELECT count(*) FROM execution_inbox) AS received
