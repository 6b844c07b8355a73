-- Review (DESIGN §2, §5): a result that failed validation waits in REVIEW_REQUIRED until a reviewer approves
-- it, corrects it (re-validated under the policy) or rejects it. The decision is a fenced update of the job
-- (tollgate/db/queries/reviews.sql), a row here that carries the accepted result's version 2, and an outbox
-- event, in one transaction. Version 1, the model's result, stays in extraction_results as it was written.

-- REJECTED joins the states. REVIEW_REQUIRED keeps its finish time (when the extraction ended, which is
-- when the wait began); a decision sets the time of the decision, from which retention then counts.
-- Existing rows satisfy both new checks (each is wider than before); adding them reads the table once.
ALTER TABLE extraction_jobs DROP CONSTRAINT extraction_jobs_state_check;
ALTER TABLE extraction_jobs ADD CONSTRAINT extraction_jobs_state_check CHECK (state IN (
    'READY', 'RUNNING', 'SUCCEEDED', 'REVIEW_REQUIRED', 'REJECTED', 'RETRY_SCHEDULED', 'FAILED_TERMINAL',
    'CANCELLED'));
-- The name is kept from migration 0002 ("terminal" is what the code now calls finished).
ALTER TABLE extraction_jobs DROP CONSTRAINT finished_iff_terminal;
ALTER TABLE extraction_jobs ADD CONSTRAINT finished_iff_terminal CHECK (
    (state IN ('SUCCEEDED', 'REVIEW_REQUIRED', 'REJECTED', 'FAILED_TERMINAL', 'CANCELLED'))
    = (finished_at IS NOT NULL));

-- The review queue, oldest first, per tenant (GET /reviews) and across tenants (the CLI, and the scheduler's
-- oldest-waiting gauge). Only waiting jobs are in them, so they stay as small as the queue itself however
-- many jobs were ever reviewed.
CREATE INDEX extraction_jobs_awaiting_review ON extraction_jobs (tenant_id, finished_at, job_id)
    WHERE state = 'REVIEW_REQUIRED';
CREATE INDEX extraction_jobs_review_age ON extraction_jobs (finished_at, job_id)
    WHERE state = 'REVIEW_REQUIRED';

-- A waiting review is nobody's finished business: retention skips it until it is decided. The retention walk
-- gets an index without those rows, so a long review queue is never walked past at every tick.
CREATE INDEX extraction_jobs_retention_decided ON extraction_jobs (tenant_id, finished_at)
    WHERE finished_at IS NOT NULL AND state <> 'REVIEW_REQUIRED';
DROP INDEX extraction_jobs_retention;

-- One row per waiting job and reason code: the queue filtered by a reason is an index range, however rare
-- the reason. Kept by triggers, whichever use case writes the result or decides it (as the run-queues of
-- migration 0010 are): a row per code when a review-flagged result is inserted, none once the job leaves
-- REVIEW_REQUIRED.
CREATE TABLE review_queue (
    job_id         uuid NOT NULL REFERENCES extraction_jobs (job_id) ON DELETE CASCADE,
    reason_code    text NOT NULL,
    tenant_id      uuid NOT NULL REFERENCES tenants (tenant_id),
    waiting_since  timestamptz NOT NULL,
    PRIMARY KEY (job_id, reason_code)
);
CREATE INDEX review_queue_by_tenant_reason ON review_queue (tenant_id, reason_code, waiting_since, job_id);
CREATE INDEX review_queue_by_reason ON review_queue (reason_code, waiting_since, job_id);

-- One decision per job, ever: the job is final after it. It records who decided (the API key, or the person
-- at the CLI), why (the note), on which state_version (If-Match), what the job waited for (the reasons an
-- approval overrides), and for an approval or a correction the accepted result as version 2 with the policy
-- version that judged it.
CREATE TABLE review_decisions (
    job_id               uuid PRIMARY KEY REFERENCES extraction_jobs (job_id) ON DELETE CASCADE,
    tenant_id            uuid NOT NULL REFERENCES tenants (tenant_id),
    decision             text NOT NULL CHECK (decision IN ('approve', 'correct', 'reject')),
    note                 text NOT NULL CHECK (length(note) BETWEEN 1 AND 2000),
    reviewer             text NOT NULL CHECK (length(reviewer) BETWEEN 1 AND 200),
    reviewer_key_id      uuid,
    state_version        integer NOT NULL CHECK (state_version >= 1),
    reasons              jsonb NOT NULL,
    review_requested_at  timestamptz NOT NULL,
    decided_at           timestamptz NOT NULL,
    result_version       smallint CHECK (result_version = 2),
    result               jsonb,
    policy_version       text,
    corrections          jsonb,
    -- When the scheduler published the decision's metrics (kind, time to decision); NULL until then.
    counted_at           timestamptz,
    CONSTRAINT a_rejection_has_no_result CHECK (
        (decision = 'reject') = (result IS NULL)
        AND (result IS NULL) = (result_version IS NULL)
        AND (result IS NULL) = (policy_version IS NULL)),
    CONSTRAINT corrections_only_when_correcting CHECK ((decision = 'correct') = (corrections IS NOT NULL))
);
CREATE INDEX review_decisions_uncounted ON review_decisions (decided_at) WHERE counted_at IS NULL;

CREATE FUNCTION enqueue_review() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp
AS $$
BEGIN
    INSERT INTO review_queue (job_id, reason_code, tenant_id, waiting_since)
    SELECT j.job_id, codes.code, j.tenant_id, j.finished_at
    FROM extraction_jobs j
    CROSS JOIN LATERAL (
        SELECT DISTINCT reason->>'code' AS code FROM jsonb_array_elements(NEW.review_reasons) reason
    ) codes
    WHERE j.job_id = NEW.job_id AND j.state = 'REVIEW_REQUIRED' AND codes.code IS NOT NULL
    ON CONFLICT DO NOTHING;
    RETURN NULL;
END;
$$;
CREATE TRIGGER extraction_results_enqueue_review AFTER INSERT ON extraction_results
FOR EACH ROW EXECUTE FUNCTION enqueue_review();

CREATE FUNCTION dequeue_review() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp
AS $$
BEGIN
    DELETE FROM review_queue WHERE job_id = NEW.job_id;
    RETURN NULL;
END;
$$;
CREATE TRIGGER extraction_jobs_dequeue_review AFTER UPDATE OF state ON extraction_jobs
FOR EACH ROW WHEN (OLD.state = 'REVIEW_REQUIRED' AND NEW.state <> 'REVIEW_REQUIRED')
EXECUTE FUNCTION dequeue_review();

-- Jobs already waiting when this runs become reviewable: their queue rows from their results' reasons.
INSERT INTO review_queue (job_id, reason_code, tenant_id, waiting_since)
SELECT j.job_id, codes.code, j.tenant_id, j.finished_at
FROM extraction_jobs j
JOIN extraction_results r ON r.job_id = j.job_id
CROSS JOIN LATERAL (
    SELECT DISTINCT reason->>'code' AS code FROM jsonb_array_elements(r.review_reasons) reason
) codes
WHERE j.state = 'REVIEW_REQUIRED' AND codes.code IS NOT NULL
ON CONFLICT DO NOTHING;

-- Webhook subscriptions: an endpoint now gets completed, failed and rejected unless it asks otherwise, and
-- review_required only when it asks (a review tool's endpoint, not the ERP's). Endpoints still on the old
-- default (exactly the three old types) move to the new one; an endpoint that chose its types keeps them.
UPDATE webhook_endpoints
SET event_types = ARRAY['extraction.completed.v1', 'extraction.failed.v1', 'extraction.rejected.v1'],
    updated_at = now()
WHERE deleted_at IS NULL
  AND event_types @> ARRAY['extraction.completed.v1', 'extraction.review_required.v1', 'extraction.failed.v1']
  AND cardinality(event_types) = 3;

ALTER TABLE review_queue ENABLE ROW LEVEL SECURITY;
ALTER TABLE review_decisions ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON review_queue TO tollgate_app
    USING (tenant_id = nullif(current_setting('tollgate.tenant_id', true), '')::uuid);
CREATE POLICY tenant_isolation ON review_decisions TO tollgate_app
    USING (tenant_id = nullif(current_setting('tollgate.tenant_id', true), '')::uuid);
CREATE POLICY system_all ON review_queue TO tollgate_system USING (true);
CREATE POLICY system_all ON review_decisions TO tollgate_system USING (true);
-- Reviewers decide through the API (tollgate_app) or the CLI (tollgate_system); the queue is the triggers'.
-- Only the scheduler marks decisions counted; retention's delete of a job takes its decision with it.
GRANT SELECT ON review_queue TO tollgate_app, tollgate_system;
GRANT SELECT, INSERT ON review_decisions TO tollgate_app;
GRANT SELECT, INSERT, UPDATE, DELETE ON review_decisions TO tollgate_system;
