-- name: begin_scope
SELECT set_config('role', %(role)s, true),
       set_config('tollgate.tenant_id', %(tenant_id)s, true)
