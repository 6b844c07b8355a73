"""The tenant-facing HTTP API: routes, problem responses and the OpenAPI document."""
