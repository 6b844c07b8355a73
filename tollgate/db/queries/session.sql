-- No table: what every transaction sets first (tollgate/db/database.py), its role and, for tenant work,
-- the tenant that row-level security admits. Both are transaction-local and revert at commit.

-- name: begin_scope
SELECT set_config('role', %(role)s, true),
       set_config('tollgate.tenant_id', %(tenant_id)s, true)

-- name: begin
-- The transactions of a pipelined session (Database.pipelined) are written out: its connection is in
-- autocommit mode while lent, so these are the only transaction boundaries it has.
BEGIN

-- name: commit
COMMIT

-- name: rollback
ROLLBACK
