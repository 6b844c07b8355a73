-- Execution: tenants' supplier master data for validation, and what fair claiming needs to be fast.

CREATE TABLE tenant_suppliers (
    supplier_id      uuid PRIMARY KEY,
    tenant_id        uuid NOT NULL REFERENCES tenants (tenant_id),
    name             text NOT NULL CHECK (length(name) BETWEEN 1 AND 300),
    normalized_name  text NOT NULL,
    iban             text CHECK (iban ~ '^[A-Z]{2}[0-9A-Z]{13,32}$'),
    created_at       timestamptz NOT NULL DEFAULT now(),
    UNIQUE (tenant_id, normalized_name)
);

ALTER TABLE tenant_suppliers ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON tenant_suppliers TO tollgate_app
    USING (tenant_id = nullif(current_setting('tollgate.tenant_id', true), '')::uuid);
CREATE POLICY system_all ON tenant_suppliers TO tollgate_system USING (true);
GRANT SELECT ON tenant_suppliers TO tollgate_app;
GRANT SELECT, INSERT, UPDATE ON tenant_suppliers TO tollgate_system;

-- The claim looks at each tenant's best runnable job: highest priority, then oldest.
CREATE INDEX extraction_jobs_claimable ON extraction_jobs (tenant_id, priority DESC, created_at)
    WHERE state IN ('READY', 'RETRY_SCHEDULED');
-- Fairness weighs what each tenant already has running.
CREATE INDEX extraction_jobs_running_by_tenant ON extraction_jobs (tenant_id) WHERE state = 'RUNNING';
