"""Publishing what was committed: the outbox relay, its SQS FIFO publisher and the nudge that wakes it."""
