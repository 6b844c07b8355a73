"""A tenant's side of Tollgate for trying things out: submit a job over the HTTP API and follow it, or watch
the live feed. Used by ``tollgate submit`` and ``tollgate jobs watch``; it speaks only the public API."""
