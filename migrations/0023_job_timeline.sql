-- A job's timeline (issue 31: `tollgate jobs show`): its state changes, attempts, review and webhook deliveries
-- read by the job's id alone, so showing one job costs the same however many jobs and tenants there are.
-- job_attempts (primary key job_id, attempt), review_decisions (job_id) and support_audit (target) are
-- reached by the job already; these two tables were not.
--
-- Plain CREATE INDEX: the runner applies each migration in one transaction (see 0011).

-- A job's state changes, in version order. The primary key is (tenant_id, seq): a job's own rows were a walk
-- of its tenant's whole sequence.
CREATE INDEX job_state_events_by_job ON job_state_events (job_id, state_version);

-- The job whose event a delivery carries; NULL for an event about no job. Written with the delivery by the
-- dispatcher's fan-out. A delivery refers to its event only by id, and the outbox row that names the event's
-- job is deleted days before the delivery (retention), so the job is kept on the delivery itself.
ALTER TABLE webhook_deliveries ADD COLUMN job_id uuid;
-- Deliveries made before: every webhook body so far is an event about a job, whose data names it. Read once.
UPDATE webhook_deliveries SET job_id = (body::jsonb -> 'data' ->> 'job_id')::uuid
WHERE body::jsonb -> 'data' ? 'job_id';
CREATE INDEX webhook_deliveries_by_job ON webhook_deliveries (job_id, created_at) WHERE job_id IS NOT NULL;
