"""Reusable CDK constructs the Tollgate stacks are built from."""
