-- Retention (DESIGN §4, "Storage is bounded"): a tenant's own retention, the indexes that make each of the
-- scheduler's retention batches an index range rather than a scan, the queue of document objects to delete
-- from S3, and the right to delete.
--
-- Plain CREATE INDEX: the runner applies each migration in one transaction, where CONCURRENTLY is not
-- allowed, so each build holds writes to its table for as long as it takes on a large table.

-- How long this tenant's finished jobs, their results and deliveries, and so its idempotency keys are kept;
-- NULL is the deployment's default (RETENTION_DEFAULT_DAYS).
ALTER TABLE tenants ADD COLUMN retention_days integer CHECK (retention_days BETWEEN 1 AND 3650);

-- Finished jobs per tenant, oldest first: the retention walk probes it once per tenant with that tenant's
-- cutoff. Only finished rows are in it (finished_iff_terminal), so nothing unfinished is ever a candidate.
CREATE INDEX extraction_jobs_retention ON extraction_jobs (tenant_id, finished_at)
    WHERE finished_at IS NOT NULL;
-- "Does any job still use this document?", asked for each document whose jobs were deleted.
CREATE INDEX extraction_jobs_by_document ON extraction_jobs (document_id);
-- A deleted job's inbox rows go with it (they reference it).
CREATE INDEX execution_inbox_by_job ON execution_inbox (job_id);
CREATE INDEX execution_inbox_retention ON execution_inbox (received_at);
CREATE INDEX inbox_quarantine_retention ON inbox_quarantine (received_at);
-- Published events only: an unpublished one is work the relay has yet to do and is never deleted.
CREATE INDEX outbox_events_retention ON outbox_events (published_at) WHERE published_at IS NOT NULL;
-- Settled deliveries per tenant, oldest change first; a PENDING delivery still has a webhook to send.
CREATE INDEX webhook_deliveries_retention ON webhook_deliveries (tenant_id, updated_at)
    WHERE state <> 'PENDING';

-- Document object versions whose row is gone, to delete from S3. Written in the transaction that deletes
-- the row, removed once S3 confirmed the delete: an S3 outage or a crash in between leaves the object
-- listed here for the next tick, never forgotten in the bucket.
CREATE TABLE document_object_deletions (
    s3_key          text NOT NULL,
    s3_version_id   text NOT NULL,
    tenant_id       uuid NOT NULL REFERENCES tenants (tenant_id),
    requested_at    timestamptz NOT NULL,
    attempts        integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    last_error      text,
    PRIMARY KEY (s3_key, s3_version_id)
);
CREATE INDEX document_object_deletions_due ON document_object_deletions (requested_at);

ALTER TABLE document_object_deletions ENABLE ROW LEVEL SECURITY;
CREATE POLICY system_all ON document_object_deletions TO tollgate_system USING (true);
GRANT SELECT, INSERT, UPDATE, DELETE ON document_object_deletions TO tollgate_system;

-- Only the scheduler's retention deletes, as tollgate_system; tenants (tollgate_app) never delete rows.
GRANT DELETE ON extraction_jobs, job_attempts, extraction_results, outbox_events, execution_inbox,
    inbox_quarantine, webhook_deliveries, webhook_delivery_attempts, documents TO tollgate_system;
