-- Seeds for the tests that assert a query's plan shape (tests/support.py, query_plan). A plan is chosen
-- from statistics, and TRUNCATE (clean_db) keeps a table's column statistics from its last ANALYZE, as
-- does an ANALYZE of an empty table: without a seed of their own, those tests planned with whatever rows
-- autovacuum last happened to sample from earlier tests. Each seed is a fixed shape; ANALYZE of it (every
-- row is sampled below 30,000) makes the statistics, and so the plan, the same on every run.

-- name: analyze_database
ANALYZE

-- name: seed_plan_document
INSERT INTO documents (document_id, tenant_id, content_sha256, s3_key, s3_version_id, size_bytes, page_count)
VALUES (gen_random_uuid(), %(tenant_id)s, encode(sha256(%(tenant_id)s::text::bytea), 'hex'),
        'tenants/' || %(tenant_id)s::text || '/documents/plan.json', 'plan', 1000, 1)
RETURNING document_id

-- name: seed_plan_jobs
-- The given number of jobs of the tenant, finished in one state a minute apart before the given time.
INSERT INTO extraction_jobs (
    job_id, tenant_id, idempotency_key, request_hash, job_type, document_id, schema_version, model_policy,
    priority, state, attempt, max_attempts, estimated_tokens, document_bytes, deadline_at, created_at,
    updated_at, finished_at)
SELECT gen_random_uuid(), %(tenant_id)s, %(state)s::text || '-' || n, repeat('0', 64), 'invoice_extraction',
       %(document_id)s, 'invoice.v1', 'auto', 5, %(state)s::text, 1, 5, 2000, 1000,
       %(finished_before)s::timestamptz + interval '1 day',
       %(finished_before)s::timestamptz - n * interval '1 minute' - interval '1 hour',
       %(finished_before)s::timestamptz - n * interval '1 minute',
       %(finished_before)s::timestamptz - n * interval '1 minute'
FROM generate_series(1, %(count)s::int) AS n

-- name: seed_plan_results
-- A result for each of the tenant's SUCCEEDED and REVIEW_REQUIRED jobs; a waiting job's result breaks one
-- rule, the codes taken in turn, so its queue row (trigger) is one of three reasons.
INSERT INTO extraction_results (job_id, tenant_id, attempt, policy_version, result, review_reasons)
SELECT job_id, tenant_id, 1, 'validation.v1', '{}'::jsonb,
       CASE WHEN state = 'REVIEW_REQUIRED'
            THEN jsonb_build_array(jsonb_build_object('code', (ARRAY[
                'total_mismatch', 'currency_not_allowed', 'supplier_unknown'])[1 + turn %% 3]))
            ELSE '[]'::jsonb END
FROM (
    SELECT job_id, tenant_id, state, row_number() OVER (ORDER BY finished_at, job_id) AS turn
    FROM extraction_jobs
    WHERE tenant_id = %(tenant_id)s AND state IN ('SUCCEEDED', 'REVIEW_REQUIRED')
) jobs

-- name: seed_plan_decisions
-- A rejection for each of the tenant's REJECTED jobs; the newest few (uncounted) not yet counted.
INSERT INTO review_decisions (
    job_id, tenant_id, decision, note, reviewer, state_version, reasons, review_requested_at, decided_at,
    counted_at)
SELECT job_id, tenant_id, 'reject', 'not an invoice', 'plan-seed', 2, '[]'::jsonb,
       finished_at - interval '1 hour', finished_at, CASE WHEN turn <= %(uncounted)s THEN NULL ELSE finished_at END
FROM (
    SELECT job_id, tenant_id, finished_at, row_number() OVER (ORDER BY finished_at DESC, job_id) AS turn
    FROM extraction_jobs
    WHERE tenant_id = %(tenant_id)s AND state = 'REJECTED'
) jobs

-- name: seed_plan_state_events
-- The tenant's replay log: events numbered from 1, a minute apart from the given time, and its sequence.
WITH written AS (
    INSERT INTO job_state_events (tenant_id, seq, job_id, job_type, state, state_version, occurred_at)
    SELECT %(tenant_id)s, n, gen_random_uuid(), 'invoice_extraction', 'SUCCEEDED', 2,
           %(since)s::timestamptz + n * interval '1 minute'
    FROM generate_series(1, %(count)s::int) AS n
    RETURNING seq
)
INSERT INTO tenant_event_sequences (tenant_id, last_seq)
SELECT %(tenant_id)s, max(seq) FROM written
ON CONFLICT (tenant_id) DO UPDATE SET last_seq = excluded.last_seq

-- name: seed_plan_batches
-- Provider batches created an hour apart before the given time: the newest few still open, the rest
-- completed and settled half an hour after they were made.
INSERT INTO provider_batches (
    batch_id, provider_pool, model, state, request_count, provider_batch_id, created_at, submitted_at,
    ended_at, settled_at)
SELECT gen_random_uuid(), 'openai', 'gpt-4.1-mini', CASE WHEN n <= %(open)s THEN 'in_progress' ELSE 'completed' END,
       10, 'batch_plan_' || n, %(before)s::timestamptz - n * interval '1 hour',
       %(before)s::timestamptz - n * interval '1 hour',
       CASE WHEN n > %(open)s THEN %(before)s::timestamptz - n * interval '1 hour' + interval '30 minutes' END,
       CASE WHEN n > %(open)s THEN %(before)s::timestamptz - n * interval '1 hour' + interval '30 minutes' END
FROM generate_series(1, %(count)s::int) AS n

-- name: seed_plan_quarantine
-- Inbox messages quarantined an hour apart before the given time.
INSERT INTO inbox_quarantine (event_id, expected_sha256, received_sha256, message_id, body, received_at)
SELECT gen_random_uuid(), repeat('0', 64), repeat('1', 64), 'm-' || n, '{}',
       %(before)s::timestamptz - n * interval '1 hour'
FROM generate_series(1, %(count)s::int) AS n

-- name: seed_plan_object_deletions
-- Document objects of the tenant waiting to be deleted, asked for an hour apart before the given time.
INSERT INTO document_object_deletions (s3_key, s3_version_id, tenant_id, requested_at)
SELECT 'tenants/' || %(tenant_id)s::text || '/documents/plan-' || n, 'v', %(tenant_id)s,
       %(before)s::timestamptz - n * interval '1 hour'
FROM generate_series(1, %(count)s::int) AS n
