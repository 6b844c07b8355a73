-- The pipeline after acceptance: the worker's ingress inbox, its quarantine, and what the relay and the
-- scheduler need to find their work quickly.

-- One row per event the worker has taken in from SQS. The primary key makes a redelivery a no-op.
CREATE TABLE execution_inbox (
    event_id        uuid PRIMARY KEY,
    tenant_id       uuid NOT NULL REFERENCES tenants (tenant_id),
    job_id          uuid NOT NULL REFERENCES extraction_jobs (job_id),
    event_type      text NOT NULL,
    payload_sha256  text NOT NULL CHECK (payload_sha256 ~ '^[0-9a-f]{64}$'),
    message_id      text NOT NULL,
    received_at     timestamptz NOT NULL
);

-- The same event id arriving with a different payload: something upstream is wrong. Kept for people to
-- look at, never executed.
CREATE TABLE inbox_quarantine (
    quarantine_id     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_id          uuid NOT NULL,
    expected_sha256   text NOT NULL,
    received_sha256   text NOT NULL,
    message_id        text NOT NULL,
    body              text NOT NULL,
    received_at       timestamptz NOT NULL
);

-- The scheduler's scans: expired leases, and unfinished jobs by deadline.
CREATE INDEX extraction_jobs_running_leases ON extraction_jobs (lease_until) WHERE state = 'RUNNING';
CREATE INDEX extraction_jobs_deadlines ON extraction_jobs (deadline_at)
    WHERE state IN ('READY', 'RUNNING', 'RETRY_SCHEDULED');
CREATE INDEX extraction_jobs_due_retries ON extraction_jobs (next_attempt_at) WHERE state = 'RETRY_SCHEDULED';

ALTER TABLE execution_inbox ENABLE ROW LEVEL SECURITY;
ALTER TABLE inbox_quarantine ENABLE ROW LEVEL SECURITY;
CREATE POLICY system_all ON execution_inbox TO tollgate_system USING (true);
CREATE POLICY system_all ON inbox_quarantine TO tollgate_system USING (true);
GRANT SELECT, INSERT ON execution_inbox, inbox_quarantine TO tollgate_system;
