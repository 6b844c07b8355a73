-- Queries only the benchmarks run: scratch databases, resets between scenarios, and server facts.
-- Identifiers in braces are filled in with psycopg.sql.Identifier, never by string formatting.

-- name: create_database
CREATE DATABASE {name}

-- name: drop_database
DROP DATABASE IF EXISTS {name} WITH (FORCE)

-- name: reset_accepted_work
-- Every scenario starts from an empty backlog: admission counts unfinished jobs, so a backlog left by
-- the previous scenario would make the next one slower for reasons that are not its own.
TRUNCATE outbox_events, extraction_jobs, documents CASCADE

-- name: count_accepted_work
SELECT (SELECT count(*) FROM extraction_jobs) AS jobs,
       (SELECT count(*) FROM outbox_events) AS outbox,
       (SELECT count(*) FROM outbox_events WHERE published_at IS NULL) AS unpublished,
       (SELECT count(*) FROM documents) AS documents

-- name: server_facts
-- Commit cost is mostly WAL flushing, so the settings that govern it go in the report with the figures.
SELECT current_setting('server_version') AS server_version,
       current_setting('fsync') AS fsync,
       current_setting('synchronous_commit') AS synchronous_commit,
       current_setting('wal_sync_method') AS wal_sync_method,
       current_setting('shared_buffers') AS shared_buffers

-- name: check_accepted_jobs
-- Did each request of a row leave its own job, under its own tenant? Keys are unique across a run, so a
-- key alone finds the job; a missing key or a job under another tenant means a request was answered as
-- if it were a different one.
SELECT count(j.job_id) AS found,
       count(*) FILTER (WHERE j.job_id IS NULL) AS missing,
       count(*) FILTER (WHERE j.tenant_id <> sent.tenant_id) AS wrong_tenant
FROM unnest(%(keys)s::text[], %(tenants)s::uuid[]) AS sent (idempotency_key, tenant_id)
LEFT JOIN extraction_jobs j ON j.idempotency_key = sent.idempotency_key

-- name: job_states
-- In the full local system the workers take jobs while a row runs; this says how far they got.
SELECT state, count(*) AS jobs FROM extraction_jobs GROUP BY state ORDER BY state
