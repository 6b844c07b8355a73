-- The open-loop benchmark's own SQL (bench/openloop.py): the low-quota tenant's limit, the backlog sampled
-- every second while arrivals run, and every job at the end, so each accepted request can be explained.

-- name: openloop_set_tenant_quota
-- The per-tenant limit admission reads (tenants.max_pending_jobs) before the deployment's default.
UPDATE tenants SET max_pending_jobs = %(max_pending_jobs)s WHERE tenant_id = %(tenant_id)s

-- name: openloop_backlog_sample
-- What admission reads (the backlog shards) beside a recount of the jobs, so a drift between them shows.
-- The recount scans a few thousand rows at most in this benchmark, once a second.
SELECT (SELECT coalesce(sum(unfinished), 0) FROM backlog_shards)::bigint AS counted,
       count(*) FILTER (WHERE state NOT IN ('SUCCEEDED', 'REVIEW_REQUIRED', 'FAILED_TERMINAL', 'CANCELLED'))
           AS unfinished,
       count(*) FILTER (WHERE state = 'RUNNING') AS running,
       count(*) FILTER (WHERE state IN ('SUCCEEDED', 'REVIEW_REQUIRED', 'FAILED_TERMINAL', 'CANCELLED'))
           AS finished,
       count(*) AS jobs
FROM extraction_jobs

-- name: openloop_jobs
-- Every job in the scratch database: only the benchmark's requests made any.
SELECT job_id, tenant_id, idempotency_key, state, created_at, finished_at FROM extraction_jobs

-- name: openloop_reserved_tokens
-- What the budget reserves per job on average (the acceptance estimate), to say which provider limit binds.
SELECT avg(estimated_tokens)::float AS mean FROM extraction_jobs
