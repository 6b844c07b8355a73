-- execution_inbox and inbox_quarantine: the worker's record of every requested event it took in, unique on
-- event_id, and the redeliveries whose body did not match the first one.

-- name: insert_inbox_event
INSERT INTO execution_inbox (event_id, tenant_id, job_id, event_type, payload_sha256, message_id, received_at)
VALUES (%(event_id)s, %(tenant_id)s, %(job_id)s, %(event_type)s, %(payload_sha256)s, %(message_id)s,
        %(received_at)s)
ON CONFLICT (event_id) DO NOTHING
RETURNING event_id

-- name: get_inbox_event
SELECT event_id, payload_sha256 FROM execution_inbox WHERE event_id = %(event_id)s

-- name: insert_quarantine
INSERT INTO inbox_quarantine (event_id, expected_sha256, received_sha256, message_id, body, received_at)
VALUES (%(event_id)s, %(expected_sha256)s, %(received_sha256)s, %(message_id)s, %(body)s, %(received_at)s)
