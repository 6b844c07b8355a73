-- Each tenant's API Gateway API key on the stage's usage plan. The authorizer returns its value as
-- usageIdentifierKey, so API Gateway throttles and caps every tenant by the plan (enforce_usage_plan). It is
-- a metering identifier, not a credential: the API takes keys only from the authorizer (ApiKeySource
-- AUTHORIZER), never from a request. NULL until `tollgate tenants create` or `tollgate tenants
-- sync-usage-keys` makes one (locally, with no API Gateway, it stays NULL).
ALTER TABLE tenants
    ADD COLUMN usage_key_id text UNIQUE,
    ADD COLUMN usage_key_value text UNIQUE,
    ADD CONSTRAINT tenants_usage_key_whole CHECK ((usage_key_id IS NULL) = (usage_key_value IS NULL));

-- The authorizer learns the tenant's usage key with the key lookup, in the same single call.
DROP FUNCTION resolve_api_key(bytea);
CREATE FUNCTION resolve_api_key(p_key_hash bytea)
RETURNS TABLE (tenant_id uuid, key_id uuid, scopes text[], usage_key_value text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp
AS $$
    SELECT k.tenant_id, k.key_id, k.scopes, t.usage_key_value
    FROM api_keys k JOIN tenants t ON t.tenant_id = k.tenant_id
    WHERE k.key_hash = p_key_hash AND k.revoked_at IS NULL
$$;
REVOKE ALL ON FUNCTION resolve_api_key(bytea) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION resolve_api_key(bytea) TO tollgate_app;
