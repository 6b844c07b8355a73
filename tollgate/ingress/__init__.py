"""The worker's SQS consumer: takes events off the jobs queue into the execution inbox exactly once."""
