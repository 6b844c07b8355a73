-- Acceptance queries. Every query names its tenant explicitly; row-level security is the second wall.

-- name: lock_tenant_acceptance
-- Serializes acceptance per tenant, so the idempotency lookup, the admission counts and the inserts
-- see one consistent picture. Other tenants are not blocked.
SELECT pg_advisory_xact_lock(hashtextextended(%(tenant_id)s::text, 7314227))

-- name: tenant_admission_limits
SELECT max_pending_jobs, max_pending_bytes, max_pending_tokens
FROM tenants WHERE tenant_id = %(tenant_id)s

-- name: tenant_pending_usage
SELECT count(*) AS jobs,
       coalesce(sum(document_bytes), 0)::bigint AS bytes,
       coalesce(sum(estimated_tokens), 0)::bigint AS tokens
FROM extraction_jobs
WHERE tenant_id = %(tenant_id)s AND state IN ('READY', 'RUNNING', 'RETRY_SCHEDULED')

-- name: system_backlog
SELECT system_backlog(%(cap)s) AS backlog

-- name: find_document_by_digest
SELECT document_id, s3_key, s3_version_id, size_bytes, page_count
FROM documents WHERE tenant_id = %(tenant_id)s AND content_sha256 = %(sha256)s

-- name: insert_document
INSERT INTO documents (document_id, tenant_id, content_sha256, s3_key, s3_version_id, size_bytes, page_count)
VALUES (%(document_id)s, %(tenant_id)s, %(sha256)s, %(s3_key)s, %(s3_version_id)s, %(size_bytes)s,
        %(page_count)s)

-- name: insert_job
INSERT INTO extraction_jobs (
    job_id, tenant_id, idempotency_key, request_hash, job_type, document_id, schema_version,
    model_policy, options, metadata, priority, max_attempts, estimated_tokens, document_bytes,
    deadline_at, trace_context)
VALUES (
    %(job_id)s, %(tenant_id)s, %(idempotency_key)s, %(request_hash)s, %(job_type)s, %(document_id)s,
    %(schema_version)s, %(model_policy)s, %(options)s, %(metadata)s, %(priority)s, %(max_attempts)s,
    %(estimated_tokens)s, %(document_bytes)s, %(deadline_at)s, %(trace_context)s)

-- name: insert_outbox_event
INSERT INTO outbox_events (event_id, tenant_id, aggregate_id, event_type, payload, trace_context)
VALUES (%(event_id)s, %(tenant_id)s, %(aggregate_id)s, %(event_type)s, %(payload)s, %(trace_context)s)

-- name: find_job_by_idempotency_key
SELECT j.*, d.content_sha256, d.size_bytes, d.page_count
FROM extraction_jobs j JOIN documents d USING (document_id)
WHERE j.tenant_id = %(tenant_id)s AND j.idempotency_key = %(idempotency_key)s

-- name: get_job
SELECT j.*, d.content_sha256, d.size_bytes, d.page_count
FROM extraction_jobs j JOIN documents d USING (document_id)
WHERE j.tenant_id = %(tenant_id)s AND j.job_id = %(job_id)s

-- name: list_jobs
-- Newest first; the cursor is the (created_at, job_id) of the last row of the previous page.
SELECT j.*, d.content_sha256, d.size_bytes, d.page_count
FROM extraction_jobs j JOIN documents d USING (document_id)
WHERE j.tenant_id = %(tenant_id)s
  AND (%(state)s::text IS NULL OR j.state = %(state)s::text)
  AND (%(after_created_at)s::timestamptz IS NULL
       OR (j.created_at, j.job_id) < (%(after_created_at)s::timestamptz, %(after_job_id)s::uuid))
ORDER BY j.created_at DESC, j.job_id DESC
LIMIT %(limit)s

-- name: cancel_job
UPDATE extraction_jobs
SET state = 'CANCELLED', state_version = state_version + 1, next_attempt_at = NULL,
    finished_at = now(), updated_at = now()
WHERE tenant_id = %(tenant_id)s AND job_id = %(job_id)s AND state IN ('READY', 'RETRY_SCHEDULED')
RETURNING job_id

-- name: get_job_result
SELECT r.job_id, j.state, r.policy_version, r.result, r.review_reasons, r.created_at
FROM extraction_results r JOIN extraction_jobs j USING (job_id)
WHERE r.tenant_id = %(tenant_id)s AND r.job_id = %(job_id)s
