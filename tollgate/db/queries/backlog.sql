-- Reads of unfinished work across extraction_jobs, outbox_events and execution_inbox: admission's counts
-- (acceptance) and the scheduler's gauges. They write nothing. The counters of DESIGN §4 replace these
-- scans, and keeping them together keeps that change in one file.

-- name: tenant_pending_usage
SELECT count(*) AS jobs,
       coalesce(sum(document_bytes), 0)::bigint AS bytes,
       coalesce(sum(estimated_tokens), 0)::bigint AS tokens
FROM extraction_jobs
WHERE tenant_id = %(tenant_id)s AND state IN ('READY', 'RUNNING', 'RETRY_SCHEDULED')

-- name: system_backlog
SELECT system_backlog(%(cap)s) AS backlog

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

-- name: oldest_unpublished_outbox
SELECT min(created_at) AS oldest, count(*) AS unpublished
FROM outbox_events WHERE published_at IS NULL

-- name: pipeline_progress
SELECT (SELECT count(*) FROM outbox_events) AS events,
       (SELECT count(*) FROM outbox_events WHERE published_at IS NOT NULL) AS published,
       (SELECT count(*) FROM execution_inbox) AS received
