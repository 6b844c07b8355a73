-- The trace context of the event a delivery carries, so each attempt sends `traceparent` on the same
-- trace as the API request that created the job (W3C trace context; NULL for events that had none).
ALTER TABLE webhook_deliveries ADD COLUMN trace_context text;
