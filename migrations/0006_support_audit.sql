-- Support actions leave a trail: who did what to which job, message or delivery, why, and when.

CREATE TABLE support_audit (
    audit_id    bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    actor       text NOT NULL CHECK (length(actor) BETWEEN 1 AND 200),
    reason      text NOT NULL CHECK (length(reason) BETWEEN 3 AND 1000),
    action      text NOT NULL,
    target      text NOT NULL,
    outcome     text NOT NULL,
    details     jsonb NOT NULL DEFAULT '{}'::jsonb,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX support_audit_by_target ON support_audit (target, created_at);

ALTER TABLE support_audit ENABLE ROW LEVEL SECURITY;
CREATE POLICY system_all ON support_audit TO tollgate_system USING (true);
GRANT SELECT, INSERT ON support_audit TO tollgate_system;
