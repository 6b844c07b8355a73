-- The acceptance side: tenants, their API keys, documents, jobs, attempts and the transactional outbox.

CREATE TABLE tenants (
    tenant_id            uuid PRIMARY KEY,
    name                 text NOT NULL UNIQUE CHECK (length(name) BETWEEN 1 AND 100),
    -- Admission overrides; NULL means the deployment's default.
    max_pending_jobs     integer CHECK (max_pending_jobs > 0),
    max_pending_bytes    bigint CHECK (max_pending_bytes > 0),
    max_pending_tokens   bigint CHECK (max_pending_tokens > 0),
    allowed_currencies   text[] NOT NULL DEFAULT ARRAY['EUR', 'USD', 'GBP', 'CHF'],
    created_at           timestamptz NOT NULL DEFAULT now()
);

-- Only a SHA-256 of each key is kept; the key itself is shown once, when created.
CREATE TABLE api_keys (
    key_id       uuid PRIMARY KEY,
    tenant_id    uuid NOT NULL REFERENCES tenants (tenant_id),
    key_hash     bytea NOT NULL UNIQUE CHECK (length(key_hash) = 32),
    key_prefix   text NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    revoked_at   timestamptz
);

CREATE TABLE documents (
    document_id      uuid PRIMARY KEY,
    tenant_id        uuid NOT NULL REFERENCES tenants (tenant_id),
    content_sha256   text NOT NULL CHECK (content_sha256 ~ '^[0-9a-f]{64}$'),
    s3_key           text NOT NULL,
    s3_version_id    text NOT NULL,
    size_bytes       bigint NOT NULL CHECK (size_bytes >= 0),
    page_count       integer NOT NULL CHECK (page_count >= 1),
    created_at       timestamptz NOT NULL DEFAULT now(),
    UNIQUE (tenant_id, content_sha256)
);

CREATE TABLE extraction_jobs (
    job_id             uuid PRIMARY KEY,
    tenant_id          uuid NOT NULL REFERENCES tenants (tenant_id),
    idempotency_key    text NOT NULL CHECK (length(idempotency_key) BETWEEN 1 AND 255),
    request_hash       text NOT NULL CHECK (request_hash ~ '^[0-9a-f]{64}$'),
    job_type           text NOT NULL CHECK (job_type IN ('invoice_extraction')),
    document_id        uuid NOT NULL REFERENCES documents (document_id),
    schema_version     text NOT NULL,
    model_policy       text NOT NULL,
    options            jsonb NOT NULL DEFAULT '{}'::jsonb,
    metadata           jsonb NOT NULL DEFAULT '{}'::jsonb,
    priority           smallint NOT NULL DEFAULT 5 CHECK (priority BETWEEN 0 AND 9),
    state              text NOT NULL DEFAULT 'READY' CHECK (state IN (
                           'READY', 'RUNNING', 'SUCCEEDED', 'REVIEW_REQUIRED',
                           'RETRY_SCHEDULED', 'FAILED_TERMINAL', 'CANCELLED')),
    state_version      integer NOT NULL DEFAULT 1 CHECK (state_version >= 1),
    attempt            integer NOT NULL DEFAULT 0 CHECK (attempt >= 0),
    max_attempts       integer NOT NULL CHECK (max_attempts >= 1),
    fence              bigint NOT NULL DEFAULT 0 CHECK (fence >= 0),
    lease_owner        text,
    lease_until        timestamptz,
    next_attempt_at    timestamptz,
    estimated_tokens   integer NOT NULL CHECK (estimated_tokens > 0),
    document_bytes     bigint NOT NULL CHECK (document_bytes >= 0),
    deadline_at        timestamptz NOT NULL,
    trace_context      text,
    last_error         jsonb,
    created_at         timestamptz NOT NULL DEFAULT now(),
    updated_at         timestamptz NOT NULL DEFAULT now(),
    finished_at        timestamptz,
    UNIQUE (tenant_id, idempotency_key),
    -- A running job is leased; any other state holds no lease (River's finalized_or_finalized_at_null).
    CONSTRAINT running_iff_leased CHECK (
        (state = 'RUNNING') = (lease_until IS NOT NULL AND lease_owner IS NOT NULL)),
    CONSTRAINT no_lease_fields_half_set CHECK ((lease_until IS NULL) = (lease_owner IS NULL)),
    -- Terminal states carry a finish time and nothing else does.
    CONSTRAINT finished_iff_terminal CHECK (
        (state IN ('SUCCEEDED', 'REVIEW_REQUIRED', 'FAILED_TERMINAL', 'CANCELLED')) = (finished_at IS NOT NULL)),
    CONSTRAINT retry_has_due_time CHECK ((state = 'RETRY_SCHEDULED') = (next_attempt_at IS NOT NULL)),
    CONSTRAINT attempts_within_budget CHECK (attempt <= max_attempts)
);

-- Unfinished work per tenant: admission counts it, the scheduler and workers scan it.
CREATE INDEX extraction_jobs_unfinished ON extraction_jobs (tenant_id, created_at)
    WHERE state IN ('READY', 'RUNNING', 'RETRY_SCHEDULED');
CREATE INDEX extraction_jobs_tenant_listing ON extraction_jobs (tenant_id, created_at DESC, job_id DESC);

CREATE TABLE job_attempts (
    job_id               uuid NOT NULL REFERENCES extraction_jobs (job_id),
    attempt              integer NOT NULL CHECK (attempt >= 1),
    tenant_id            uuid NOT NULL REFERENCES tenants (tenant_id),
    fence                bigint NOT NULL,
    worker_id            text NOT NULL,
    started_at           timestamptz NOT NULL,
    finished_at          timestamptz,
    outcome              text,
    model                text,
    input_tokens         integer,
    output_tokens        integer,
    cost_usd             numeric(12, 6),
    latency_ms           integer,
    provider_request_id  text,
    error                jsonb,
    PRIMARY KEY (job_id, attempt)
);

-- One result per job, written with the job's terminal state under the attempt's fence.
CREATE TABLE extraction_results (
    job_id           uuid PRIMARY KEY REFERENCES extraction_jobs (job_id),
    tenant_id        uuid NOT NULL REFERENCES tenants (tenant_id),
    attempt          integer NOT NULL CHECK (attempt >= 1),
    policy_version   text NOT NULL,
    result           jsonb NOT NULL,
    review_reasons   jsonb NOT NULL DEFAULT '[]'::jsonb,
    created_at       timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE outbox_events (
    event_id          uuid PRIMARY KEY,
    tenant_id         uuid NOT NULL REFERENCES tenants (tenant_id),
    aggregate_id      uuid NOT NULL,
    event_type        text NOT NULL,
    payload           jsonb NOT NULL,
    trace_context     text,
    created_at        timestamptz NOT NULL DEFAULT now(),
    published_at      timestamptz,
    claimed_until     timestamptz,
    publish_attempts  integer NOT NULL DEFAULT 0 CHECK (publish_attempts >= 0),
    last_error        text
);

-- The relay finds work by "not yet published", never by an id cursor: commits land out of id order.
CREATE INDEX outbox_events_unpublished ON outbox_events (created_at) WHERE published_at IS NULL;

-- Row-level security: the second wall behind the tenant filter every query already has.
-- tollgate_app sees only the tenant set for the current transaction; tollgate_system sees all rows.
ALTER TABLE tenants ENABLE ROW LEVEL SECURITY;
ALTER TABLE documents ENABLE ROW LEVEL SECURITY;
ALTER TABLE extraction_jobs ENABLE ROW LEVEL SECURITY;
ALTER TABLE job_attempts ENABLE ROW LEVEL SECURITY;
ALTER TABLE extraction_results ENABLE ROW LEVEL SECURITY;
ALTER TABLE outbox_events ENABLE ROW LEVEL SECURITY;
ALTER TABLE api_keys ENABLE ROW LEVEL SECURITY;

CREATE POLICY tenant_isolation ON tenants TO tollgate_app
    USING (tenant_id = nullif(current_setting('tollgate.tenant_id', true), '')::uuid);
CREATE POLICY tenant_isolation ON documents TO tollgate_app
    USING (tenant_id = nullif(current_setting('tollgate.tenant_id', true), '')::uuid);
CREATE POLICY tenant_isolation ON extraction_jobs TO tollgate_app
    USING (tenant_id = nullif(current_setting('tollgate.tenant_id', true), '')::uuid);
CREATE POLICY tenant_isolation ON job_attempts TO tollgate_app
    USING (tenant_id = nullif(current_setting('tollgate.tenant_id', true), '')::uuid);
CREATE POLICY tenant_isolation ON extraction_results TO tollgate_app
    USING (tenant_id = nullif(current_setting('tollgate.tenant_id', true), '')::uuid);
CREATE POLICY tenant_isolation ON outbox_events TO tollgate_app
    USING (tenant_id = nullif(current_setting('tollgate.tenant_id', true), '')::uuid);

CREATE POLICY system_all ON tenants TO tollgate_system USING (true);
CREATE POLICY system_all ON api_keys TO tollgate_system USING (true);
CREATE POLICY system_all ON documents TO tollgate_system USING (true);
CREATE POLICY system_all ON extraction_jobs TO tollgate_system USING (true);
CREATE POLICY system_all ON job_attempts TO tollgate_system USING (true);
CREATE POLICY system_all ON extraction_results TO tollgate_system USING (true);
CREATE POLICY system_all ON outbox_events TO tollgate_system USING (true);

GRANT USAGE ON SCHEMA public TO tollgate_app, tollgate_system;
GRANT SELECT ON tenants TO tollgate_app;
GRANT SELECT, INSERT ON documents TO tollgate_app;
GRANT SELECT, INSERT, UPDATE ON extraction_jobs TO tollgate_app;
GRANT SELECT ON job_attempts, extraction_results TO tollgate_app;
GRANT INSERT ON outbox_events TO tollgate_app;
-- tollgate_app has no grant on api_keys at all: it resolves keys only through the function below.
GRANT SELECT, INSERT, UPDATE ON tenants, api_keys, documents, extraction_jobs, job_attempts,
    extraction_results, outbox_events TO tollgate_system;

-- Resolves an API key hash to its tenant for the authorizer, which cannot know the tenant beforehand.
CREATE FUNCTION resolve_api_key(p_key_hash bytea)
RETURNS TABLE (tenant_id uuid, key_id uuid)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp
AS $$
    SELECT k.tenant_id, k.key_id FROM api_keys k
    WHERE k.key_hash = p_key_hash AND k.revoked_at IS NULL
$$;
REVOKE ALL ON FUNCTION resolve_api_key(bytea) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION resolve_api_key(bytea) TO tollgate_app;

-- Whole-system backlog for the 503 admission check, counted up to a cap so its cost stays bounded.
CREATE FUNCTION system_backlog(p_cap integer)
RETURNS bigint
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp
AS $$
    SELECT count(*) FROM (
        SELECT 1 FROM extraction_jobs
        WHERE state IN ('READY', 'RUNNING', 'RETRY_SCHEDULED')
        LIMIT p_cap
    ) capped
$$;
REVOKE ALL ON FUNCTION system_backlog(integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION system_backlog(integer) TO tollgate_app;
