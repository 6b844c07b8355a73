-- The chaos run's outage of a PostgreSQL server it does not own (run as the connecting owner, autocommit).

-- name: chaos_sever_connections
SELECT count(pg_terminate_backend(pid)) AS severed
FROM pg_stat_activity
WHERE datname = %(database)s AND pid <> pg_backend_pid()
