"""Fault injection on the local system (``tollgate local chaos``) and the ledger check that reconciles the
database, the queues, the dead letters and the tenants' ERP logs after the faults."""
