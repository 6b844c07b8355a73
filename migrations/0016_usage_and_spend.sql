-- Usage aggregates and monthly spend budgets (DESIGN §3 admission, §4 counters, §6 usage).
--
-- Like the run-queues of migration 0010, every counter here is kept by triggers, in the transaction that
-- changes the row it counts, whichever use case makes the change: the worker's outcome, a stale worker's
-- discarded record, the reaper closing an expired attempt, acceptance, cancel, review decisions, redrive.
-- So each attempt row's tokens and cost reach the aggregates exactly once (as the difference between the
-- row before and after each update), and GET /usage, the CLI and admission read counters, never attempts.
-- Retention deletes attempts and jobs without touching the aggregates: usage outlives the rows it counts.

-- A tenant's monthly budget in USD; NULL is no budget. The system's own is the SYSTEM_MONTHLY_BUDGET_USD
-- setting.
ALTER TABLE tenants ADD COLUMN monthly_budget_usd numeric(14, 6) CHECK (monthly_budget_usd >= 0);

-- A job's running totals over its recorded attempts (what its views and results show), and the spend it
-- holds in reserve while unfinished: its estimated cost, in the month it was accepted (the application's
-- clock decides the month, so the reservation is released from the row it was added to). Constant defaults:
-- adding them rewrites no rows.
ALTER TABLE extraction_jobs
    ADD COLUMN input_tokens bigint NOT NULL DEFAULT 0,
    ADD COLUMN output_tokens bigint NOT NULL DEFAULT 0,
    ADD COLUMN cost_usd numeric(14, 6) NOT NULL DEFAULT 0,
    ADD COLUMN attempts_recorded integer NOT NULL DEFAULT 0,
    ADD COLUMN reserved_usd numeric(14, 6) NOT NULL DEFAULT 0 CHECK (reserved_usd >= 0),
    ADD COLUMN spend_month date;

-- Per tenant, UTC day, job type and model ('' for an attempt that ended before any call): the attempts
-- closed that day and the tokens and cost they recorded.
CREATE TABLE usage_daily (
    tenant_id      uuid NOT NULL REFERENCES tenants (tenant_id),
    day            date NOT NULL,
    job_type       text NOT NULL,
    model          text NOT NULL,
    attempts       bigint NOT NULL DEFAULT 0,
    input_tokens   bigint NOT NULL DEFAULT 0,
    output_tokens  bigint NOT NULL DEFAULT 0,
    cost_usd       numeric(18, 6) NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant_id, day, job_type, model)
);
CREATE INDEX usage_daily_by_day ON usage_daily (day);

-- Per tenant, UTC day and job type: jobs that finished that day (any finished state, counted when the job
-- first leaves the unfinished states), and those that completed (reached SUCCEEDED) with the totals of all
-- their attempts, so cost per completed job is one division. A job's attempts may use several models, so
-- this table has no model: a completed job is one job, not a share of one per model.
CREATE TABLE usage_jobs_daily (
    tenant_id                uuid NOT NULL REFERENCES tenants (tenant_id),
    day                      date NOT NULL,
    job_type                 text NOT NULL,
    finished_jobs            bigint NOT NULL DEFAULT 0,
    completed_jobs           bigint NOT NULL DEFAULT 0,
    completed_input_tokens   bigint NOT NULL DEFAULT 0,
    completed_output_tokens  bigint NOT NULL DEFAULT 0,
    completed_cost_usd       numeric(18, 6) NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant_id, day, job_type)
);
CREATE INDEX usage_jobs_daily_by_day ON usage_jobs_daily (day);

-- A tenant's month: cost recorded by its attempts closed in the month (spent), the estimated cost of its
-- accepted, unfinished jobs (reserved), and the highest spend threshold already announced (0, 80 or 100),
-- so each threshold's event is written once, by the transaction that crossed it.
CREATE TABLE tenant_spend (
    tenant_id         uuid NOT NULL REFERENCES tenants (tenant_id),
    month             date NOT NULL CHECK (extract(day FROM month) = 1),
    spent_usd         numeric(18, 6) NOT NULL DEFAULT 0,
    reserved_usd      numeric(18, 6) NOT NULL DEFAULT 0,
    notified_percent  smallint NOT NULL DEFAULT 0 CHECK (notified_percent IN (0, 80, 100)),
    PRIMARY KEY (tenant_id, month)
);

-- The system's month, split over 16 rows like backlog_shards (a job counts in the shard of its id), so
-- concurrent accepts and finishes of different tenants rarely wait on one row. No tenant reference: it
-- outlives tenants.
CREATE TABLE system_spend (
    month         date NOT NULL CHECK (extract(day FROM month) = 1),
    shard         smallint NOT NULL CHECK (shard BETWEEN 0 AND 15),
    spent_usd     numeric(18, 6) NOT NULL DEFAULT 0,
    reserved_usd  numeric(18, 6) NOT NULL DEFAULT 0,
    PRIMARY KEY (month, shard)
);

CREATE FUNCTION utc_month(p_at timestamptz) RETURNS date
LANGUAGE sql IMMUTABLE AS $$ SELECT date_trunc('month', p_at AT TIME ZONE 'UTC')::date $$;

-- Adds to a month's spend: the tenant's row and the job's system shard.
CREATE FUNCTION add_spend(p_tenant_id uuid, p_job_id uuid, p_month date, p_spent numeric, p_reserved numeric)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp
AS $$
BEGIN
    IF p_spent = 0 AND p_reserved = 0 THEN
        RETURN;
    END IF;
    INSERT INTO tenant_spend AS s (tenant_id, month, spent_usd, reserved_usd)
    VALUES (p_tenant_id, p_month, p_spent, greatest(p_reserved, 0))
    ON CONFLICT (tenant_id, month) DO UPDATE
    SET spent_usd = s.spent_usd + EXCLUDED.spent_usd,
        reserved_usd = greatest(s.reserved_usd + p_reserved, 0);
    INSERT INTO system_spend AS s (month, shard, spent_usd, reserved_usd)
    VALUES (p_month, job_backlog_shard(p_job_id), p_spent, greatest(p_reserved, 0))
    ON CONFLICT (month, shard) DO UPDATE
    SET spent_usd = s.spent_usd + EXCLUDED.spent_usd,
        reserved_usd = greatest(s.reserved_usd + p_reserved, 0);
END;
$$;

CREATE FUNCTION add_attempt_usage(
    p_tenant_id uuid, p_day date, p_job_type text, p_model text, p_attempts integer, p_input bigint,
    p_output bigint, p_cost numeric)
RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = public, pg_temp
AS $$
    INSERT INTO usage_daily AS u (tenant_id, day, job_type, model, attempts, input_tokens, output_tokens,
                                  cost_usd)
    VALUES (p_tenant_id, p_day, p_job_type, p_model, p_attempts, p_input, p_output, p_cost)
    ON CONFLICT (tenant_id, day, job_type, model) DO UPDATE
    SET attempts = u.attempts + EXCLUDED.attempts,
        input_tokens = u.input_tokens + EXCLUDED.input_tokens,
        output_tokens = u.output_tokens + EXCLUDED.output_tokens,
        cost_usd = u.cost_usd + EXCLUDED.cost_usd
$$;

CREATE FUNCTION add_job_usage(
    p_tenant_id uuid, p_day date, p_job_type text, p_finished integer, p_completed integer, p_input bigint,
    p_output bigint, p_cost numeric)
RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = public, pg_temp
AS $$
    INSERT INTO usage_jobs_daily AS u (tenant_id, day, job_type, finished_jobs, completed_jobs,
                                       completed_input_tokens, completed_output_tokens, completed_cost_usd)
    VALUES (p_tenant_id, p_day, p_job_type, p_finished, p_completed, p_input, p_output, p_cost)
    ON CONFLICT (tenant_id, day, job_type) DO UPDATE
    SET finished_jobs = u.finished_jobs + EXCLUDED.finished_jobs,
        completed_jobs = u.completed_jobs + EXCLUDED.completed_jobs,
        completed_input_tokens = u.completed_input_tokens + EXCLUDED.completed_input_tokens,
        completed_output_tokens = u.completed_output_tokens + EXCLUDED.completed_output_tokens,
        completed_cost_usd = u.completed_cost_usd + EXCLUDED.completed_cost_usd
$$;

-- An attempt row closed or re-recorded: its contribution before the update comes off, its contribution
-- after goes on (usually one upsert: a close of an open attempt, or a record of the same day and model). The
-- job's totals move by the difference; if the job already completed (a stale worker's record arriving after
-- a later attempt succeeded), so does its completed bucket; the cost lands in the month's spend.
CREATE FUNCTION track_attempt_usage() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp
AS $$
DECLARE
    was_done  boolean := OLD.finished_at IS NOT NULL;
    is_done   boolean := NEW.finished_at IS NOT NULL;
    old_in    bigint := CASE WHEN was_done THEN coalesce(OLD.input_tokens, 0) ELSE 0 END;
    old_out   bigint := CASE WHEN was_done THEN coalesce(OLD.output_tokens, 0) ELSE 0 END;
    old_cost  numeric := CASE WHEN was_done THEN coalesce(OLD.cost_usd, 0) ELSE 0 END;
    new_in    bigint := CASE WHEN is_done THEN coalesce(NEW.input_tokens, 0) ELSE 0 END;
    new_out   bigint := CASE WHEN is_done THEN coalesce(NEW.output_tokens, 0) ELSE 0 END;
    new_cost  numeric := CASE WHEN is_done THEN coalesce(NEW.cost_usd, 0) ELSE 0 END;
    old_day   date := (OLD.finished_at AT TIME ZONE 'UTC')::date;
    new_day   date := (NEW.finished_at AT TIME ZONE 'UTC')::date;
    old_model text := coalesce(OLD.model, '');
    new_model text := coalesce(NEW.model, '');
    job       record;
BEGIN
    IF was_done = is_done AND old_in = new_in AND old_out = new_out AND old_cost = new_cost
       AND (NOT is_done OR (old_day = new_day AND old_model = new_model)) THEN
        RETURN NULL;
    END IF;
    UPDATE extraction_jobs j
    SET input_tokens = j.input_tokens + new_in - old_in,
        output_tokens = j.output_tokens + new_out - old_out,
        cost_usd = j.cost_usd + new_cost - old_cost,
        attempts_recorded = j.attempts_recorded + is_done::integer - was_done::integer
    WHERE j.job_id = NEW.job_id
    RETURNING j.job_type, j.state, j.finished_at INTO job;

    IF was_done AND is_done AND old_day = new_day AND old_model = new_model THEN
        PERFORM add_attempt_usage(NEW.tenant_id, new_day, job.job_type, new_model, 0,
                                  new_in - old_in, new_out - old_out, new_cost - old_cost);
    ELSE
        IF was_done THEN
            PERFORM add_attempt_usage(OLD.tenant_id, old_day, job.job_type, old_model, -1,
                                      -old_in, -old_out, -old_cost);
        END IF;
        IF is_done THEN
            PERFORM add_attempt_usage(NEW.tenant_id, new_day, job.job_type, new_model, 1,
                                      new_in, new_out, new_cost);
        END IF;
    END IF;

    IF job.state = 'SUCCEEDED' AND (new_in <> old_in OR new_out <> old_out OR new_cost <> old_cost) THEN
        PERFORM add_job_usage(NEW.tenant_id, (job.finished_at AT TIME ZONE 'UTC')::date, job.job_type, 0, 0,
                              new_in - old_in, new_out - old_out, new_cost - old_cost);
    END IF;
    -- A cost counts in the month its attempt closed.
    IF new_cost <> old_cost THEN
        PERFORM add_spend(NEW.tenant_id, NEW.job_id, utc_month(coalesce(NEW.finished_at, OLD.finished_at)),
                          new_cost - old_cost, 0);
    END IF;
    RETURN NULL;
END;
$$;

CREATE TRIGGER job_attempts_track_usage
AFTER UPDATE OF finished_at, model, input_tokens, output_tokens, cost_usd ON job_attempts
FOR EACH ROW EXECUTE FUNCTION track_attempt_usage();

-- A job accepted with a reservation adds it to its month; a job that finishes (any finished state) gives
-- it back, once: the row's reserved_usd is zeroed here, so a redriven job finishing again gives nothing
-- back twice. Entering SUCCEEDED adds the job and its totals to the completed bucket of the day it
-- finished; leaving it (an audited redrive) takes them off again.
CREATE FUNCTION track_job_spend() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp
AS $$
DECLARE
    was_unfinished boolean := TG_OP = 'UPDATE' AND OLD.state IN ('READY', 'RUNNING', 'RETRY_SCHEDULED');
    is_unfinished  boolean := NEW.state IN ('READY', 'RUNNING', 'RETRY_SCHEDULED');
    was_completed  boolean := TG_OP = 'UPDATE' AND OLD.state = 'SUCCEEDED';
    is_completed   boolean := NEW.state = 'SUCCEEDED';
BEGIN
    IF TG_OP = 'INSERT' THEN
        IF NEW.reserved_usd > 0 THEN
            PERFORM add_spend(NEW.tenant_id, NEW.job_id, NEW.spend_month, 0, NEW.reserved_usd);
        END IF;
        RETURN NEW;
    END IF;
    IF was_unfinished AND NOT is_unfinished THEN
        IF OLD.reserved_usd > 0 AND OLD.spend_month IS NOT NULL THEN
            PERFORM add_spend(NEW.tenant_id, NEW.job_id, OLD.spend_month, 0, -OLD.reserved_usd);
        END IF;
        NEW.reserved_usd := 0;
    END IF;
    -- A finished row without finish time is refused by finished_iff_terminal after this trigger: leave the
    -- refusal to the constraint rather than fail on a NULL day here.
    IF NEW.finished_at IS NULL THEN
        RETURN NEW;
    END IF;
    IF was_unfinished AND NOT is_unfinished THEN
        PERFORM add_job_usage(NEW.tenant_id, (NEW.finished_at AT TIME ZONE 'UTC')::date, NEW.job_type,
                              1, 0, 0, 0, 0);
    END IF;
    IF is_completed AND NOT was_completed THEN
        PERFORM add_job_usage(NEW.tenant_id, (NEW.finished_at AT TIME ZONE 'UTC')::date, NEW.job_type,
                              0, 1, NEW.input_tokens, NEW.output_tokens, NEW.cost_usd);
    ELSIF was_completed AND NOT is_completed THEN
        PERFORM add_job_usage(OLD.tenant_id, (OLD.finished_at AT TIME ZONE 'UTC')::date, OLD.job_type,
                              0, -1, -OLD.input_tokens, -OLD.output_tokens, -OLD.cost_usd);
    END IF;
    RETURN NEW;
END;
$$;

CREATE TRIGGER extraction_jobs_track_spend
BEFORE INSERT OR UPDATE OF state ON extraction_jobs
FOR EACH ROW EXECUTE FUNCTION track_job_spend();

ALTER TABLE usage_daily ENABLE ROW LEVEL SECURITY;
ALTER TABLE usage_jobs_daily ENABLE ROW LEVEL SECURITY;
ALTER TABLE tenant_spend ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON usage_daily TO tollgate_app
    USING (tenant_id = nullif(current_setting('tollgate.tenant_id', true), '')::uuid);
CREATE POLICY tenant_isolation ON usage_jobs_daily TO tollgate_app
    USING (tenant_id = nullif(current_setting('tollgate.tenant_id', true), '')::uuid);
CREATE POLICY tenant_isolation ON tenant_spend TO tollgate_app
    USING (tenant_id = nullif(current_setting('tollgate.tenant_id', true), '')::uuid);
CREATE POLICY system_all ON usage_daily TO tollgate_system USING (true);
CREATE POLICY system_all ON usage_jobs_daily TO tollgate_system USING (true);
CREATE POLICY system_all ON tenant_spend TO tollgate_system USING (true);
-- Tenants read their own usage and spend (GET /usage, admission) and the system's month (admission); the
-- worker announces thresholds (notified_percent) as tollgate_system. Every counter is the triggers'.
GRANT SELECT ON usage_daily, usage_jobs_daily, tenant_spend, system_spend TO tollgate_app;
GRANT SELECT ON usage_daily, usage_jobs_daily, system_spend TO tollgate_system;
GRANT SELECT, UPDATE (notified_percent) ON tenant_spend TO tollgate_system;
REVOKE ALL ON FUNCTION add_spend(uuid, uuid, date, numeric, numeric) FROM PUBLIC;
REVOKE ALL ON FUNCTION add_attempt_usage(uuid, date, text, text, integer, bigint, bigint, numeric) FROM PUBLIC;
REVOKE ALL ON FUNCTION add_job_usage(uuid, date, text, integer, integer, bigint, bigint, numeric) FROM PUBLIC;
