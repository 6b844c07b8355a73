-- Webhooks: tenants' endpoints (HTTPS, event filters, signing secrets), one delivery per (event, endpoint),
-- and every attempt to deliver it.

CREATE TABLE webhook_endpoints (
    endpoint_id                 uuid PRIMARY KEY,
    tenant_id                   uuid NOT NULL REFERENCES tenants (tenant_id),
    url                         text NOT NULL CHECK (length(url) <= 2048),
    description                 text NOT NULL DEFAULT '' CHECK (length(description) <= 500),
    event_types                 text[] NOT NULL CHECK (cardinality(event_types) >= 1),
    -- Signing secrets. The previous one keeps signing (beside the new one) until it expires.
    secret                      text NOT NULL CHECK (secret LIKE 'whsec\_%'),
    previous_secret             text CHECK (previous_secret LIKE 'whsec\_%'),
    previous_secret_expires_at  timestamptz,
    enabled                     boolean NOT NULL DEFAULT true,
    disabled_reason             text,
    consecutive_failures        integer NOT NULL DEFAULT 0 CHECK (consecutive_failures >= 0),
    first_failure_at            timestamptz,
    auth_failures               integer NOT NULL DEFAULT 0 CHECK (auth_failures >= 0),
    created_at                  timestamptz NOT NULL DEFAULT now(),
    updated_at                  timestamptz NOT NULL DEFAULT now(),
    deleted_at                  timestamptz,
    CONSTRAINT disabled_has_reason CHECK (enabled OR disabled_reason IS NOT NULL),
    CONSTRAINT previous_secret_expires CHECK ((previous_secret IS NULL) = (previous_secret_expires_at IS NULL))
);
CREATE INDEX webhook_endpoints_by_tenant ON webhook_endpoints (tenant_id) WHERE deleted_at IS NULL;

CREATE TABLE webhook_deliveries (
    delivery_id       uuid PRIMARY KEY,  -- deterministic per (event, endpoint); sent as webhook-id
    tenant_id         uuid NOT NULL REFERENCES tenants (tenant_id),
    endpoint_id       uuid NOT NULL REFERENCES webhook_endpoints (endpoint_id),
    event_id          uuid NOT NULL,
    event_type        text NOT NULL,
    body              text NOT NULL,     -- the exact bytes signed and sent, on every attempt
    state             text NOT NULL DEFAULT 'PENDING'
                      CHECK (state IN ('PENDING', 'DELIVERED', 'FAILED', 'ENDPOINT_DISABLED')),
    attempts          integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    replays           integer NOT NULL DEFAULT 0 CHECK (replays >= 0),
    next_attempt_at   timestamptz,
    last_status       integer,
    last_error        text,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    delivered_at      timestamptz,
    UNIQUE (event_id, endpoint_id),
    CONSTRAINT delivered_iff_time CHECK ((state = 'DELIVERED') = (delivered_at IS NOT NULL))
);
CREATE INDEX webhook_deliveries_by_endpoint ON webhook_deliveries (endpoint_id, created_at DESC);

CREATE TABLE webhook_delivery_attempts (
    delivery_id      uuid NOT NULL REFERENCES webhook_deliveries (delivery_id),
    attempt          integer NOT NULL CHECK (attempt >= 1),
    tenant_id        uuid NOT NULL REFERENCES tenants (tenant_id),
    started_at       timestamptz NOT NULL,
    status           integer,
    error            text,
    elapsed_ms       integer,
    next_delay_seconds integer,
    PRIMARY KEY (delivery_id, attempt)
);

ALTER TABLE webhook_endpoints ENABLE ROW LEVEL SECURITY;
ALTER TABLE webhook_deliveries ENABLE ROW LEVEL SECURITY;
ALTER TABLE webhook_delivery_attempts ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON webhook_endpoints TO tollgate_app
    USING (tenant_id = nullif(current_setting('tollgate.tenant_id', true), '')::uuid);
CREATE POLICY tenant_isolation ON webhook_deliveries TO tollgate_app
    USING (tenant_id = nullif(current_setting('tollgate.tenant_id', true), '')::uuid);
CREATE POLICY tenant_isolation ON webhook_delivery_attempts TO tollgate_app
    USING (tenant_id = nullif(current_setting('tollgate.tenant_id', true), '')::uuid);
CREATE POLICY system_all ON webhook_endpoints TO tollgate_system USING (true);
CREATE POLICY system_all ON webhook_deliveries TO tollgate_system USING (true);
CREATE POLICY system_all ON webhook_delivery_attempts TO tollgate_system USING (true);
GRANT SELECT, INSERT, UPDATE ON webhook_endpoints TO tollgate_app;
GRANT SELECT, UPDATE ON webhook_deliveries TO tollgate_app;
GRANT SELECT ON webhook_delivery_attempts TO tollgate_app;
GRANT SELECT, INSERT, UPDATE ON webhook_endpoints, webhook_deliveries, webhook_delivery_attempts
    TO tollgate_system;
