-- The fair order in which runnable jobs are offered to workers, kept in one place: the claim takes the first
-- offer, and the peek before it (which sizes the slot's budget permit) reads the same first offer.
-- Each tenant offers its best runnable jobs; tenants at their in-flight cap offer nothing; among the
-- offers, the one whose tenant has the least work running (tokens in flight plus the job's, divided by its
-- priority weight) goes first, oldest first on ties. Runs with the caller's rights (the worker's system
-- role); nothing is locked here, the claim locks the row it picks.
CREATE FUNCTION job_offers(p_now timestamptz, p_tenant_cap integer)
RETURNS TABLE (job_id uuid, estimated_tokens integer, score float8, ready_at timestamptz)
LANGUAGE sql STABLE SET search_path = public, pg_temp
AS $$
    WITH load AS (
        SELECT tenant_id, count(*) AS running, sum(estimated_tokens) AS tokens
        FROM extraction_jobs WHERE state = 'RUNNING'
        GROUP BY tenant_id
    )
    SELECT best.job_id,
           best.estimated_tokens,
           (coalesce(l.tokens, 0) + best.estimated_tokens)::float8 / (best.priority + 1) AS score,
           best.ready_at
    FROM tenants t
    LEFT JOIN load l ON l.tenant_id = t.tenant_id
    CROSS JOIN LATERAL (
        SELECT j.job_id, j.priority, j.estimated_tokens, coalesce(j.next_attempt_at, j.created_at) AS ready_at
        FROM extraction_jobs j
        WHERE j.tenant_id = t.tenant_id
          AND (j.state = 'READY' OR (j.state = 'RETRY_SCHEDULED' AND j.next_attempt_at <= p_now))
          AND j.deadline_at > p_now
          AND j.attempt < j.max_attempts
        ORDER BY j.priority DESC, j.created_at
        LIMIT 4
    ) best
    WHERE coalesce(l.running, 0) < p_tenant_cap
$$;
REVOKE ALL ON FUNCTION job_offers(timestamptz, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION job_offers(timestamptz, integer) TO tollgate_system;
