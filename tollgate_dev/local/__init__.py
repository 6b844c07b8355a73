"""Running Tollgate on one machine: embedded PostgreSQL, moto for AWS, and an API Gateway stand-in."""
