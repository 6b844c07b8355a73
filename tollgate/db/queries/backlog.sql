-- Reads of unfinished work: admission's (acceptance) and the scheduler's gauges, from the counters of
-- tenant_queues and backlog_shards (migration 0010) and index ends; outbox_events and execution_inbox for
-- the relay's gauges. They write nothing.

-- name: tenant_pending_usage
-- The tenant's unfinished work, from its counters (migration 0010): one row, whatever its backlog.
SELECT pending_jobs AS jobs, pending_bytes AS bytes, pending_tokens AS tokens
FROM tenant_queues
WHERE tenant_id = %(tenant_id)s

-- name: system_backlog
SELECT coalesce(sum(unfinished), 0)::bigint AS backlog FROM backlog_shards

-- name: backlog_metrics
-- Counters and index ends, never a scan of the jobs: running and unfinished from the shards; waiting
-- retries are an index range of the retries not yet due; the oldest eligible job is the first entry of two
-- indexes (READY by age, retries by due time).
WITH shards AS (
    SELECT coalesce(sum(unfinished), 0)::bigint AS unfinished, coalesce(sum(running), 0)::bigint AS running
    FROM backlog_shards
), waiting AS (
    SELECT count(*) AS waiting FROM extraction_jobs
    WHERE state = 'RETRY_SCHEDULED' AND next_attempt_at > %(now)s
)
SELECT shards.unfinished - shards.running - waiting.waiting AS runnable,
       shards.running,
       waiting.waiting,
       least(
           (SELECT min(created_at) FROM extraction_jobs WHERE state = 'READY'),
           (SELECT min(next_attempt_at) FROM extraction_jobs
            WHERE state = 'RETRY_SCHEDULED' AND next_attempt_at <= %(now)s)
       ) AS oldest_eligible
FROM shards, waiting

-- name: oldest_unpublished_outbox
SELECT min(created_at) AS oldest, count(*) AS unpublished
FROM outbox_events WHERE published_at IS NULL

-- name: pipeline_progress
SELECT (SELECT count(*) FROM outbox_events) AS events,
       (SELECT count(*) FROM outbox_events WHERE published_at IS NOT NULL) AS published,
       (SELECT count(*) FROM execution_inbox) AS received
