-- tier_queues: the run-queue of each (tenant, service tier) (migration 0017), kept by the trigger on
-- extraction_jobs. Here: what a claim for one tier does to that tier's run-queue (promote, read in order,
-- demote), the same steps as tenant_queues.sql once had for the whole tenant. The fairness cap limits a
-- tenant's running jobs per tier (the row's running_jobs), so a batch backlog never holds its own high work.

-- name: promote_waking_tier_queues
-- This tier's queue rows whose first queued job may run now join the claim's index, at most a few per
-- claim, none lower than the least virtual time among the tier's runnable rows (the counter lift).
WITH floor AS (
    SELECT coalesce(min(vtime), 0) AS vtime FROM tier_queues
    WHERE service_tier = %(service_tier)s AND runnable
), woken AS (
    SELECT tenant_id FROM tier_queues
    WHERE service_tier = %(service_tier)s AND NOT runnable AND next_ready_at <= %(now)s
    ORDER BY next_ready_at, seq
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE tier_queues q
SET runnable = true, vtime = greatest(q.vtime, floor.vtime)
FROM woken, floor
WHERE q.tenant_id = woken.tenant_id AND q.service_tier = %(service_tier)s

-- name: runnable_tier_tenants
-- The tier's runnable tenants under their in-flight cap, least virtual time first (ties: the newer queue),
-- after a position (vtime, seq) already tried: the first entries of tier_queues_by_vtime for this tier.
SELECT t.tenant_id, t.vtime, t.seq
FROM tier_queues t
WHERE t.service_tier = %(service_tier)s AND t.runnable AND t.running_jobs < %(tenant_cap)s
  AND (t.vtime > %(after_vtime)s OR (t.vtime = %(after_vtime)s AND t.seq < %(after_seq)s))
ORDER BY t.vtime, t.seq DESC
LIMIT %(limit)s

-- name: demote_tier_queue
-- A runnable queue row whose queued jobs all wait for a later time leaves the claim's index until then.
UPDATE tier_queues SET runnable = false
WHERE tenant_id = %(tenant_id)s AND service_tier = %(service_tier)s AND runnable
  AND (next_ready_at IS NULL OR next_ready_at > %(now)s)

-- name: peek_next_tier_job
-- The estimated tokens of the job a claim for this tier would pick now (the same queue rows in the same
-- order, the same probes), without taking it: a slot sizes its budget permit by it before it claims.
-- Nothing is locked, so the job claimed a moment later may be another one; the slot then resizes the
-- permit. Rows whose time has come but that no claim has promoted yet are read as the claim would promote
-- them (at the lifted virtual time), and a job past its deadline is sized like any other.
WITH floor AS (
    SELECT coalesce(min(vtime), 0) AS vtime FROM tier_queues
    WHERE service_tier = %(service_tier)s AND runnable
), t AS (
    (SELECT t.tenant_id, t.vtime, t.seq FROM tier_queues t
     WHERE t.service_tier = %(service_tier)s AND t.runnable AND t.running_jobs < %(tenant_cap)s
     ORDER BY t.vtime, t.seq DESC
     LIMIT %(limit)s)
    UNION ALL
    (SELECT t.tenant_id, greatest(t.vtime, floor.vtime), t.seq
     FROM tier_queues t, floor
     WHERE t.service_tier = %(service_tier)s AND NOT t.runnable AND t.next_ready_at <= %(now)s
       AND t.running_jobs < %(tenant_cap)s
     ORDER BY t.next_ready_at, t.seq
     LIMIT %(limit)s)
)
SELECT best.estimated_tokens
FROM t
CROSS JOIN LATERAL (
    SELECT estimated_tokens FROM (
        (SELECT estimated_tokens, priority, created_at FROM extraction_jobs
         WHERE tenant_id = t.tenant_id AND service_tier = %(service_tier)s AND state = 'READY'
           AND attempt < max_attempts
         ORDER BY priority DESC, created_at LIMIT 1)
        UNION ALL
        (SELECT estimated_tokens, priority, created_at FROM extraction_jobs
         WHERE tenant_id = t.tenant_id AND service_tier = %(service_tier)s AND state = 'RETRY_SCHEDULED'
           AND next_attempt_at <= %(now)s AND attempt < max_attempts
         ORDER BY next_attempt_at LIMIT 1)
    ) candidates
    ORDER BY priority DESC, created_at
    LIMIT 1
) best
ORDER BY t.vtime, t.seq DESC
LIMIT 1

-- name: lock_tier_queues_to_reconcile
-- The tier queue rows recounted longest ago, locked: a job change of that tenant and tier takes the row first
-- (its trigger fires before the tenant's), so it waits, and the recount that follows sees a settled tier.
SELECT tenant_id, service_tier FROM tier_queues
ORDER BY reconciled_at
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED

-- name: reconcile_tier_queue
-- Sets one locked tier queue row to a recount of that tenant's jobs of the tier (an index range over them)
-- and says whether its counts had drifted. Runnable and the virtual time are the claim's, not counts.
WITH counted AS (
    SELECT count(*) FILTER (WHERE state = 'RUNNING') AS running_jobs,
           count(*) FILTER (WHERE state = 'READY') AS ready_jobs,
           count(*) FILTER (WHERE state = 'RETRY_SCHEDULED') AS retry_jobs,
           CASE WHEN count(*) FILTER (WHERE state = 'READY') > 0 THEN '-infinity'::timestamptz
                ELSE min(next_attempt_at) FILTER (WHERE state = 'RETRY_SCHEDULED') END AS next_ready_at
    FROM extraction_jobs
    WHERE tenant_id = %(tenant_id)s AND service_tier = %(service_tier)s
      AND state IN ('READY', 'RUNNING', 'RETRY_SCHEDULED')
), kept AS (
    SELECT running_jobs, ready_jobs, retry_jobs, next_ready_at FROM tier_queues
    WHERE tenant_id = %(tenant_id)s AND service_tier = %(service_tier)s
)
UPDATE tier_queues q
SET running_jobs = c.running_jobs, ready_jobs = c.ready_jobs, retry_jobs = c.retry_jobs,
    next_ready_at = c.next_ready_at, runnable = q.runnable AND c.next_ready_at IS NOT NULL,
    reconciled_at = %(now)s
FROM counted c, kept k
WHERE q.tenant_id = %(tenant_id)s AND q.service_tier = %(service_tier)s
RETURNING (k.running_jobs, k.ready_jobs, k.retry_jobs, k.next_ready_at)
          IS DISTINCT FROM (c.running_jobs, c.ready_jobs, c.retry_jobs, c.next_ready_at) AS drifted
