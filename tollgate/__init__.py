"""Tollgate: runs slow, rate-limited LLM jobs for many tenants, asynchronously and reliably."""

__version__ = "0.1.0"
