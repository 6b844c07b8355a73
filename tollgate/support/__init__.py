"""What support staff do on call, as use cases: inspect jobs and deliveries, retry, redrive and replay,
each one audited."""
