"""The once-a-minute tick: expired leases, passed deadlines, stalled webhook deliveries, backlog metrics."""
