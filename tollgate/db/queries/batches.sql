-- provider_batches and provider_batch_jobs (migration 0019): the batch path's record of every request file
-- from before its upload to the settle of its last line. The worker runs these as tollgate_system, with time
-- passed in as %(now)s. A batch is worked on by one holder at a time (the batcher while it prepares, a poller
-- while it follows or settles); every write of a holder is conditioned on still being it, and a holder whose
-- time ran out (it died) is replaced by the next poller, which finds the batch by its due time.

-- name: insert_provider_batch
INSERT INTO provider_batches (batch_id, provider_pool, model, holder, held_until, created_at, next_poll_at)
VALUES (%(batch_id)s, %(provider_pool)s, %(model)s, %(holder)s, %(held_until)s, %(now)s, %(held_until)s)

-- name: join_provider_batch
-- A claimed job goes into a preparing batch under the attempt and fence of its claim: its lease becomes the
-- batch's (the provider's completion window and time to settle), it counts one offer to the Batch API, and
-- its member row names the line's custom id. Conditioned on the fence: a job that moved on joins nothing.
WITH joined AS (
    UPDATE extraction_jobs
    SET batch_id = %(batch_id)s, batch_offers = batch_offers + 1, lease_until = %(lease_until)s
    WHERE job_id = %(job_id)s AND fence = %(fence)s AND state = 'RUNNING'
    RETURNING job_id, tenant_id, attempt, fence
)
INSERT INTO provider_batch_jobs (batch_id, job_id, tenant_id, attempt, fence)
SELECT %(batch_id)s, job_id, tenant_id, attempt, fence FROM joined
RETURNING job_id

-- name: hold_provider_batch
-- The holder is still at work on the batch (waiting for the batch budget, or settling a long file).
UPDATE provider_batches SET held_until = %(held_until)s, next_poll_at = %(held_until)s
WHERE batch_id = %(batch_id)s AND holder = %(holder)s AND settled_at IS NULL
RETURNING batch_id

-- name: record_batch_upload
UPDATE provider_batches
SET input_file_id = %(input_file_id)s, request_count = %(request_count)s, request_bytes = %(request_bytes)s,
    enqueued_tokens = %(enqueued_tokens)s
WHERE batch_id = %(batch_id)s AND state = 'preparing' AND holder = %(holder)s
RETURNING batch_id

-- name: record_batch_submitted
-- The provider took the batch (created by this holder, or found by a recovering one through its metadata).
-- The hold ends: pollers follow it from next_poll_at on.
UPDATE provider_batches
SET state = 'submitted', state_version = state_version + 1, provider_batch_id = %(provider_batch_id)s,
    input_file_id = coalesce(input_file_id, %(input_file_id)s), submitted_at = %(now)s,
    window_ends_at = %(window_ends_at)s, next_poll_at = %(next_poll_at)s, holder = NULL, held_until = NULL
WHERE batch_id = %(batch_id)s AND state = 'preparing' AND holder = %(holder)s
RETURNING batch_id

-- name: fail_unsubmitted_batch
-- A batch that never reached the provider (refused, given up, or its batcher died before create): it ends
-- failed and stays held, so the same holder returns its jobs and settles it.
UPDATE provider_batches
SET state = 'failed', state_version = state_version + 1, ended_at = %(now)s, error = %(error)s
WHERE batch_id = %(batch_id)s AND state = 'preparing' AND holder = %(holder)s
RETURNING batch_id

-- name: take_due_batches
-- Open batches whose time to be looked at has come and that no live holder has, taken for this poller. Its
-- next_poll_at moves to the end of the hold, so a held batch is not due to anyone else until then.
WITH due AS (
    SELECT batch_id FROM provider_batches
    WHERE settled_at IS NULL AND next_poll_at <= %(now)s AND (held_until IS NULL OR held_until <= %(now)s)
    ORDER BY next_poll_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE provider_batches b
SET holder = %(holder)s, held_until = %(held_until)s, next_poll_at = %(held_until)s
FROM due
WHERE b.batch_id = due.batch_id
RETURNING b.batch_id, b.provider_pool, b.model, b.state, b.provider_batch_id, b.input_file_id,
          b.output_file_id, b.error_file_id, b.created_at, b.window_ends_at

-- name: note_batch_progress
-- The provider is still at it: its state as last seen, the hold ends, the next look is due later.
UPDATE provider_batches
SET state = %(state)s, state_version = state_version + (state <> %(state)s)::integer,
    next_poll_at = %(next_poll_at)s, holder = NULL, held_until = NULL
WHERE batch_id = %(batch_id)s AND holder = %(holder)s AND settled_at IS NULL
RETURNING batch_id

-- name: end_provider_batch
-- The provider ended the batch: its end state and files are kept, and the holder goes on to settle it.
UPDATE provider_batches
SET state = %(state)s, state_version = state_version + (state <> %(state)s)::integer,
    output_file_id = %(output_file_id)s, error_file_id = %(error_file_id)s, ended_at = %(now)s,
    error = %(error)s
WHERE batch_id = %(batch_id)s AND holder = %(holder)s AND settled_at IS NULL
RETURNING batch_id

-- name: batch_member
-- One member and what committing its line needs about the job, by primary key.
SELECT m.job_id, m.tenant_id, m.attempt, m.fence, m.settled_at, j.max_attempts, j.deadline_at,
       j.document_id, j.model_policy, j.estimated_tokens, j.trace_context, j.state_version, j.job_type,
       j.options, j.model_escalated, j.service_tier, j.batch_offers
FROM provider_batch_jobs m JOIN extraction_jobs j USING (job_id)
WHERE m.batch_id = %(batch_id)s AND m.job_id = %(job_id)s

-- name: unsettled_batch_members
-- Members with no outcome yet, a page at a time (the partial index holds only these).
SELECT m.job_id, m.attempt, m.fence
FROM provider_batch_jobs m
WHERE m.batch_id = %(batch_id)s AND m.settled_at IS NULL AND m.job_id > %(after_job_id)s
ORDER BY m.job_id
LIMIT %(limit)s

-- name: settle_batch_member
UPDATE provider_batch_jobs SET settled_at = %(now)s, outcome = %(outcome)s
WHERE batch_id = %(batch_id)s AND job_id = %(job_id)s AND settled_at IS NULL
RETURNING job_id

-- name: return_batch_job
-- A job whose line never ran (the batch expired, failed or was cancelled before it, or never reached the
-- provider) is runnable again at once, under a new fence. The attempt was cut short by the batch, not by the
-- job: on its last attempt the budget grows by one, as release_job does; the attempt counter never goes back.
UPDATE extraction_jobs
SET state = 'RETRY_SCHEDULED', fence = fence + 1, lease_owner = NULL, lease_until = NULL,
    max_attempts = greatest(max_attempts, attempt + 1),
    next_attempt_at = %(now)s, state_version = state_version + 1, updated_at = %(now)s,
    last_error = %(error)s
WHERE job_id = %(job_id)s AND fence = %(fence)s AND state = 'RUNNING'
RETURNING job_id

-- name: settle_provider_batch
-- Every member has its outcome: the batch is done with, and leaves the pollers' index.
UPDATE provider_batches
SET settled_at = %(now)s, holder = NULL, held_until = NULL, next_poll_at = NULL
WHERE batch_id = %(batch_id)s AND holder = %(holder)s AND settled_at IS NULL
  AND state IN ('completed', 'expired', 'failed', 'cancelled')
  AND NOT EXISTS (
      SELECT 1 FROM provider_batch_jobs m WHERE m.batch_id = %(batch_id)s AND m.settled_at IS NULL)
RETURNING batch_id

-- name: get_provider_batch
SELECT model, provider_batch_id FROM provider_batches WHERE batch_id = %(batch_id)s

-- name: open_batch_gauges
-- The scheduler's gauges, once a tick: how many batches are open (not yet settled) and since when the oldest,
-- both read from the partial index of open batches by age. A batch open past its jobs' leases (the window and
-- the settle) is followed by no poller.
SELECT (SELECT min(created_at) FROM provider_batches WHERE settled_at IS NULL) AS oldest,
       (SELECT count(*) FROM provider_batches WHERE settled_at IS NULL) AS open
