"""Tenants, their API keys and the authorizer that resolves a key, and their supplier master data."""
