-- Retention: the scheduler's bounded deletes across every per-job table (DESIGN §4, "Storage is bounded"),
-- kept together because each rule reads one table and deletes from several. Every query takes a cutoff
-- computed from the injected clock and a LIMIT; each batch walks an index from migration 0011.

-- name: expired_jobs
-- Finished jobs past their tenant's retention, with what their archive line needs (a reviewer's decision
-- included). One probe of extraction_jobs_retention_decided per tenant, each with that tenant's own cutoff;
-- the outer LIMIT ends the walk once the batch is full. Only finished rows that wait for nobody are in that
-- index: an unfinished job, or one waiting for a reviewer, is never a candidate. Nor is one whose line in a
-- provider batch is still unsettled (a job cancelled while in a batch): the poller has yet to deal with it.
SELECT j.job_id, j.tenant_id, j.idempotency_key, j.request_hash, j.job_type, j.schema_version,
       j.model_policy, j.options, j.metadata, j.priority, j.state, j.state_version, j.attempt,
       j.max_attempts, j.estimated_tokens, j.trace_context, j.last_error, j.created_at, j.deadline_at,
       j.finished_at,
       d.document_id, d.content_sha256, d.size_bytes, d.page_count,
       r.attempt AS result_attempt, r.policy_version, r.result, r.review_reasons, r.located_evidence,
       r.created_at AS result_created_at,
       CASE WHEN rd.job_id IS NOT NULL
            THEN to_jsonb(rd) - 'job_id' - 'tenant_id' - 'counted_at' END AS review
FROM tenants t
CROSS JOIN LATERAL (
    SELECT e.job_id
    FROM extraction_jobs e
    WHERE e.tenant_id = t.tenant_id
      AND e.finished_at < %(now)s - make_interval(days => coalesce(t.retention_days, %(default_days)s))
      AND e.state <> 'REVIEW_REQUIRED'
      AND NOT EXISTS (SELECT 1 FROM provider_batch_jobs m WHERE m.job_id = e.job_id AND m.settled_at IS NULL)
    ORDER BY e.finished_at
    LIMIT %(limit)s
) expired
JOIN extraction_jobs j ON j.job_id = expired.job_id
JOIN documents d ON d.document_id = j.document_id
LEFT JOIN extraction_results r ON r.job_id = j.job_id
LEFT JOIN review_decisions rd ON rd.job_id = j.job_id
LIMIT %(limit)s

-- name: attempts_of_jobs
SELECT job_id, attempt, fence, worker_id, started_at, finished_at, outcome, model, input_tokens,
       output_tokens, cost_usd, latency_ms, provider_request_id, error, batch_id, discount_usd
FROM job_attempts WHERE job_id = ANY(%(job_ids)s) ORDER BY job_id, attempt

-- name: lock_archived_jobs
-- The archived jobs that are still exactly as archived (same state_version, still finished): a support
-- retry between the archive and this lock keeps its job, whose archive line then describes an earlier
-- version of it. Locked in id order, so two retention runs never deadlock each other.
SELECT j.job_id, j.tenant_id, j.document_id
FROM extraction_jobs j
JOIN unnest(%(job_ids)s::uuid[], %(state_versions)s::integer[]) AS a (job_id, state_version)
  ON a.job_id = j.job_id AND a.state_version = j.state_version
WHERE j.finished_at IS NOT NULL
ORDER BY j.job_id
FOR UPDATE OF j

-- name: delete_job_attempts
DELETE FROM job_attempts WHERE job_id = ANY(%(job_ids)s)

-- name: delete_job_batch_members
-- A deleted job's lines in provider batches (settled: expired_jobs passes over a job with an unsettled one);
-- they reference the job. The batch rows stay for their own rule.
DELETE FROM provider_batch_jobs WHERE job_id = ANY(%(job_ids)s)

-- name: delete_job_results
DELETE FROM extraction_results WHERE job_id = ANY(%(job_ids)s)

-- name: delete_job_inbox_rows
DELETE FROM execution_inbox WHERE job_id = ANY(%(job_ids)s)

-- name: delete_finished_jobs
-- finished_at IS NOT NULL again, where the delete happens: whatever the caller passes, an unfinished job
-- is never deleted, and neither is one waiting for a reviewer. A decided job's review decision goes with it
-- (ON DELETE CASCADE), and so do queue rows.
DELETE FROM extraction_jobs
WHERE job_id = ANY(%(job_ids)s) AND finished_at IS NOT NULL AND state <> 'REVIEW_REQUIRED'

-- name: delete_unreferenced_documents
-- Documents of the jobs just deleted that no other job uses (several jobs share a document by digest).
-- The caller holds the acceptance lock of each tenant concerned (lock_tenant_acceptance), so an acceptance
-- that found one of these rows has committed its job by now (and the row stays), or will look again after
-- this commits (and stores the document anew). Each object version goes to the S3 deletion queue; a
-- document kept in its row is gone with it.
WITH gone AS (
    DELETE FROM documents d
    WHERE d.document_id = ANY(%(document_ids)s)
      AND NOT EXISTS (SELECT 1 FROM extraction_jobs j WHERE j.document_id = d.document_id)
    RETURNING d.tenant_id, d.s3_key, d.s3_version_id
), queued AS (
    INSERT INTO document_object_deletions (s3_key, s3_version_id, tenant_id, requested_at)
    SELECT s3_key, s3_version_id, tenant_id, %(now)s FROM gone WHERE s3_key IS NOT NULL
    ON CONFLICT DO NOTHING
)
SELECT count(*) AS deleted FROM gone

-- name: due_document_object_deletions
SELECT s3_key, s3_version_id FROM document_object_deletions
WHERE requested_at <= %(now)s
ORDER BY requested_at
LIMIT %(limit)s

-- name: forget_document_object_deletions
DELETE FROM document_object_deletions d
USING unnest(%(s3_keys)s::text[], %(s3_version_ids)s::text[]) AS done (s3_key, s3_version_id)
WHERE d.s3_key = done.s3_key AND d.s3_version_id = done.s3_version_id

-- name: postpone_document_object_deletion
-- An object S3 would not delete goes to the back of the queue, so it cannot hold up the others.
UPDATE document_object_deletions
SET attempts = attempts + 1, last_error = %(error)s, requested_at = %(retry_at)s
WHERE s3_key = %(s3_key)s AND s3_version_id = %(s3_version_id)s

-- name: delete_expired_deliveries
-- Settled webhook deliveries (not PENDING) past their tenant's retention since their last change, and their
-- attempts. Rows a dispatcher or a replay holds are skipped and come back in a later batch.
WITH expired AS (
    SELECT e.delivery_id
    FROM tenants t
    CROSS JOIN LATERAL (
        SELECT w.delivery_id
        FROM webhook_deliveries w
        WHERE w.tenant_id = t.tenant_id AND w.state <> 'PENDING'
          AND w.updated_at < %(now)s - make_interval(days => coalesce(t.retention_days, %(default_days)s))
        ORDER BY w.updated_at
        LIMIT %(limit)s
    ) e
    LIMIT %(limit)s
), locked AS (
    SELECT w.delivery_id FROM webhook_deliveries w
    WHERE w.delivery_id IN (SELECT delivery_id FROM expired) AND w.state <> 'PENDING'
    FOR UPDATE SKIP LOCKED
), attempts AS (
    DELETE FROM webhook_delivery_attempts WHERE delivery_id IN (SELECT delivery_id FROM locked)
    RETURNING 1
), deliveries AS (
    DELETE FROM webhook_deliveries WHERE delivery_id IN (SELECT delivery_id FROM locked)
    RETURNING 1
)
SELECT (SELECT count(*) FROM deliveries) AS deliveries, (SELECT count(*) FROM attempts) AS attempts

-- name: delete_published_outbox_events
-- Published events are signals already sent; an unpublished one is never deleted (published_at < cutoff
-- excludes NULL).
WITH gone AS (
    DELETE FROM outbox_events
    WHERE event_id IN (
        SELECT event_id FROM outbox_events
        WHERE published_at < %(before)s
        ORDER BY published_at
        LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED)
    RETURNING 1
)
SELECT count(*) AS deleted FROM gone

-- name: delete_old_inbox_rows
WITH gone AS (
    DELETE FROM execution_inbox
    WHERE event_id IN (
        SELECT event_id FROM execution_inbox WHERE received_at < %(before)s ORDER BY received_at
        LIMIT %(limit)s)
    RETURNING 1
)
SELECT count(*) AS deleted FROM gone

-- name: delete_old_quarantine_rows
WITH gone AS (
    DELETE FROM inbox_quarantine
    WHERE quarantine_id IN (
        SELECT quarantine_id FROM inbox_quarantine WHERE received_at < %(before)s ORDER BY received_at
        LIMIT %(limit)s)
    RETURNING 1
)
SELECT count(*) AS deleted FROM gone

-- name: delete_settled_batch_members
-- The lines of provider batches settled before the cutoff, oldest batch first: every line's outcome was
-- committed long ago, and each attempt keeps its batch_id and discount. Bounded by lines, not batches (a batch
-- holds up to 50,000); lines a poller holds are skipped and come back in a later batch. Each batch's lines are
-- one range of the primary key (the LIMIT and key order inside LATERAL keep the planner from scanning the
-- table when there are few batches), and the locked lines are deleted by their row addresses (a TID scan),
-- for the same reason.
WITH gone AS (
    DELETE FROM provider_batch_jobs
    WHERE ctid = ANY(ARRAY(
        SELECT l.line
        FROM provider_batches b
        CROSS JOIN LATERAL (
            SELECT m.ctid AS line FROM provider_batch_jobs m
            WHERE m.batch_id = b.batch_id
            ORDER BY m.job_id
            LIMIT %(limit)s
            FOR UPDATE SKIP LOCKED
        ) l
        WHERE b.settled_at < %(before)s
        ORDER BY b.settled_at
        LIMIT %(limit)s))
    RETURNING 1
)
SELECT count(*) AS deleted FROM gone

-- name: delete_settled_provider_batches
-- Provider batches settled before the cutoff whose lines are gone (delete_settled_batch_members runs first,
-- or retention deleted their jobs). An open batch (settled_at NULL) is never a candidate.
WITH gone AS (
    DELETE FROM provider_batches
    WHERE batch_id IN (
        SELECT b.batch_id FROM provider_batches b
        WHERE b.settled_at < %(before)s
          AND NOT EXISTS (SELECT 1 FROM provider_batch_jobs m WHERE m.batch_id = b.batch_id)
        ORDER BY b.settled_at
        LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED)
    RETURNING 1
)
SELECT count(*) AS deleted FROM gone

-- name: delete_old_state_events
-- Live notifications' replay rows past their window (the cutoff), oldest first, by row address (a TID scan,
-- as delete_settled_batch_members does) so the planner never scans the table for the composite key. No row
-- lock first: nothing updates these rows, and of two retention runs deleting the same row one simply finds
-- it gone.
WITH gone AS (
    DELETE FROM job_state_events
    WHERE ctid = ANY(ARRAY(
        SELECT ctid FROM job_state_events
        WHERE occurred_at < %(before)s
        ORDER BY occurred_at
        LIMIT %(limit)s))
    RETURNING 1
)
SELECT count(*) AS deleted FROM gone
