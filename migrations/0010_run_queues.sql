-- Per-tenant run-queues and counters (DESIGN §4): what the claim, the peek, admission and the backlog
-- metrics read instead of scanning jobs, so their cost no longer grows with tenants, backlog or waiting
-- retries. A trigger on extraction_jobs keeps them in the transaction that changes a job, whichever use case
-- makes the change (accept, claim, finish, release, reap, expire, cancel, redrive, retention).

-- One row per tenant.
-- - pending_*: the tenant's unfinished work (READY, RUNNING, RETRY_SCHEDULED), what admission limits.
-- - running_jobs: its jobs in flight, what the fairness cap limits.
-- - ready_jobs, retry_jobs: its queued jobs; next_ready_at is when the first of them may run ('-infinity'
--   while any is READY, else the earliest retry's due time, NULL when nothing is queued).
-- - runnable: next_ready_at has passed, as a claim last saw it. The trigger never reads the clock: a claim
--   promotes tenants whose time has come (tenant_queues_waking) and demotes one it finds with nothing due,
--   each once per change, so the claim's index (tenant_queues_by_vtime) holds only tenants with work now.
-- - vtime: the virtual token counter (Virtual Token Counter fairness): the estimated tokens of every job
--   the tenant has had claimed, divided by the job's priority weight. The claim serves the runnable tenant
--   with the least; a tenant promoted after idling starts no lower than the least runnable one (the counter
--   lift), so idle time is not banked.
CREATE TABLE tenant_queues (
    tenant_id       uuid PRIMARY KEY REFERENCES tenants (tenant_id),
    -- Breaks ties in virtual time the same way every time, in favour of the newer queue: a tenant lifted to
    -- the least virtual time (one that just arrived) goes before the tenant whose counter it was lifted to.
    seq             bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
    pending_jobs    bigint NOT NULL DEFAULT 0 CHECK (pending_jobs >= 0),
    pending_bytes   bigint NOT NULL DEFAULT 0 CHECK (pending_bytes >= 0),
    pending_tokens  bigint NOT NULL DEFAULT 0 CHECK (pending_tokens >= 0),
    running_jobs    bigint NOT NULL DEFAULT 0 CHECK (running_jobs >= 0),
    ready_jobs      bigint NOT NULL DEFAULT 0 CHECK (ready_jobs >= 0),
    retry_jobs      bigint NOT NULL DEFAULT 0 CHECK (retry_jobs >= 0),
    next_ready_at   timestamptz,
    runnable        boolean NOT NULL DEFAULT false,
    vtime           double precision NOT NULL DEFAULT 0 CHECK (vtime >= 0),
    reconciled_at   timestamptz NOT NULL DEFAULT '-infinity'
    -- No CHECK ties the counts to next_ready_at: a statement that changes several of a tenant's jobs runs
    -- the trigger once per row, each applying its own row's counts while its lookup of the earliest retry
    -- already sees the whole statement; they agree again after the last row. The reconciliation checks.
);
CREATE INDEX tenant_queues_by_vtime ON tenant_queues (vtime, seq DESC) WHERE runnable;
CREATE INDEX tenant_queues_waking ON tenant_queues (next_ready_at, seq)
    WHERE NOT runnable AND next_ready_at IS NOT NULL;
CREATE INDEX tenant_queues_reconcile ON tenant_queues (reconciled_at);

-- The system's unfinished and running jobs, split over 16 rows so that concurrent accepts and finishes of
-- different jobs rarely wait for one another; a job always counts in the shard of its id.
CREATE TABLE backlog_shards (
    shard       smallint PRIMARY KEY CHECK (shard BETWEEN 0 AND 15),
    unfinished  bigint NOT NULL DEFAULT 0 CHECK (unfinished >= 0),
    running     bigint NOT NULL DEFAULT 0 CHECK (running >= 0)
);
INSERT INTO backlog_shards (shard) SELECT generate_series(0, 15);

-- The claim's probes within one tenant and the trigger's earliest-retry lookup, each an index range.
CREATE INDEX extraction_jobs_ready_by_tenant ON extraction_jobs (tenant_id, priority DESC, created_at)
    WHERE state = 'READY';
CREATE INDEX extraction_jobs_retries_by_tenant ON extraction_jobs (tenant_id, next_attempt_at)
    WHERE state = 'RETRY_SCHEDULED';
-- The age of the oldest waiting job, for the backlog metrics.
CREATE INDEX extraction_jobs_ready_age ON extraction_jobs (created_at) WHERE state = 'READY';

CREATE FUNCTION job_backlog_shard(p_job_id uuid) RETURNS smallint
LANGUAGE sql IMMUTABLE AS $$ SELECT (abs(hashtext(p_job_id::text)) % 16)::smallint $$;

-- Applies one job row's change to its tenant's queue row and its backlog shard. Runs as the owner (the
-- roles that change jobs may only read the counters), after the statement, so its reads see the change.
CREATE FUNCTION track_job_queues() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp
AS $$
DECLARE
    was_unfinished boolean := TG_OP <> 'INSERT' AND OLD.state IN ('READY', 'RUNNING', 'RETRY_SCHEDULED');
    is_unfinished  boolean := TG_OP <> 'DELETE' AND NEW.state IN ('READY', 'RUNNING', 'RETRY_SCHEDULED');
    d_pending  integer := is_unfinished::integer - was_unfinished::integer;
    d_bytes    bigint := 0;
    d_tokens   bigint := 0;
    d_running  integer := (TG_OP <> 'DELETE' AND NEW.state = 'RUNNING')::integer
                        - (TG_OP <> 'INSERT' AND OLD.state = 'RUNNING')::integer;
    d_ready    integer := (TG_OP <> 'DELETE' AND NEW.state = 'READY')::integer
                        - (TG_OP <> 'INSERT' AND OLD.state = 'READY')::integer;
    d_retry    integer := (TG_OP <> 'DELETE' AND NEW.state = 'RETRY_SCHEDULED')::integer
                        - (TG_OP <> 'INSERT' AND OLD.state = 'RETRY_SCHEDULED')::integer;
    d_vtime    double precision := 0;
    retry_moved boolean := false;
    job        record;
BEGIN
    IF TG_OP = 'DELETE' THEN job := OLD; ELSE job := NEW; END IF;
    IF was_unfinished THEN
        d_bytes := d_bytes - OLD.document_bytes;
        d_tokens := d_tokens - OLD.estimated_tokens;
    END IF;
    IF is_unfinished THEN
        d_bytes := d_bytes + NEW.document_bytes;
        d_tokens := d_tokens + NEW.estimated_tokens;
    END IF;
    IF d_running > 0 THEN
        d_vtime := NEW.estimated_tokens::double precision / (NEW.priority + 1);
    END IF;
    retry_moved := TG_OP = 'UPDATE' AND NEW.state = 'RETRY_SCHEDULED' AND OLD.state = 'RETRY_SCHEDULED'
                   AND NEW.next_attempt_at IS DISTINCT FROM OLD.next_attempt_at;
    IF d_pending = 0 AND d_bytes = 0 AND d_tokens = 0 AND d_running = 0 AND d_ready = 0 AND d_retry = 0
       AND NOT retry_moved THEN
        RETURN NULL;
    END IF;

    -- Every tenant gets its row when it is created; a lookup by key guards the rare one made before that.
    PERFORM 1 FROM tenant_queues WHERE tenant_id = job.tenant_id;
    IF NOT FOUND THEN
        INSERT INTO tenant_queues (tenant_id) VALUES (job.tenant_id) ON CONFLICT (tenant_id) DO NOTHING;
    END IF;
    UPDATE tenant_queues q
    SET pending_jobs = q.pending_jobs + d_pending,
        pending_bytes = q.pending_bytes + d_bytes,
        pending_tokens = q.pending_tokens + d_tokens,
        running_jobs = q.running_jobs + d_running,
        ready_jobs = q.ready_jobs + d_ready,
        retry_jobs = q.retry_jobs + d_retry,
        vtime = q.vtime + d_vtime,
        next_ready_at = CASE
            WHEN q.ready_jobs + d_ready > 0 THEN '-infinity'::timestamptz
            WHEN q.retry_jobs + d_retry > 0 THEN (
                SELECT min(j.next_attempt_at) FROM extraction_jobs j
                WHERE j.tenant_id = q.tenant_id AND j.state = 'RETRY_SCHEDULED')
        END,
        runnable = q.runnable AND q.ready_jobs + d_ready + q.retry_jobs + d_retry > 0
    WHERE q.tenant_id = job.tenant_id;

    IF d_pending <> 0 OR d_running <> 0 THEN
        UPDATE backlog_shards
        SET unfinished = unfinished + d_pending, running = running + d_running
        WHERE shard = job_backlog_shard(job.job_id);
    END IF;
    RETURN NULL;
END;
$$;

CREATE TRIGGER extraction_jobs_track_queues
AFTER INSERT OR DELETE OR UPDATE OF state, next_attempt_at, estimated_tokens, document_bytes
ON extraction_jobs
FOR EACH ROW EXECUTE FUNCTION track_job_queues();

-- TRUNCATE fires no row trigger: emptying the jobs empties the counters with them.
CREATE FUNCTION reset_job_queues() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp
AS $$
BEGIN
    UPDATE tenant_queues
    SET pending_jobs = 0, pending_bytes = 0, pending_tokens = 0, running_jobs = 0, ready_jobs = 0,
        retry_jobs = 0, next_ready_at = NULL, runnable = false, vtime = 0;
    UPDATE backlog_shards SET unfinished = 0, running = 0;
    RETURN NULL;
END;
$$;
CREATE TRIGGER extraction_jobs_reset_queues AFTER TRUNCATE ON extraction_jobs
FOR EACH STATEMENT EXECUTE FUNCTION reset_job_queues();

-- Every tenant has its queue row from the start, so the claim and admission never miss one.
CREATE FUNCTION create_tenant_queue() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp
AS $$
BEGIN
    INSERT INTO tenant_queues (tenant_id) VALUES (NEW.tenant_id) ON CONFLICT (tenant_id) DO NOTHING;
    RETURN NULL;
END;
$$;
CREATE TRIGGER tenants_create_queue AFTER INSERT ON tenants
FOR EACH ROW EXECUTE FUNCTION create_tenant_queue();

-- The counters as a recount of one tenant's jobs would set them (an index range over its unfinished
-- jobs): the reconciliation compares, and this migration and the benchmarks' bulk loads fill from it.
CREATE FUNCTION tenant_queue_recount(p_tenant_id uuid)
RETURNS TABLE (pending_jobs bigint, pending_bytes bigint, pending_tokens bigint, running_jobs bigint,
               ready_jobs bigint, retry_jobs bigint, next_ready_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp
AS $$
    SELECT count(*),
           coalesce(sum(document_bytes), 0)::bigint,
           coalesce(sum(estimated_tokens), 0)::bigint,
           count(*) FILTER (WHERE state = 'RUNNING'),
           count(*) FILTER (WHERE state = 'READY'),
           count(*) FILTER (WHERE state = 'RETRY_SCHEDULED'),
           CASE WHEN count(*) FILTER (WHERE state = 'READY') > 0 THEN '-infinity'::timestamptz
                ELSE min(next_attempt_at) FILTER (WHERE state = 'RETRY_SCHEDULED') END
    FROM extraction_jobs
    WHERE tenant_id = p_tenant_id AND state IN ('READY', 'RUNNING', 'RETRY_SCHEDULED')
$$;

-- Rebuilds every queue row and backlog shard from the jobs, in one statement each. For this migration on
-- a live database (run while nothing else writes jobs: the migration's own transaction holds the lock) and
-- for bulk loads made with triggers off. Runnable is decided by the database's clock here, once.
CREATE FUNCTION tollgate_backfill_queues() RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp
AS $$
BEGIN
    INSERT INTO tenant_queues (tenant_id)
    SELECT tenant_id FROM tenants ORDER BY created_at, tenant_id
    ON CONFLICT (tenant_id) DO NOTHING;
    UPDATE tenant_queues q
    SET pending_jobs = coalesce(c.pending_jobs, 0),
        pending_bytes = coalesce(c.pending_bytes, 0),
        pending_tokens = coalesce(c.pending_tokens, 0),
        running_jobs = coalesce(c.running_jobs, 0),
        ready_jobs = coalesce(c.ready_jobs, 0),
        retry_jobs = coalesce(c.retry_jobs, 0),
        next_ready_at = c.next_ready_at,
        runnable = coalesce(c.next_ready_at <= now(), false)
    FROM tenant_queues t
    LEFT JOIN (
        SELECT tenant_id,
               count(*) AS pending_jobs,
               sum(document_bytes)::bigint AS pending_bytes,
               sum(estimated_tokens)::bigint AS pending_tokens,
               count(*) FILTER (WHERE state = 'RUNNING') AS running_jobs,
               count(*) FILTER (WHERE state = 'READY') AS ready_jobs,
               count(*) FILTER (WHERE state = 'RETRY_SCHEDULED') AS retry_jobs,
               CASE WHEN count(*) FILTER (WHERE state = 'READY') > 0 THEN '-infinity'::timestamptz
                    ELSE min(next_attempt_at) FILTER (WHERE state = 'RETRY_SCHEDULED') END AS next_ready_at
        FROM extraction_jobs
        WHERE state IN ('READY', 'RUNNING', 'RETRY_SCHEDULED')
        GROUP BY tenant_id
    ) c ON c.tenant_id = t.tenant_id
    WHERE q.tenant_id = t.tenant_id;
    UPDATE backlog_shards b
    SET unfinished = coalesce(c.unfinished, 0), running = coalesce(c.running, 0)
    FROM (SELECT generate_series(0, 15)::smallint AS shard) s
    LEFT JOIN (
        SELECT job_backlog_shard(job_id) AS shard,
               count(*) AS unfinished,
               count(*) FILTER (WHERE state = 'RUNNING') AS running
        FROM extraction_jobs
        WHERE state IN ('READY', 'RUNNING', 'RETRY_SCHEDULED')
        GROUP BY 1
    ) c ON c.shard = s.shard
    WHERE b.shard = s.shard;
END;
$$;
SELECT tollgate_backfill_queues();

-- The fair offers of migration 0009 visited every tenant and every waiting retry; the claim now reads the
-- queue rows (tollgate/db/queries/jobs.sql), and admission the counters.
DROP FUNCTION job_offers(timestamptz, integer);
DROP FUNCTION system_backlog(integer);

ALTER TABLE tenant_queues ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON tenant_queues TO tollgate_app
    USING (tenant_id = nullif(current_setting('tollgate.tenant_id', true), '')::uuid);
CREATE POLICY system_all ON tenant_queues TO tollgate_system USING (true);
-- Tenants' requests read their own counters (admission) and the system's backlog; only the system role
-- promotes, demotes and reconciles queue rows. Everything else is the trigger's.
GRANT SELECT ON tenant_queues, backlog_shards TO tollgate_app;
GRANT SELECT, UPDATE ON tenant_queues TO tollgate_system;
GRANT SELECT ON backlog_shards TO tollgate_system;
REVOKE ALL ON FUNCTION tenant_queue_recount(uuid) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION tenant_queue_recount(uuid) TO tollgate_system;
REVOKE ALL ON FUNCTION tollgate_backfill_queues() FROM PUBLIC;
