-- Webhook endpoints and deliveries. Endpoint queries run tenant-scoped (tollgate_app); delivery fan-out
-- and attempts run as tollgate_system.

-- name: insert_endpoint
INSERT INTO webhook_endpoints (endpoint_id, tenant_id, url, description, event_types, secret, updated_at)
VALUES (%(endpoint_id)s, %(tenant_id)s, %(url)s, %(description)s, %(event_types)s, %(secret)s, %(now)s)
RETURNING *

-- name: list_endpoints
SELECT * FROM webhook_endpoints
WHERE tenant_id = %(tenant_id)s AND deleted_at IS NULL
ORDER BY created_at, endpoint_id

-- name: get_endpoint
SELECT * FROM webhook_endpoints
WHERE tenant_id = %(tenant_id)s AND endpoint_id = %(endpoint_id)s AND deleted_at IS NULL

-- name: update_endpoint
-- Re-enabling clears the failure streak; every field is optional (NULL keeps the current value).
UPDATE webhook_endpoints
SET url = coalesce(%(url)s, url),
    description = coalesce(%(description)s, description),
    event_types = coalesce(%(event_types)s::text[], event_types),
    enabled = coalesce(%(enabled)s, enabled),
    disabled_reason = CASE WHEN %(enabled)s IS TRUE THEN NULL
                           WHEN %(enabled)s IS FALSE THEN 'disabled by the tenant'
                           ELSE disabled_reason END,
    consecutive_failures = CASE WHEN %(enabled)s IS TRUE THEN 0 ELSE consecutive_failures END,
    first_failure_at = CASE WHEN %(enabled)s IS TRUE THEN NULL ELSE first_failure_at END,
    updated_at = %(now)s
WHERE tenant_id = %(tenant_id)s AND endpoint_id = %(endpoint_id)s AND deleted_at IS NULL
RETURNING *

-- name: delete_endpoint
UPDATE webhook_endpoints
SET deleted_at = %(now)s, enabled = false, disabled_reason = 'deleted', updated_at = %(now)s
WHERE tenant_id = %(tenant_id)s AND endpoint_id = %(endpoint_id)s AND deleted_at IS NULL
RETURNING endpoint_id

-- name: rotate_endpoint_secret
UPDATE webhook_endpoints
SET previous_secret = secret, previous_secret_expires_at = %(previous_expires_at)s, secret = %(secret)s,
    updated_at = %(now)s
WHERE tenant_id = %(tenant_id)s AND endpoint_id = %(endpoint_id)s AND deleted_at IS NULL
RETURNING *

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

-- name: subscribed_endpoints
SELECT endpoint_id FROM webhook_endpoints
WHERE tenant_id = %(tenant_id)s AND deleted_at IS NULL AND enabled AND %(event_type)s = ANY(event_types)

-- name: insert_delivery
INSERT INTO webhook_deliveries (delivery_id, tenant_id, endpoint_id, event_id, event_type, body, trace_context)
VALUES (%(delivery_id)s, %(tenant_id)s, %(endpoint_id)s, %(event_id)s, %(event_type)s, %(body)s,
        %(trace_context)s)
ON CONFLICT (event_id, endpoint_id) DO NOTHING

-- name: deliveries_for_event
SELECT delivery_id, replays, restarts, state FROM webhook_deliveries WHERE event_id = %(event_id)s

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
UPDATE webhook_deliveries
SET state = %(state)s, next_attempt_at = %(next_attempt_at)s, last_status = %(status)s, last_error = %(error)s,
    delivered_at = CASE WHEN %(state)s = 'DELIVERED' THEN %(now)s END, updated_at = %(now)s
WHERE delivery_id = %(delivery_id)s

-- name: insert_delivery_attempt
INSERT INTO webhook_delivery_attempts
    (delivery_id, attempt, tenant_id, started_at, status, error, elapsed_ms, next_delay_seconds)
VALUES (%(delivery_id)s, %(attempt)s, %(tenant_id)s, %(started_at)s, %(status)s, %(error)s, %(elapsed_ms)s,
        %(next_delay_seconds)s)
ON CONFLICT (delivery_id, attempt) DO NOTHING

-- name: endpoint_succeeded
UPDATE webhook_endpoints
SET consecutive_failures = 0, first_failure_at = NULL, auth_failures = 0
WHERE endpoint_id = %(endpoint_id)s

-- name: endpoint_failed
UPDATE webhook_endpoints
SET consecutive_failures = consecutive_failures + 1,
    first_failure_at = coalesce(first_failure_at, %(now)s),
    auth_failures = CASE WHEN %(auth_failure)s THEN auth_failures + 1 ELSE 0 END
WHERE endpoint_id = %(endpoint_id)s
RETURNING consecutive_failures, first_failure_at, auth_failures

-- name: disable_endpoint
UPDATE webhook_endpoints
SET enabled = false, disabled_reason = %(reason)s, updated_at = %(now)s
WHERE endpoint_id = %(endpoint_id)s AND enabled

-- name: signing_secrets_for_url
-- The demo ERP receiver of the local system learns the secrets of endpoints registered at its own URLs.
SELECT secret, previous_secret, previous_secret_expires_at
FROM webhook_endpoints
WHERE url = %(url)s AND deleted_at IS NULL

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
