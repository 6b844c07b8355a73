-- Usage shows the batch discount (DESIGN §6, §7): usage_daily learns how many of its attempts went through
-- a provider batch and what the batch price saved against the list price (job_attempts.discount_usd, from
-- migration 0019; cost_usd stays what was paid). The same trigger that keeps tokens and cost (migration
-- 0016) keeps them, as the difference between an attempt row before and after each update, so an attempt
-- recorded, re-recorded or closed by anyone counts exactly once.

-- Constant defaults: adding them rewrites no rows.
ALTER TABLE usage_daily
    ADD COLUMN batch_attempts bigint NOT NULL DEFAULT 0,
    ADD COLUMN discount_usd numeric(18, 6) NOT NULL DEFAULT 0;

-- 0016's add_attempt_usage with the two batch counters; the old signature goes below, once nothing calls it.
CREATE FUNCTION add_attempt_usage(
    p_tenant_id uuid, p_day date, p_job_type text, p_model text, p_attempts integer, p_input bigint,
    p_output bigint, p_cost numeric, p_batch_attempts integer, p_discount numeric)
RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = public, pg_temp
AS $$
    INSERT INTO usage_daily AS u (tenant_id, day, job_type, model, attempts, input_tokens, output_tokens,
                                  cost_usd, batch_attempts, discount_usd)
    VALUES (p_tenant_id, p_day, p_job_type, p_model, p_attempts, p_input, p_output, p_cost, p_batch_attempts,
            p_discount)
    ON CONFLICT (tenant_id, day, job_type, model) DO UPDATE
    SET attempts = u.attempts + EXCLUDED.attempts,
        input_tokens = u.input_tokens + EXCLUDED.input_tokens,
        output_tokens = u.output_tokens + EXCLUDED.output_tokens,
        cost_usd = u.cost_usd + EXCLUDED.cost_usd,
        batch_attempts = u.batch_attempts + EXCLUDED.batch_attempts,
        discount_usd = u.discount_usd + EXCLUDED.discount_usd
$$;

-- Everything 0016's version did, unchanged, plus: a closed attempt that names a batch counts one batch
-- attempt, and its discount, in the same row as its cost. A discount is not a cost: the job's totals, the
-- completed bucket and the month's spend (budgets) move by what was paid only.
CREATE OR REPLACE FUNCTION track_attempt_usage() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp
AS $$
DECLARE
    was_done   boolean := OLD.finished_at IS NOT NULL;
    is_done    boolean := NEW.finished_at IS NOT NULL;
    old_in     bigint := CASE WHEN was_done THEN coalesce(OLD.input_tokens, 0) ELSE 0 END;
    old_out    bigint := CASE WHEN was_done THEN coalesce(OLD.output_tokens, 0) ELSE 0 END;
    old_cost   numeric := CASE WHEN was_done THEN coalesce(OLD.cost_usd, 0) ELSE 0 END;
    old_batch  integer := (was_done AND OLD.batch_id IS NOT NULL)::integer;
    old_disc   numeric := CASE WHEN was_done THEN coalesce(OLD.discount_usd, 0) ELSE 0 END;
    new_in     bigint := CASE WHEN is_done THEN coalesce(NEW.input_tokens, 0) ELSE 0 END;
    new_out    bigint := CASE WHEN is_done THEN coalesce(NEW.output_tokens, 0) ELSE 0 END;
    new_cost   numeric := CASE WHEN is_done THEN coalesce(NEW.cost_usd, 0) ELSE 0 END;
    new_batch  integer := (is_done AND NEW.batch_id IS NOT NULL)::integer;
    new_disc   numeric := CASE WHEN is_done THEN coalesce(NEW.discount_usd, 0) ELSE 0 END;
    old_day    date := (OLD.finished_at AT TIME ZONE 'UTC')::date;
    new_day    date := (NEW.finished_at AT TIME ZONE 'UTC')::date;
    old_model  text := coalesce(OLD.model, '');
    new_model  text := coalesce(NEW.model, '');
    job        record;
BEGIN
    IF was_done = is_done AND old_in = new_in AND old_out = new_out AND old_cost = new_cost
       AND old_batch = new_batch AND old_disc = new_disc
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
                                  new_in - old_in, new_out - old_out, new_cost - old_cost,
                                  new_batch - old_batch, new_disc - old_disc);
    ELSE
        IF was_done THEN
            PERFORM add_attempt_usage(OLD.tenant_id, old_day, job.job_type, old_model, -1,
                                      -old_in, -old_out, -old_cost, -old_batch, -old_disc);
        END IF;
        IF is_done THEN
            PERFORM add_attempt_usage(NEW.tenant_id, new_day, job.job_type, new_model, 1,
                                      new_in, new_out, new_cost, new_batch, new_disc);
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

-- The trigger also fires when only the batch or the discount of a row changes.
CREATE OR REPLACE TRIGGER job_attempts_track_usage
AFTER UPDATE OF finished_at, model, input_tokens, output_tokens, cost_usd, batch_id, discount_usd
ON job_attempts
FOR EACH ROW EXECUTE FUNCTION track_attempt_usage();

DROP FUNCTION add_attempt_usage(uuid, date, text, text, integer, bigint, bigint, numeric);
REVOKE ALL ON FUNCTION add_attempt_usage(uuid, date, text, text, integer, bigint, bigint, numeric, integer,
    numeric) FROM PUBLIC;

-- Closed batch attempts recorded before this migration (if any: migration 0019 came without a writer) join
-- their rows, which already hold their tokens and cost. A one-time read of job_attempts (no index on
-- batch_id; the table holds the attempts retention keeps), while this transaction holds usage_daily, so
-- attempts closing meanwhile wait for it rather than count twice or not at all.
INSERT INTO usage_daily AS u (tenant_id, day, job_type, model, batch_attempts, discount_usd)
SELECT a.tenant_id, (a.finished_at AT TIME ZONE 'UTC')::date, j.job_type, coalesce(a.model, ''), count(*),
       coalesce(sum(a.discount_usd), 0)
FROM job_attempts a JOIN extraction_jobs j USING (job_id)
WHERE a.batch_id IS NOT NULL AND a.finished_at IS NOT NULL
GROUP BY 1, 2, 3, 4
ON CONFLICT (tenant_id, day, job_type, model) DO UPDATE
SET batch_attempts = u.batch_attempts + EXCLUDED.batch_attempts,
    discount_usd = u.discount_usd + EXCLUDED.discount_usd;
