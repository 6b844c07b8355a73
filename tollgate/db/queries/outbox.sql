-- outbox_events: every event a state change produces, inserted in the same transaction as the change by
-- each producer (acceptance, the worker, the scheduler, support), then claimed and marked by the relay.
-- Work is found by "not yet published", never by an id cursor: transactions commit out of id order, and a
-- cursor would step over a row that committed late.

-- name: insert_outbox_event
INSERT INTO outbox_events (event_id, tenant_id, aggregate_id, event_type, payload, trace_context)
VALUES (%(event_id)s, %(tenant_id)s, %(aggregate_id)s, %(event_type)s, %(payload)s, %(trace_context)s)

-- name: claim_outbox_batch
-- A short transaction of its own: the claim lease keeps a second relay off these rows while the first
-- publishes them with no transaction open.
UPDATE outbox_events o
SET claimed_until = %(now)s + make_interval(secs => %(claim_seconds)s),
    publish_attempts = o.publish_attempts + 1
FROM (
    SELECT event_id FROM outbox_events
    WHERE published_at IS NULL AND (claimed_until IS NULL OR claimed_until <= %(now)s)
    ORDER BY created_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
) claimable
WHERE o.event_id = claimable.event_id
RETURNING o.event_id, o.tenant_id, o.aggregate_id, o.event_type, o.payload, o.trace_context, o.created_at,
          o.publish_attempts

-- name: mark_outbox_published
UPDATE outbox_events
SET published_at = %(now)s, claimed_until = NULL, last_error = NULL
WHERE event_id = ANY(%(event_ids)s) AND published_at IS NULL

-- name: release_outbox_failure
-- The row goes back to the pool at once: the next sweep or nudge tries it again.
UPDATE outbox_events
SET claimed_until = NULL, last_error = %(error)s
WHERE event_id = %(event_id)s AND published_at IS NULL
