-- Live notifications (DESIGN §8, issue 19): every change of a job's state gets a per-tenant sequence number,
-- an event row kept for replay, and an outbox row (job.state_changed.v1) the relay sends to the notifier. A
-- trigger on extraction_jobs does it in the transaction that changes the job, so every use case (accept,
-- claim, finish, release, reaper, deadline, cancel, review decision, redrive, the batch path) is covered.
--
-- The sequence is a tenant's cursor: gap-free and in commit order. The counter row is bumped under a row lock
-- held until commit, so the next number of the same tenant is taken only after the previous one committed
-- (or rolled back with its number): what a reader sees of a tenant's events is always 1..latest, whole.

-- One row per tenant: the last number handed out (0: none yet).
CREATE TABLE tenant_event_sequences (
    tenant_id  uuid PRIMARY KEY REFERENCES tenants (tenant_id),
    last_seq   bigint NOT NULL DEFAULT 0 CHECK (last_seq >= 0)
);
INSERT INTO tenant_event_sequences (tenant_id) SELECT tenant_id FROM tenants ON CONFLICT DO NOTHING;

-- What a subscriber replays from its cursor. No foreign key to the job: retention deletes finished jobs on
-- the tenant's schedule and these rows on their own (hours), each without waiting for the other.
CREATE TABLE job_state_events (
    tenant_id      uuid NOT NULL REFERENCES tenants (tenant_id),
    seq            bigint NOT NULL CHECK (seq >= 1),
    job_id         uuid NOT NULL,
    job_type       text NOT NULL,
    state          text NOT NULL,
    state_version  integer NOT NULL CHECK (state_version >= 1),
    occurred_at    timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, seq)
);
-- Retention: the oldest events of every tenant, in bounded batches.
CREATE INDEX job_state_events_retention ON job_state_events (occurred_at);

-- Runs as the owner: tenants' requests (tollgate_app) change jobs (accept, cancel) but may not write these
-- tables. The event and its outbox payload are built here, in one place: the payload is exactly
-- tollgate.events.JobStateChanged (a test validates it against the model).
CREATE FUNCTION record_job_state_event() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp
AS $$
DECLARE
    next_seq  bigint;
    -- Every statement that changes a state sets updated_at from its use case's clock (the injected one);
    -- one that did not would still get a time, the database's.
    happened  timestamptz := CASE WHEN TG_OP = 'UPDATE' AND NEW.updated_at IS NOT DISTINCT FROM OLD.updated_at
                                  THEN now() ELSE NEW.updated_at END;
BEGIN
    UPDATE tenant_event_sequences SET last_seq = last_seq + 1
    WHERE tenant_id = NEW.tenant_id
    RETURNING last_seq INTO next_seq;
    IF NOT FOUND THEN
        -- Every tenant gets its row when it is created; this guards one made before that (a bulk load).
        INSERT INTO tenant_event_sequences AS s (tenant_id, last_seq) VALUES (NEW.tenant_id, 1)
        ON CONFLICT (tenant_id) DO UPDATE SET last_seq = s.last_seq + 1
        RETURNING last_seq INTO next_seq;
    END IF;

    INSERT INTO job_state_events (tenant_id, seq, job_id, job_type, state, state_version, occurred_at)
    VALUES (NEW.tenant_id, next_seq, NEW.job_id, NEW.job_type, NEW.state, NEW.state_version, happened);

    -- The event id is a function of (tenant, sequence), which names the event: the same event always has
    -- the same id, so the FIFO queue's deduplication and consumers treat a republish as one.
    INSERT INTO outbox_events (event_id, tenant_id, aggregate_id, event_type, payload, trace_context)
    VALUES (
        md5('job.state_changed.v1:' || NEW.tenant_id::text || ':' || next_seq::text)::uuid,
        NEW.tenant_id,
        NEW.job_id,
        'job.state_changed.v1',
        jsonb_build_object(
            'tenant_id', NEW.tenant_id,
            'job_id', NEW.job_id,
            'job_type', NEW.job_type,
            'state', NEW.state,
            'state_version', NEW.state_version,
            'sequence', next_seq,
            -- RFC 3339 in UTC whatever the session's time zone.
            'occurred_at', to_char(happened AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')),
        NEW.trace_context);
    RETURN NULL;
END;
$$;

-- Named to fire after the run-queue triggers (AFTER triggers fire in name order): a transaction takes a
-- tenant's queue row, then its sequence row, always in that order, and holds the sequence for the shortest
-- time. An INSERT's WHEN cannot read OLD, hence two triggers on one function.
CREATE TRIGGER extraction_jobs_write_state_event_on_insert
AFTER INSERT ON extraction_jobs
FOR EACH ROW EXECUTE FUNCTION record_job_state_event();
CREATE TRIGGER extraction_jobs_write_state_event_on_update
AFTER UPDATE OF state ON extraction_jobs
FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state)
EXECUTE FUNCTION record_job_state_event();

-- Every tenant has its sequence row from the start, so the job trigger's first statement finds it.
CREATE FUNCTION create_tenant_event_sequence() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp
AS $$
BEGIN
    INSERT INTO tenant_event_sequences (tenant_id) VALUES (NEW.tenant_id) ON CONFLICT (tenant_id) DO NOTHING;
    RETURN NULL;
END;
$$;
CREATE TRIGGER tenants_create_event_sequence AFTER INSERT ON tenants
FOR EACH ROW EXECUTE FUNCTION create_tenant_event_sequence();

-- Only the system reads them (the notifier, as tollgate_system) and only the scheduler's retention deletes;
-- every write is the trigger's. Tenants read their jobs through the API, not these tables.
ALTER TABLE tenant_event_sequences ENABLE ROW LEVEL SECURITY;
ALTER TABLE job_state_events ENABLE ROW LEVEL SECURITY;
CREATE POLICY system_all ON tenant_event_sequences TO tollgate_system USING (true);
CREATE POLICY system_all ON job_state_events TO tollgate_system USING (true);
GRANT SELECT ON tenant_event_sequences TO tollgate_system;
GRANT SELECT, DELETE ON job_state_events TO tollgate_system;
REVOKE ALL ON FUNCTION record_job_state_event() FROM PUBLIC;
REVOKE ALL ON FUNCTION create_tenant_event_sequence() FROM PUBLIC;
