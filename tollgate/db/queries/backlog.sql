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

-- name: limit_shard_lock_wait
-- The shard check waits this long at most for its locks: a statement changing several jobs takes their shards
-- in job order, not shard order, so waiting for all sixteen could close a cycle with it. Below PostgreSQL's
-- deadlock_timeout (1 s), so the check gives way first, and the next tick checks again.
SET LOCAL lock_timeout = '500ms'

-- name: lock_backlog_shards
-- Every shard, in one order: until the commit no job changes state, so the run-queue rows and the shards
-- each statement after this reads are two counts of the same jobs.
SELECT shard FROM backlog_shards ORDER BY shard FOR UPDATE

-- name: backlog_shards_drift
-- With the shards locked: the trigger changes a tenant's queue row and a shard in one statement, so the
-- shards' sums equal the queue rows' (which the per-tenant recount keeps true) unless one of them drifted.
-- Reads one row per tenant and 16 shards; counts no job.
WITH rows AS (
    SELECT coalesce(sum(pending_jobs), 0)::bigint AS unfinished,
           coalesce(sum(running_jobs), 0)::bigint AS running
    FROM tenant_queues
), shards AS (
    SELECT sum(unfinished)::bigint AS unfinished, sum(running)::bigint AS running FROM backlog_shards
)
SELECT rows.unfinished AS queued_unfinished, rows.running AS queued_running,
       shards.unfinished AS shard_unfinished, shards.running AS shard_running,
       (rows.unfinished, rows.running) IS DISTINCT FROM (shards.unfinished, shards.running) AS drifted
FROM rows, shards

-- name: recount_backlog_shards
-- With the shards locked, after the sums disagreed: each shard set to a recount of its jobs (one pass over
-- the unfinished jobs, while every job change waits; it runs only then). A row per shard the recount
-- changed: none means the shards were right and a queue row is what drifted.
UPDATE backlog_shards b
SET unfinished = coalesce(c.unfinished, 0), running = coalesce(c.running, 0)
FROM backlog_shards kept
JOIN (SELECT generate_series(0, 15)::smallint AS shard) s ON s.shard = kept.shard
LEFT JOIN (
    SELECT job_backlog_shard(job_id) AS shard,
           count(*) AS unfinished,
           count(*) FILTER (WHERE state = 'RUNNING') AS running
    FROM extraction_jobs
    WHERE state IN ('READY', 'RUNNING', 'RETRY_SCHEDULED')
    GROUP BY 1
) c ON c.shard = s.shard
WHERE b.shard = s.shard
  AND (kept.unfinished, kept.running) IS DISTINCT FROM (coalesce(c.unfinished, 0), coalesce(c.running, 0))
RETURNING b.shard
