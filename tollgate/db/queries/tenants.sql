-- tenants, api_keys and tenant_suppliers: who a tenant is, the keys it calls with, and the limits and
-- master data its jobs are admitted and validated against.

-- name: insert_tenant
INSERT INTO tenants (tenant_id, name, allowed_currencies, usage_key_id, usage_key_value)
VALUES (%(tenant_id)s, %(name)s, coalesce(%(allowed_currencies)s::text[], ARRAY['EUR', 'USD', 'GBP', 'CHF']),
        %(usage_key_id)s, %(usage_key_value)s)
ON CONFLICT (name) DO NOTHING
RETURNING tenant_id

-- name: tenants_without_usage_key
-- Tenants made before usage-plan keys (migration 0018), or locally, oldest first.
SELECT tenant_id, name FROM tenants WHERE usage_key_id IS NULL ORDER BY created_at, tenant_id

-- name: set_tenant_usage_key
-- Only where none is set: a second sync racing this one keeps the first key it stored.
UPDATE tenants SET usage_key_id = %(usage_key_id)s, usage_key_value = %(usage_key_value)s
WHERE tenant_id = %(tenant_id)s AND usage_key_id IS NULL
RETURNING tenant_id

-- name: find_tenant_by_name
SELECT tenant_id, name FROM tenants WHERE name = %(name)s

-- name: tenant_validation_policy
SELECT t.allowed_currencies, t.accept_unverified_iban,
       coalesce(array_agg(s.name) FILTER (WHERE s.name IS NOT NULL), '{}') AS supplier_names,
       coalesce(array_agg(s.iban) FILTER (WHERE s.name IS NOT NULL), '{}') AS supplier_ibans
FROM tenants t LEFT JOIN tenant_suppliers s ON s.tenant_id = t.tenant_id
WHERE t.tenant_id = %(tenant_id)s
GROUP BY t.allowed_currencies, t.accept_unverified_iban

-- name: set_accept_unverified_iban
UPDATE tenants SET accept_unverified_iban = %(accept)s WHERE tenant_id = %(tenant_id)s RETURNING tenant_id

-- name: insert_api_key
INSERT INTO api_keys (key_id, tenant_id, key_hash, key_prefix, scopes)
VALUES (%(key_id)s, %(tenant_id)s, %(key_hash)s, %(key_prefix)s, %(scopes)s)

-- name: resolve_api_key
SELECT tenant_id, key_id, scopes, usage_key_value FROM resolve_api_key(%(key_hash)s)

-- name: insert_supplier
INSERT INTO tenant_suppliers (supplier_id, tenant_id, name, normalized_name, iban)
VALUES (%(supplier_id)s, %(tenant_id)s, %(name)s, %(normalized_name)s, %(iban)s)
ON CONFLICT (tenant_id, normalized_name) DO UPDATE SET iban = EXCLUDED.iban, name = EXCLUDED.name

-- name: set_tenant_retention
-- NULL puts the tenant back on the deployment's default (RETENTION_DEFAULT_DAYS).
UPDATE tenants SET retention_days = %(retention_days)s WHERE tenant_id = %(tenant_id)s RETURNING tenant_id

-- name: list_api_keys
-- A tenant's keys, newest first; never their hashes.
SELECT key_id, key_prefix, scopes, created_at, revoked_at FROM api_keys
WHERE tenant_id = %(tenant_id)s
ORDER BY created_at DESC

-- name: revoke_api_key
-- The key stops resolving at once; authorizer caches (API_KEY_CACHE_TTL_SECONDS and API Gateway's own)
-- may still admit it until they expire.
UPDATE api_keys SET revoked_at = %(now)s
WHERE tenant_id = %(tenant_id)s AND key_id = %(key_id)s AND revoked_at IS NULL
RETURNING key_id

-- name: list_tenants
-- Every tenant by name with its live keys and webhook endpoints counted: one pass over each of those small
-- tables, not one per tenant.
SELECT t.tenant_id, t.name, t.created_at, t.retention_days, t.monthly_budget_usd,
       coalesce(k.live_keys, 0) AS live_keys, coalesce(e.webhook_endpoints, 0) AS webhook_endpoints
FROM tenants t
LEFT JOIN (SELECT tenant_id, count(*) AS live_keys FROM api_keys WHERE revoked_at IS NULL GROUP BY tenant_id) k
    USING (tenant_id)
LEFT JOIN (
    SELECT tenant_id, count(*) AS webhook_endpoints FROM webhook_endpoints WHERE deleted_at IS NULL
    GROUP BY tenant_id
) e USING (tenant_id)
ORDER BY t.name
LIMIT %(limit)s
