-- The batch path (DESIGN §7): batch-tier jobs with a distant deadline go to the provider's Batch API at a
-- discount. A batcher claims them with the fair claim of the batch tier, under a lease as long as the
-- provider's completion window, writes one request file, uploads it and creates the batch; a poller follows
-- the batch and commits each line's outcome under the fence the line was written with.
--
-- PostgreSQL is the record of every batch from before its file is uploaded, so a crash at any step is found
-- again here: a batch still 'preparing' after its holder's time is looked up at the provider by the id this
-- row gave it (the batch's metadata), adopted if it exists, and its jobs returned if it does not.

-- One row per request file: its own small state machine (tollgate/execution/batch/states.py mirrors it).
--   preparing   claimed jobs are being written, uploaded and submitted; the holder is the batcher
--   submitted   the provider took it (validating, or not yet seen running)
--   in_progress the provider is running it (in_progress, finalizing or cancelling there)
--   completed, expired, failed, cancelled: the provider's end of it (or ours: a 'preparing' batch that was
--               never created ends 'failed'); settled_at says when every member job was dealt with.
CREATE TABLE provider_batches (
    batch_id           uuid PRIMARY KEY,
    provider_pool      text NOT NULL,
    model              text NOT NULL,
    state              text NOT NULL DEFAULT 'preparing' CHECK (state IN (
        'preparing', 'submitted', 'in_progress', 'completed', 'expired', 'failed', 'cancelled')),
    state_version      integer NOT NULL DEFAULT 1 CHECK (state_version >= 1),
    -- Who works on the batch now (the batcher while preparing, a poller while it downloads) and until when;
    -- past that time any worker may take it over.
    holder             text,
    held_until         timestamptz,
    request_count      integer NOT NULL DEFAULT 0 CHECK (request_count >= 0),
    request_bytes      bigint NOT NULL DEFAULT 0 CHECK (request_bytes >= 0),
    -- The prompt tokens the batch holds in the provider's queue of the model (the Batch API's own pool).
    enqueued_tokens    bigint NOT NULL DEFAULT 0 CHECK (enqueued_tokens >= 0),
    input_file_id      text,
    provider_batch_id  text UNIQUE,
    output_file_id     text,
    error_file_id      text,
    created_at         timestamptz NOT NULL,
    submitted_at       timestamptz,
    -- When the provider's completion window ends: a batch still running after it comes back expired.
    window_ends_at     timestamptz,
    next_poll_at       timestamptz,
    ended_at           timestamptz,
    settled_at         timestamptz,
    error              jsonb,
    CONSTRAINT holder_fields_together CHECK ((holder IS NULL) = (held_until IS NULL)),
    -- Past 'preparing', a batch the provider took has the provider's id; one that never reached it ends failed.
    CONSTRAINT submitted_has_provider_id CHECK (
        state IN ('preparing', 'failed', 'cancelled') OR provider_batch_id IS NOT NULL),
    CONSTRAINT settled_only_when_ended CHECK (
        settled_at IS NULL OR state IN ('completed', 'expired', 'failed', 'cancelled'))
);
-- The poller's and the recovery's work: open batches by when they are next looked at.
CREATE INDEX provider_batches_open ON provider_batches (next_poll_at) WHERE settled_at IS NULL;
-- The scheduler's gauges: open batches and the oldest one's age, read from one end of this index.
CREATE INDEX provider_batches_open_by_age ON provider_batches (created_at) WHERE settled_at IS NULL;
-- Retention: settled batches by age.
CREATE INDEX provider_batches_settled ON provider_batches (settled_at) WHERE settled_at IS NOT NULL;

-- The jobs a batch carries, each under the attempt and fence its request line names (custom_id). A member is
-- settled once its line's outcome is committed, or the job was returned, or it had moved on already; the
-- settle is written in the transaction that does it, so a poller that dies mid-download leaves exactly the
-- unsettled members to the next one.
CREATE TABLE provider_batch_jobs (
    batch_id    uuid NOT NULL REFERENCES provider_batches (batch_id),
    job_id      uuid NOT NULL REFERENCES extraction_jobs (job_id),
    tenant_id   uuid NOT NULL REFERENCES tenants (tenant_id),
    attempt     integer NOT NULL CHECK (attempt >= 1),
    fence       bigint NOT NULL,
    settled_at  timestamptz,
    outcome     text,
    PRIMARY KEY (batch_id, job_id),
    CONSTRAINT settled_has_outcome CHECK ((settled_at IS NULL) = (outcome IS NULL))
);
CREATE INDEX provider_batch_jobs_unsettled ON provider_batch_jobs (batch_id, job_id) WHERE settled_at IS NULL;
CREATE INDEX provider_batch_jobs_by_job ON provider_batch_jobs (job_id);

-- The batch a RUNNING job waits in (a tenant may cancel such a job: its line is then discarded by the fence),
-- and how many times the job was offered to the Batch API: once, after which whatever comes back (a failed
-- line, an expired batch, a batch never submitted) runs on the immediate path. Constant defaults rewrite no
-- rows.
ALTER TABLE extraction_jobs
    ADD COLUMN batch_id uuid,
    ADD COLUMN batch_offers smallint NOT NULL DEFAULT 0 CHECK (batch_offers >= 0);
-- Whatever moves a job out of RUNNING (its outcome, the reaper, a release, a cancel, a redrive) takes it out
-- of its batch, so no query has to remember to.
CREATE FUNCTION leave_provider_batch() RETURNS trigger
LANGUAGE plpgsql SET search_path = public, pg_temp
AS $$
BEGIN
    IF NEW.state <> 'RUNNING' OR NEW.fence <> OLD.fence THEN
        NEW.batch_id := NULL;
    END IF;
    RETURN NEW;
END;
$$;
CREATE TRIGGER extraction_jobs_leave_provider_batch
BEFORE UPDATE OF state, fence ON extraction_jobs
FOR EACH ROW WHEN (OLD.batch_id IS NOT NULL)
EXECUTE FUNCTION leave_provider_batch();
ALTER TABLE extraction_jobs ADD CONSTRAINT batch_only_while_running CHECK (batch_id IS NULL OR state = 'RUNNING');

-- An attempt made through a batch names it, and keeps what the batch price saved against the list price
-- (cost_usd is what was paid), so usage can show the discount.
ALTER TABLE job_attempts
    ADD COLUMN batch_id uuid,
    ADD COLUMN discount_usd numeric(12, 6) CHECK (discount_usd >= 0);

-- The worker (tollgate_system) keeps batches; tenants never see them.
GRANT SELECT, INSERT, UPDATE, DELETE ON provider_batches, provider_batch_jobs TO tollgate_system;
