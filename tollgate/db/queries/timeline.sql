-- A job's timeline (support's `jobs show`, tollgate_system): every query reads by the job's id through an
-- index of its own (migration 0023 for state events and deliveries), so its cost is the one job's rows.

-- name: timeline_state_changes
-- Kept for the live feed's replay window (RETENTION_STATE_EVENT_HOURS), so an older job's early changes are
-- gone: the caller sees which versions are missing.
SELECT seq AS sequence, state, state_version, occurred_at
FROM job_state_events
WHERE job_id = %(job_id)s
ORDER BY state_version, seq

-- name: timeline_review_decision
SELECT decision, reviewer, note, state_version, reasons, review_requested_at, decided_at, result_version
FROM review_decisions
WHERE job_id = %(job_id)s

-- name: timeline_deliveries
-- Each delivery of the job's events with its endpoint's URL and every attempt to send it, oldest first.
SELECT d.delivery_id, d.endpoint_id, e.url, d.event_type, d.state, d.attempts AS attempt_count, d.replays,
       d.created_at, d.delivered_at, d.next_attempt_at,
       coalesce(jsonb_agg(jsonb_build_object(
           'attempt', a.attempt, 'started_at', a.started_at, 'status', a.status, 'error', a.error,
           'elapsed_ms', a.elapsed_ms) ORDER BY a.attempt) FILTER (WHERE a.attempt IS NOT NULL), '[]')
           AS attempts
FROM webhook_deliveries d
JOIN webhook_endpoints e USING (endpoint_id)
LEFT JOIN webhook_delivery_attempts a USING (delivery_id)
WHERE d.job_id = %(job_id)s
GROUP BY d.delivery_id, e.url
ORDER BY d.created_at, d.delivery_id
