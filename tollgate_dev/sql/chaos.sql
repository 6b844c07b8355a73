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
