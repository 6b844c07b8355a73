-- A delivery whose execution ended without delivering it (the state machine's own retries spent during a
-- long outage, an execution lost) is restarted by the scheduler under a new execution name; `restarts`
-- numbers those names. The partial index keeps the scheduler's look for stalled deliveries cheap.
ALTER TABLE webhook_deliveries ADD COLUMN restarts integer NOT NULL DEFAULT 0 CHECK (restarts >= 0);
CREATE INDEX webhook_deliveries_pending ON webhook_deliveries (updated_at) WHERE state = 'PENDING';
