-- tenant_queues: each tenant's counters (migration 0010), kept by the trigger on extraction_jobs. Here: the
-- scheduler's reconciliation against a recount. The claim's run-queue is per service tier since migration
-- 0017 (tier_queues.sql).

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
