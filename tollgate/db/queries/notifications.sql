-- job_state_events and tenant_event_sequences (migration 0021): what live notifications read. Written only
-- by the trigger on extraction_jobs; read by the notifier and the WebSocket routes as tollgate_system. A
-- tenant's events are numbered 1..latest without gaps, in commit order, and a reader never sees a later one
-- without the earlier ones, so "after my cursor, in sequence order" is all a catch-up needs.

-- name: job_state_events_after
-- One page of a tenant's events after a cursor: a range of the primary key.
SELECT seq, job_id, job_type, state, state_version, occurred_at
FROM job_state_events
WHERE tenant_id = %(tenant_id)s AND seq > %(after_seq)s
ORDER BY seq
LIMIT %(limit)s

-- name: tenant_event_window
-- What a cursor can be replayed from, by the primary key alone: ``latest`` is the tenant's last number,
-- ``oldest`` the first one still kept (retention removes the oldest first; latest + 1 when none is kept), and
-- ``next_at`` when the event right after the cursor ``after_seq`` happened (NULL when it is not kept, or
-- not yet written). A cursor c replays whole when c + 1 >= oldest; the replay window in hours is checked on
-- ``next_at``: exact whatever the writers' clocks did to the order of occurred_at.
-- No arithmetic on the cursor: any bigint is a cursor, and ``after_seq + 1`` overflows at the top of the
-- range; the first kept event after it is found by the key, and kept only when it is the very next one.
SELECT coalesce(s.last_seq, 0) AS latest,
       coalesce((
           SELECT e.seq FROM job_state_events e
           WHERE e.tenant_id = %(tenant_id)s
           ORDER BY e.seq
           LIMIT 1), coalesce(s.last_seq, 0) + 1) AS oldest,
       (SELECT n.occurred_at FROM (
            SELECT e.seq, e.occurred_at FROM job_state_events e
            WHERE e.tenant_id = %(tenant_id)s AND e.seq > %(after_seq)s
            ORDER BY e.seq
            LIMIT 1) n
        WHERE n.seq - 1 = %(after_seq)s) AS next_at
FROM (SELECT 1) one
LEFT JOIN tenant_event_sequences s ON s.tenant_id = %(tenant_id)s

-- name: api_key_active
-- A connection's key is checked again every so often: a revoked key's connections are closed.
SELECT key_id, tenant_id FROM api_keys WHERE key_id = %(key_id)s AND revoked_at IS NULL
