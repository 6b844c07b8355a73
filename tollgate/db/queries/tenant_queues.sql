-- tenant_queues: each tenant's run-queue row and counters (migration 0010), kept by the trigger on
-- extraction_jobs. Here: what the claim does to the run-queue itself (promote, read in order, demote) and
-- the scheduler's reconciliation against a recount.

-- name: promote_waking_tenants
-- Tenants whose first queued job may run now join the claim's index, at most a few per claim. Each starts
-- no lower than the least virtual time among runnable tenants (the counter lift), so time spent idle or
-- waiting for a retry is not banked as a claim on the budget.
WITH floor AS (
    SELECT coalesce(min(vtime), 0) AS vtime FROM tenant_queues WHERE runnable
), woken AS (
    SELECT tenant_id FROM tenant_queues
    WHERE NOT runnable AND next_ready_at <= %(now)s
    ORDER BY next_ready_at, seq
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE tenant_queues q
SET runnable = true, vtime = greatest(q.vtime, floor.vtime)
FROM woken, floor
WHERE q.tenant_id = woken.tenant_id

-- name: runnable_tenants
-- The runnable tenants under their in-flight cap, least virtual time first (ties: the newer queue), after
-- a position (vtime, seq) already tried: the first entries of tenant_queues_by_vtime, whatever the number
-- of tenants.
SELECT tenant_id, vtime, seq
FROM tenant_queues
WHERE runnable AND running_jobs < %(tenant_cap)s
  AND (vtime > %(after_vtime)s OR (vtime = %(after_vtime)s AND seq < %(after_seq)s))
ORDER BY vtime, seq DESC
LIMIT %(limit)s

-- name: demote_tenant
-- A runnable tenant whose queued jobs all wait for a later time leaves the claim's index until then.
UPDATE tenant_queues SET runnable = false
WHERE tenant_id = %(tenant_id)s AND runnable AND (next_ready_at IS NULL OR next_ready_at > %(now)s)

-- name: lock_queues_to_reconcile
-- The queue rows recounted longest ago, locked: while a row is held, a job change of its tenant waits at the
-- trigger, so the recount that follows (a statement of its own, with a snapshot taken after the lock)
-- and the changes still to come never overlap.
SELECT tenant_id FROM tenant_queues
ORDER BY reconciled_at
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED

-- name: reconcile_queue
-- Sets one locked queue row to a recount of its tenant's jobs and says whether the counters had drifted.
WITH counted AS (
    SELECT * FROM tenant_queue_recount(%(tenant_id)s)
), kept AS (
    SELECT pending_jobs, pending_bytes, pending_tokens, running_jobs, ready_jobs, retry_jobs, next_ready_at
    FROM tenant_queues WHERE tenant_id = %(tenant_id)s
)
UPDATE tenant_queues q
SET pending_jobs = c.pending_jobs, pending_bytes = c.pending_bytes, pending_tokens = c.pending_tokens,
    running_jobs = c.running_jobs, ready_jobs = c.ready_jobs, retry_jobs = c.retry_jobs,
    next_ready_at = c.next_ready_at, runnable = q.runnable AND c.next_ready_at IS NOT NULL,
    reconciled_at = %(now)s
FROM counted c, kept k
WHERE q.tenant_id = %(tenant_id)s
RETURNING (k.pending_jobs, k.pending_bytes, k.pending_tokens, k.running_jobs, k.ready_jobs, k.retry_jobs,
           k.next_ready_at)
          IS DISTINCT FROM
          (c.pending_jobs, c.pending_bytes, c.pending_tokens, c.running_jobs, c.ready_jobs, c.retry_jobs,
           c.next_ready_at) AS drifted
