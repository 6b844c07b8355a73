"""The worker's side: slots that take the provider budget, claim a job under a lease, call the model,
validate the answer and record the outcome under the job's fence."""
