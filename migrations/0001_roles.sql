-- Roles the application assumes. Roles are cluster-wide, so creation is guarded: several databases
-- (one per test run, say) share them.
--   tollgate_app     tenant-scoped: row-level security limits it to the tenant set per transaction.
--   tollgate_system  background work (relay, scheduler, workers, support CLI) across tenants.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'tollgate_app') THEN
        CREATE ROLE tollgate_app NOLOGIN NOSUPERUSER NOBYPASSRLS;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'tollgate_system') THEN
        CREATE ROLE tollgate_system NOLOGIN NOSUPERUSER NOBYPASSRLS;
    END IF;
END
$$;

-- The connecting owner must be able to SET ROLE to both (a no-op for a superuser).
DO $$
BEGIN
    EXECUTE format('GRANT tollgate_app, tollgate_system TO %I', current_user);
END
$$;
