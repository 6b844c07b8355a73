"""PostgreSQL access: named SQL queries, pooled connections and tenant-scoped transactions."""

from tollgate.db.database import Database, build_database
from tollgate.db.queries import Queries, load_queries

__all__ = ["Database", "Queries", "build_database", "load_queries"]
