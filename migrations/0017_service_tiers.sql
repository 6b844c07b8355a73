-- Service tiers (high, normal, batch): each job belongs to one, a worker service serves one tier (or a
-- list), and the provider budget keeps part of itself for the higher tiers (tollgate/execution/limiter).
-- The fair claim of migration 0010 becomes one run-queue per (tenant, tier): a worker of one tier walks only
-- that tier's runnable queue rows, through an index led by the tier, so its cost stays independent of the
-- number of tenants, of their backlog and of the other tiers' work.
--
-- tenant_queues keeps what is the tenant's as a whole (admission counters, the reconciliation), kept by its
-- trigger as before. The fairness cap on running jobs applies per tier: a tenant's batch jobs filling its
-- cap would otherwise keep its own high-tier jobs waiting, which is what tiers are there to prevent. Its runnable and vtime columns no longer order
-- claims: they stay maintained so that workers of the previous version, still claiming during a rolling
-- deploy, keep a correct run-queue; a later migration may drop them.

-- Existing jobs are normal-tier, which is what they got before tiers existed. A constant default adds the
-- column without rewriting the table; the check reads it once.
ALTER TABLE extraction_jobs ADD COLUMN service_tier text NOT NULL DEFAULT 'normal'
    CONSTRAINT extraction_jobs_service_tier_check CHECK (service_tier IN ('high', 'normal', 'batch'));

-- One row per tenant and tier that ever had work in it.
-- - running_jobs, ready_jobs, retry_jobs, next_ready_at, runnable: as in tenant_queues, for this tier's
--   jobs alone.
-- - vtime: the tier's virtual token counter for this tenant (estimated tokens claimed / priority weight).
--   Tiers are separate budgets, so tenants are compared within a tier: a tenant's batch backlog does not
--   push its own high-tier jobs behind other tenants' high-tier jobs.
CREATE TABLE tier_queues (
    tenant_id      uuid NOT NULL REFERENCES tenants (tenant_id),
    service_tier   text NOT NULL CHECK (service_tier IN ('high', 'normal', 'batch')),
    -- The tenant's own seq (tenant_queues): ties in virtual time go to the newer tenant, as they did when
    -- the tenant had one queue.
    seq            bigint NOT NULL,
    running_jobs   bigint NOT NULL DEFAULT 0 CHECK (running_jobs >= 0),
    ready_jobs     bigint NOT NULL DEFAULT 0 CHECK (ready_jobs >= 0),
    retry_jobs     bigint NOT NULL DEFAULT 0 CHECK (retry_jobs >= 0),
    next_ready_at  timestamptz,
    runnable       boolean NOT NULL DEFAULT false,
    vtime          double precision NOT NULL DEFAULT 0 CHECK (vtime >= 0),
    reconciled_at  timestamptz NOT NULL DEFAULT '-infinity',
    PRIMARY KEY (tenant_id, service_tier),
    UNIQUE (service_tier, seq)
);
CREATE INDEX tier_queues_by_vtime ON tier_queues (service_tier, vtime, seq DESC) WHERE runnable;
CREATE INDEX tier_queues_waking ON tier_queues (service_tier, next_ready_at, seq)
    WHERE NOT runnable AND next_ready_at IS NOT NULL;
CREATE INDEX tier_queues_reconcile ON tier_queues (reconciled_at);

-- The claim's probes within one tenant's tier, and the trigger's earliest-retry lookup for it.
CREATE INDEX extraction_jobs_ready_by_tier ON extraction_jobs (tenant_id, service_tier, priority DESC, created_at)
    WHERE state = 'READY';
CREATE INDEX extraction_jobs_retries_by_tier ON extraction_jobs (tenant_id, service_tier, next_attempt_at)
    WHERE state = 'RETRY_SCHEDULED';

-- Applies one job's counts to its (tenant, tier) queue row: the same rules as track_job_queues, per tier.
CREATE FUNCTION apply_tier_queue(
    p_tenant_id uuid, p_tier text, d_running integer, d_ready integer, d_retry integer,
    d_vtime double precision
) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp
AS $$
BEGIN
    PERFORM 1 FROM tier_queues WHERE tenant_id = p_tenant_id AND service_tier = p_tier;
    IF NOT FOUND THEN
        -- Every tenant has its queue row from its creation on (migration 0010's trigger on tenants).
        INSERT INTO tier_queues (tenant_id, service_tier, seq)
        SELECT tenant_id, p_tier, seq FROM tenant_queues WHERE tenant_id = p_tenant_id
        ON CONFLICT (tenant_id, service_tier) DO NOTHING;
    END IF;
    UPDATE tier_queues q
    SET running_jobs = q.running_jobs + d_running,
        ready_jobs = q.ready_jobs + d_ready,
        retry_jobs = q.retry_jobs + d_retry,
        vtime = q.vtime + d_vtime,
        next_ready_at = CASE
            WHEN q.ready_jobs + d_ready > 0 THEN '-infinity'::timestamptz
            WHEN q.retry_jobs + d_retry > 0 THEN (
                SELECT min(j.next_attempt_at) FROM extraction_jobs j
                WHERE j.tenant_id = q.tenant_id AND j.service_tier = q.service_tier
                  AND j.state = 'RETRY_SCHEDULED')
        END,
        runnable = q.runnable AND q.ready_jobs + d_ready + q.retry_jobs + d_retry > 0
    WHERE q.tenant_id = p_tenant_id AND q.service_tier = p_tier;
END;
$$;

CREATE FUNCTION track_tier_queues() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp
AS $$
DECLARE
    old_run    integer := (TG_OP <> 'INSERT' AND OLD.state = 'RUNNING')::integer;
    new_run    integer := (TG_OP <> 'DELETE' AND NEW.state = 'RUNNING')::integer;
    old_ready  integer := (TG_OP <> 'INSERT' AND OLD.state = 'READY')::integer;
    old_retry  integer := (TG_OP <> 'INSERT' AND OLD.state = 'RETRY_SCHEDULED')::integer;
    new_ready  integer := (TG_OP <> 'DELETE' AND NEW.state = 'READY')::integer;
    new_retry  integer := (TG_OP <> 'DELETE' AND NEW.state = 'RETRY_SCHEDULED')::integer;
    d_vtime    double precision := 0;
BEGIN
    IF new_run > old_run THEN
        d_vtime := NEW.estimated_tokens::double precision / (NEW.priority + 1);
    END IF;
    IF TG_OP = 'UPDATE' AND OLD.service_tier <> NEW.service_tier THEN
        -- A job moved to another tier (a support action): out of the old queue row, into the new one.
        IF old_run + old_ready + old_retry > 0 THEN
            PERFORM apply_tier_queue(OLD.tenant_id, OLD.service_tier, -old_run, -old_ready, -old_retry, 0);
        END IF;
        IF new_run + new_ready + new_retry > 0 THEN
            PERFORM apply_tier_queue(NEW.tenant_id, NEW.service_tier, new_run, new_ready, new_retry, d_vtime);
        END IF;
        RETURN NULL;
    END IF;
    IF new_run = old_run AND new_ready = old_ready AND new_retry = old_retry
       AND NOT (TG_OP = 'UPDATE' AND NEW.state = 'RETRY_SCHEDULED'
                AND NEW.next_attempt_at IS DISTINCT FROM OLD.next_attempt_at) THEN
        RETURN NULL;
    END IF;
    IF TG_OP = 'DELETE' THEN
        PERFORM apply_tier_queue(OLD.tenant_id, OLD.service_tier, -old_run, -old_ready, -old_retry, 0);
    ELSE
        PERFORM apply_tier_queue(
            NEW.tenant_id, NEW.service_tier, new_run - old_run, new_ready - old_ready, new_retry - old_retry,
            d_vtime);
    END IF;
    RETURN NULL;
END;
$$;

-- Named to fire before extraction_jobs_track_queues (row triggers fire in name order): a job change then
-- locks its tier queue row before its tenant's row, the order a claim takes them in (it promotes and demotes
-- tier rows before it changes a job), so the two never wait for each other in a cycle.
CREATE TRIGGER extraction_jobs_tier_queues
AFTER INSERT OR DELETE OR UPDATE OF state, next_attempt_at, service_tier
ON extraction_jobs
FOR EACH ROW EXECUTE FUNCTION track_tier_queues();

CREATE FUNCTION reset_tier_queues() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp
AS $$
BEGIN
    UPDATE tier_queues
    SET running_jobs = 0, ready_jobs = 0, retry_jobs = 0, next_ready_at = NULL, runnable = false, vtime = 0;
    RETURN NULL;
END;
$$;
CREATE TRIGGER extraction_jobs_reset_tier_queues AFTER TRUNCATE ON extraction_jobs
FOR EACH STATEMENT EXECUTE FUNCTION reset_tier_queues();

-- Rebuilds every tier queue row from the jobs (this migration, and bulk loads made with triggers off). A
-- row that exists keeps its virtual time; a new one starts from its tenant's (the counter the tenant had
-- when its jobs were all of one tier), so fairness carries over the upgrade.
CREATE FUNCTION tollgate_backfill_tier_queues() RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp
AS $$
BEGIN
    INSERT INTO tier_queues (tenant_id, service_tier, seq, vtime)
    SELECT DISTINCT j.tenant_id, j.service_tier, t.seq, t.vtime
    FROM extraction_jobs j JOIN tenant_queues t USING (tenant_id)
    WHERE j.state IN ('READY', 'RUNNING', 'RETRY_SCHEDULED')
    ON CONFLICT (tenant_id, service_tier) DO NOTHING;
    UPDATE tier_queues q
    SET running_jobs = coalesce(c.running_jobs, 0),
        ready_jobs = coalesce(c.ready_jobs, 0),
        retry_jobs = coalesce(c.retry_jobs, 0),
        next_ready_at = c.next_ready_at,
        runnable = coalesce(c.next_ready_at <= now(), false)
    FROM tier_queues t
    LEFT JOIN (
        SELECT tenant_id, service_tier,
               count(*) FILTER (WHERE state = 'RUNNING') AS running_jobs,
               count(*) FILTER (WHERE state = 'READY') AS ready_jobs,
               count(*) FILTER (WHERE state = 'RETRY_SCHEDULED') AS retry_jobs,
               CASE WHEN count(*) FILTER (WHERE state = 'READY') > 0 THEN '-infinity'::timestamptz
                    ELSE min(next_attempt_at) FILTER (WHERE state = 'RETRY_SCHEDULED') END AS next_ready_at
        FROM extraction_jobs
        WHERE state IN ('READY', 'RUNNING', 'RETRY_SCHEDULED')
        GROUP BY tenant_id, service_tier
    ) c ON c.tenant_id = t.tenant_id AND c.service_tier = t.service_tier
    WHERE q.tenant_id = t.tenant_id AND q.service_tier = t.service_tier;
END;
$$;
SELECT tollgate_backfill_tier_queues();

ALTER TABLE tier_queues ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON tier_queues TO tollgate_app
    USING (tenant_id = nullif(current_setting('tollgate.tenant_id', true), '')::uuid);
CREATE POLICY system_all ON tier_queues TO tollgate_system USING (true);
-- Only the claim (tollgate_system) promotes and demotes; the counts are the trigger's.
GRANT SELECT ON tier_queues TO tollgate_app;
GRANT SELECT, UPDATE ON tier_queues TO tollgate_system;
REVOKE ALL ON FUNCTION apply_tier_queue(uuid, text, integer, integer, integer, double precision) FROM PUBLIC;
REVOKE ALL ON FUNCTION tollgate_backfill_tier_queues() FROM PUBLIC;
