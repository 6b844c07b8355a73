-- name: resolve_api_key
SELECT tenant_id, key_id FROM resolve_api_key(%(key_hash)s)

-- name: insert_tenant
INSERT INTO tenants (tenant_id, name, allowed_currencies)
VALUES (%(tenant_id)s, %(name)s, coalesce(%(allowed_currencies)s::text[], ARRAY['EUR', 'USD', 'GBP', 'CHF']))
ON CONFLICT (name) DO NOTHING
RETURNING tenant_id

-- name: insert_api_key
INSERT INTO api_keys (key_id, tenant_id, key_hash, key_prefix)
VALUES (%(key_id)s, %(tenant_id)s, %(key_hash)s, %(key_prefix)s)

-- name: find_tenant_by_name
SELECT tenant_id, name FROM tenants WHERE name = %(name)s
