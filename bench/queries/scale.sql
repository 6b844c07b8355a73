-- The scale benchmark's own SQL (bench/scale.py): seeding each shape set-based, the plain claim it is
-- measured against, and the maintenance between shapes. Seeding runs as the owner with triggers off
-- (session_replication_role = replica); whatever the triggers would have kept is rebuilt afterwards by
-- tollgate_backfill_queues() where the schema has it. CHECK constraints still apply, so every seeded row
-- is one the application could have written.
--
-- Tenants are named '<group>:<ordinal>' (scale-runnable:000042), so a step can add jobs to a range of a
-- group's tenants without carrying their ids around.

-- name: scale_triggers_off
-- Superuser only; refused otherwise, and the benchmark then seeds with the triggers on.
SET session_replication_role = replica

-- name: scale_triggers_on
RESET session_replication_role

-- name: scale_seed_tenants
-- Tenants first..last of a group, each with one document that all its seeded jobs point at (a tenant
-- resending the same invoice is deduplicated the same way).
WITH made AS (
    INSERT INTO tenants (tenant_id, name)
    SELECT gen_random_uuid(), %(group)s::text || ':' || lpad(n::text, 6, '0')
    FROM generate_series(%(first)s::int, %(last)s::int) AS n
    RETURNING tenant_id
)
INSERT INTO documents (document_id, tenant_id, content_sha256, s3_key, s3_version_id, size_bytes, page_count)
SELECT gen_random_uuid(), tenant_id, encode(sha256(tenant_id::text::bytea), 'hex'),
       'tenants/' || tenant_id || '/documents/scale.json', 'scale', 1000, 1
FROM made

-- name: scale_seed_jobs
-- %(per_tenant)s jobs for each tenant first..last of a group, all in one state. Ids are random UUIDs, as
-- new_id makes them; creation times are spread over the hour before %(created_before)s, so tenants'
-- jobs interleave in time the way real arrivals do. next_attempt_at is set exactly for RETRY_SCHEDULED
-- (the retry_has_due_time constraint), spread over the hour after %(retry_after)s.
INSERT INTO extraction_jobs (
    job_id, tenant_id, idempotency_key, request_hash, job_type, document_id, schema_version, model_policy,
    priority, state, attempt, max_attempts, next_attempt_at, estimated_tokens, document_bytes, deadline_at,
    created_at, updated_at)
SELECT gen_random_uuid(), t.tenant_id, %(batch)s::text || '-' || n,
       encode(sha256(t.tenant_id::text::bytea), 'hex'), 'invoice_extraction', d.document_id, 'invoice.v1',
       'auto', 5, %(state)s::text, %(attempt)s::int, 5,
       CASE WHEN %(state)s::text = 'RETRY_SCHEDULED'
            THEN %(retry_after)s::timestamptz + random() * interval '1 hour' END,
       5000, 1000, %(deadline_at)s::timestamptz,
       %(created_before)s::timestamptz - random() * interval '1 hour', %(created_before)s::timestamptz
FROM tenants t
-- The tenant's seed document (its digest is made from the tenant's id), not the ones acceptance stored.
JOIN documents d ON d.tenant_id = t.tenant_id
                 AND d.content_sha256 = encode(sha256(t.tenant_id::text::bytea), 'hex')
CROSS JOIN generate_series(1, %(per_tenant)s::int) AS n
WHERE split_part(t.name, ':', 1) = %(group)s::text
  AND split_part(t.name, ':', 2)::int BETWEEN %(first)s::int AND %(last)s::int

-- name: scale_jobs_to_waiting_retries
-- Turns a group's unfinished jobs into retries waiting for their backoff: one attempt spent, the next one
-- due in the hour after %(retry_after)s, the deadline moved out past it.
UPDATE extraction_jobs j
SET state = 'RETRY_SCHEDULED', attempt = 1,
    next_attempt_at = %(retry_after)s::timestamptz + random() * interval '1 hour',
    deadline_at = %(deadline_at)s::timestamptz, state_version = j.state_version + 1, updated_at = now()
FROM tenants t
WHERE t.tenant_id = j.tenant_id AND split_part(t.name, ':', 1) = %(group)s::text
  AND j.state IN ('READY', 'RETRY_SCHEDULED')

-- name: scale_group_tenants
SELECT tenant_id FROM tenants WHERE split_part(name, ':', 1) = %(group)s::text

-- name: scale_tenant_document
SELECT document_id FROM documents
WHERE tenant_id = %(tenant_id)s AND content_sha256 = encode(sha256(tenant_id::text::bytea), 'hex')

-- name: scale_job_counts
-- What a shape holds, as the claim sees it: runnable, waiting for backoff, past deadline, running.
SELECT count(*) FILTER (WHERE state = 'READY' AND deadline_at > now()) AS ready,
       count(*) FILTER (WHERE state = 'RETRY_SCHEDULED' AND next_attempt_at > now()) AS waiting_retries,
       count(*) FILTER (WHERE state IN ('READY', 'RETRY_SCHEDULED') AND deadline_at <= now()) AS past_deadline,
       count(*) FILTER (WHERE state = 'RUNNING') AS running,
       count(*) AS jobs,
       (SELECT count(*) FROM tenants) AS tenants
FROM extraction_jobs

-- name: scale_empty
-- Between families of shapes: no tenants, documents, jobs or events (and, by CASCADE, nothing that
-- refers to them). Counters not tied to a tenant are rebuilt by the backfill that follows every seed.
TRUNCATE extraction_jobs, documents, outbox_events, tenants CASCADE

-- name: scale_has_backfill
-- Whether the schema keeps run-queue and counter rows that a seed with triggers off must rebuild.
SELECT EXISTS (
    SELECT 1 FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
    WHERE n.nspname = 'public' AND p.proname = 'tollgate_backfill_queues'
) AS present

-- name: scale_backfill
-- The tenants' counters, then (where the schema has them, migration 0017) the run-queue rows per tier.
SELECT tollgate_backfill_queues(),
       (SELECT count(*) FROM (SELECT tollgate_backfill_tier_queues()
                              WHERE to_regproc('tollgate_backfill_tier_queues') IS NOT NULL) AS tiers)

-- name: scale_vacuum_analyze
-- After a seed: hint bits set, visibility map current, statistics fresh, so the first measured claim does
-- not pay for the bulk load.
VACUUM (ANALYZE)

-- name: scale_create_plain_index
-- The plain claim's index, made only while a shape's claims are measured. Its first column is the
-- expression -priority, which no project query orders by, so the fair claim and the peek can never use it:
-- it makes the floor cheap without making the fair claim cheaper too. Dropped before acceptance is
-- measured, so inserts do not pay for it.
CREATE INDEX scale_plain_claim_order ON extraction_jobs ((-priority), created_at)
    WHERE state IN ('READY', 'RETRY_SCHEDULED')

-- name: scale_drop_plain_index
DROP INDEX IF EXISTS scale_plain_claim_order

-- name: scale_plain_claim
-- The floor: the cheapest claim this table allows. The first row of one index that no other worker holds,
-- moved to RUNNING the way claim_next_job moves it, in one statement as claim_next_job is. It knows nothing
-- of tenants, backoff or deadlines (it would take a waiting retry or an expired job), so its plan is the
-- same in every shape: what the fair claim adds on top of it is what a correct, fair pick costs.
WITH picked AS (
    SELECT j.job_id
    FROM extraction_jobs j
    WHERE j.state IN ('READY', 'RETRY_SCHEDULED')
    ORDER BY -j.priority, j.created_at
    LIMIT 1
    FOR UPDATE SKIP LOCKED
)
UPDATE extraction_jobs j
SET state = 'RUNNING', attempt = j.attempt + 1, fence = j.fence + 1, lease_owner = %(worker_id)s,
    lease_until = %(lease_until)s, next_attempt_at = NULL, state_version = j.state_version + 1,
    updated_at = %(now)s
FROM picked
WHERE j.job_id = picked.job_id
RETURNING j.job_id, j.tenant_id

-- name: scale_plain_claim_plan
-- The plan of the floor, to show in the results that it walks its own index.
EXPLAIN (FORMAT JSON)
SELECT j.job_id
FROM extraction_jobs j
WHERE j.state IN ('READY', 'RETRY_SCHEDULED')
ORDER BY -j.priority, j.created_at
LIMIT 1
FOR UPDATE SKIP LOCKED
