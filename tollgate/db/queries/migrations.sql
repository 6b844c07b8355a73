-- schema_migrations: the migration runner's record of applied files, and the advisory lock that lets
-- only one runner apply them at a time.

-- name: migrations_lock
SELECT pg_advisory_lock(%(lock_id)s)

-- name: migrations_unlock
SELECT pg_advisory_unlock(%(lock_id)s)

-- name: migrations_create_table
CREATE TABLE IF NOT EXISTS schema_migrations (
    version     integer PRIMARY KEY,
    name        text NOT NULL,
    checksum    text NOT NULL,
    applied_at  timestamptz NOT NULL DEFAULT now()
)

-- name: migrations_applied
SELECT version, name, checksum FROM schema_migrations ORDER BY version

-- name: migrations_record
INSERT INTO schema_migrations (version, name, checksum) VALUES (%(version)s, %(name)s, %(checksum)s)
