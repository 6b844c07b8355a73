-- webhook_endpoints: the HTTPS endpoints a tenant registers, with their signing secrets and their health
-- (failure streaks, disabling). Registration and management run tenant-scoped (tollgate_app); the fan-out
-- and the delivery attempts read and update them as tollgate_system.

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

-- name: subscribed_endpoints
SELECT endpoint_id FROM webhook_endpoints
WHERE tenant_id = %(tenant_id)s AND deleted_at IS NULL AND enabled AND %(event_type)s = ANY(event_types)

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
