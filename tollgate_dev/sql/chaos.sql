-- The chaos run's outage of a PostgreSQL server it does not own (run as the connecting owner, autocommit).

-- name: chaos_sever_connections
SELECT count(pg_terminate_backend(pid)) AS severed
FROM pg_stat_activity
WHERE datname = %(database)s AND pid <> pg_backend_pid()

-- name: chaos_job_milestones
-- How far the run's jobs got, for arming its faults: claimed at least once (every claim counts an attempt),
-- and finished.
SELECT count(*) FILTER (WHERE attempt > 0) AS running,
       count(*) FILTER (WHERE state = ANY(%(terminal_states)s)) AS finished
FROM extraction_jobs
WHERE tenant_id = ANY(%(tenant_ids)s)

-- name: chaos_open_batches
-- Provider batches of the run's tenants not yet settled: a batch whose jobs all finished may still be
-- settling (a cancelled member waits for its batch's end, a poller killed on the last line leaves it to the
-- next), and the run has not settled until it is done.
SELECT count(*) AS open
FROM provider_batches b
WHERE b.settled_at IS NULL AND EXISTS (
    SELECT 1 FROM provider_batch_jobs m WHERE m.batch_id = b.batch_id AND m.tenant_id = ANY(%(tenant_ids)s))
