-- Reads of unfinished work: admission's (acceptance) and the scheduler's gauges, from the counters of
-- tenant_queues and backlog_shards (migration 0010) and index ends; outbox_events and execution_inbox for
-- the relay's gauges. They write nothing.

-- name: tenant_admission
-- All that admission reads, in one statement that counts nothing: the tenant's limits (no row when the
-- tenant is gone), its unfinished work from its counters, and the system backlog from the shards.
SELECT t.max_pending_jobs, t.max_pending_bytes, t.max_pending_tokens,
       q.pending_jobs AS jobs, q.pending_bytes AS bytes, q.pending_tokens AS tokens,
       (SELECT coalesce(sum(unfinished), 0)::bigint FROM backlog_shards) AS backlog
FROM tenants t JOIN tenant_queues q USING (tenant_id)
WHERE t.tenant_id = %(tenant_id)s

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
