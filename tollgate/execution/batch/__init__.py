"""The batch path (DESIGN §7): batch-tier jobs with a distant deadline go through the provider's Batch API
at a discount, under the same leases, fences, deadlines and validation as an immediate attempt."""
