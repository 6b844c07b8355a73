"""Migration custom resource: applies pending migrations on stack create and update; delete is a no-op."""

from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.utilities.typing import LambdaContext

from tollgate.db.database import resolve_conninfo
from tollgate.db.migrations import apply_migrations
from tollgate.settings import MigrateSettings

logger = Logger(service="tollgate-migrate")
settings = MigrateSettings()


@logger.inject_lambda_context
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    physical_id = event.get("PhysicalResourceId", "tollgate-schema")
    if event["RequestType"] == "Delete":
        # Dropping the schema with the stack would destroy tenants' data; removal is a human decision.
        return {"PhysicalResourceId": physical_id}
    applied = apply_migrations(resolve_conninfo(settings), settings.migrations_dir)
    logger.info("migrations applied", extra={"applied": [f"{m.version:04d}_{m.name}" for m in applied]})
    return {"PhysicalResourceId": physical_id, "Data": {"Applied": len(applied)}}
