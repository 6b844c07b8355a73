"""What every step of the flow shares: clock and ids, domain errors, job states, retry policy, documents,
metrics, log context and the checkpoints a harness may listen to."""
