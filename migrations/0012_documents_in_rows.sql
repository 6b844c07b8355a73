-- Documents kept in their rows; the run-queues' leftovers dropped; the shards made reconcilable.

-- Small documents are kept in their own row (ApiSettings.document_row_max_bytes), committed with the job
-- in acceptance's transaction: durable before the 202 without an S3 round trip, and read back by the
-- worker with the document's other fields. Larger ones stay in the documents bucket, as before.
ALTER TABLE documents
    ADD COLUMN body bytea,
    ALTER COLUMN s3_key DROP NOT NULL,
    ALTER COLUMN s3_version_id DROP NOT NULL;
-- NOT VALID: every row so far has its S3 key (the column was NOT NULL), so nothing needs scanning now;
-- new and updated rows are checked all the same.
ALTER TABLE documents ADD CONSTRAINT documents_stored_once
    CHECK ((body IS NOT NULL) <> (s3_key IS NOT NULL) AND (s3_key IS NULL) = (s3_version_id IS NULL))
    NOT VALID;

-- Superseded by the run-queues (0010): the claim reads extraction_jobs_ready_by_tenant and
-- extraction_jobs_retries_by_tenant, and a tenant's running count is tenant_queues.running_jobs. Each
-- index here was one more entry to write on every accept and every change of state.
DROP INDEX extraction_jobs_claimable;
DROP INDEX extraction_jobs_running_by_tenant;

-- The scheduler checks the system backlog's shards against the run-queue rows and recounts them on drift.
GRANT UPDATE ON backlog_shards TO tollgate_system;
