"""Live notifications (DESIGN §8): tenants' WebSocket connections, a replay from their cursor in the tenant's
event sequence, then each job state change as it commits, in sequence order."""
