-- webhook_deliveries and webhook_delivery_attempts: one delivery per (event, endpoint), its state and every
-- attempt to send it. Fan-out, attempts and the scheduler's restarts run as tollgate_system; listing and
-- replays run tenant-scoped (tollgate_app).

-- name: insert_delivery
-- job_id: the job the event is about (NULL for none), so a job's timeline finds its deliveries by index.
INSERT INTO webhook_deliveries
    (delivery_id, tenant_id, endpoint_id, event_id, event_type, body, trace_context, job_id)
VALUES (%(delivery_id)s, %(tenant_id)s, %(endpoint_id)s, %(event_id)s, %(event_type)s, %(body)s,
        %(trace_context)s, %(job_id)s)
ON CONFLICT (event_id, endpoint_id) DO NOTHING

-- name: deliveries_for_event
SELECT delivery_id, replays, restarts, state FROM webhook_deliveries WHERE event_id = %(event_id)s

-- name: list_endpoint_deliveries
SELECT d.delivery_id, d.event_id, d.event_type, d.state, d.attempts, d.replays, d.next_attempt_at,
       d.last_status, d.last_error, d.created_at, d.delivered_at,
       coalesce(jsonb_agg(jsonb_build_object(
           'attempt', a.attempt, 'started_at', a.started_at, 'status', a.status, 'error', a.error,
           'elapsed_ms', a.elapsed_ms) ORDER BY a.attempt) FILTER (WHERE a.attempt IS NOT NULL), '[]') AS history
FROM webhook_deliveries d
LEFT JOIN webhook_delivery_attempts a USING (delivery_id)
WHERE d.tenant_id = %(tenant_id)s AND d.endpoint_id = %(endpoint_id)s
GROUP BY d.delivery_id
ORDER BY d.created_at DESC
LIMIT %(limit)s

-- name: reopen_delivery
UPDATE webhook_deliveries
SET state = 'PENDING', replays = replays + 1, delivered_at = NULL, updated_at = %(now)s
WHERE tenant_id = %(tenant_id)s AND endpoint_id = %(endpoint_id)s AND delivery_id = %(delivery_id)s
RETURNING delivery_id, replays, restarts

-- name: reopen_failed_deliveries_since
UPDATE webhook_deliveries
SET state = 'PENDING', replays = replays + 1, updated_at = %(now)s
WHERE tenant_id = %(tenant_id)s AND endpoint_id = %(endpoint_id)s AND state = 'FAILED'
  AND created_at >= %(since)s
RETURNING delivery_id, replays, restarts

-- name: lock_delivery
SELECT d.delivery_id, d.tenant_id, d.endpoint_id, d.event_type, d.body, d.state, d.attempts, d.trace_context,
       e.url, e.secret, e.previous_secret, e.previous_secret_expires_at, e.enabled, e.deleted_at
FROM webhook_deliveries d JOIN webhook_endpoints e USING (endpoint_id)
WHERE d.delivery_id = %(delivery_id)s
FOR UPDATE OF d

-- name: count_delivery_attempt
UPDATE webhook_deliveries SET attempts = attempts + 1, updated_at = %(now)s
WHERE delivery_id = %(delivery_id)s
RETURNING attempts

-- name: finish_delivery
-- Only while the delivery is still PENDING at this attempt: an execution whose attempt was overtaken (a
-- restarted delivery's new execution attempted since, or delivered it) writes nothing over the newer outcome.
UPDATE webhook_deliveries
SET state = %(state)s, next_attempt_at = %(next_attempt_at)s, last_status = %(status)s, last_error = %(error)s,
    delivered_at = CASE WHEN %(state)s = 'DELIVERED' THEN %(now)s END, updated_at = %(now)s
WHERE delivery_id = %(delivery_id)s AND state = 'PENDING' AND attempts = %(attempt)s
RETURNING delivery_id

-- name: insert_delivery_attempt
INSERT INTO webhook_delivery_attempts
    (delivery_id, attempt, tenant_id, started_at, status, error, elapsed_ms, next_delay_seconds)
VALUES (%(delivery_id)s, %(attempt)s, %(tenant_id)s, %(started_at)s, %(status)s, %(error)s, %(elapsed_ms)s,
        %(next_delay_seconds)s)
ON CONFLICT (delivery_id, attempt) DO NOTHING

-- name: restart_stalled_deliveries
-- PENDING, yet nothing has happened since its next attempt was due: no execution is driving it any more.
WITH stalled AS (
    SELECT delivery_id FROM webhook_deliveries
    WHERE state = 'PENDING' AND greatest(next_attempt_at, updated_at) < %(stalled_before)s
    ORDER BY updated_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE webhook_deliveries d
SET restarts = d.restarts + 1, updated_at = %(now)s
FROM stalled
WHERE d.delivery_id = stalled.delivery_id
RETURNING d.delivery_id, d.tenant_id, d.endpoint_id, d.replays, d.restarts
