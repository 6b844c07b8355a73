-- What each API key may do (tollgate.tenants.keys.SCOPES). Keys made before this migration could do
-- everything, so they keep every scope; new keys get the scopes they are created with.
ALTER TABLE api_keys ADD COLUMN scopes text[] NOT NULL
    DEFAULT ARRAY['jobs:write', 'jobs:read', 'review', 'webhooks:admin', 'ops:read']
    CHECK (cardinality(scopes) > 0
           AND scopes <@ ARRAY['jobs:write', 'jobs:read', 'review', 'webhooks:admin', 'ops:read']);

DROP FUNCTION resolve_api_key(bytea);
CREATE FUNCTION resolve_api_key(p_key_hash bytea)
RETURNS TABLE (tenant_id uuid, key_id uuid, scopes text[])
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp
AS $$
    SELECT k.tenant_id, k.key_id, k.scopes FROM api_keys k
    WHERE k.key_hash = p_key_hash AND k.revoked_at IS NULL
$$;
REVOKE ALL ON FUNCTION resolve_api_key(bytea) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION resolve_api_key(bytea) TO tollgate_app;
