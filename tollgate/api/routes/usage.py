"""The tenant's usage: attempts, tokens, cost (with the batch discount) and completed jobs over a range of UTC
days."""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.openapi.params import Query
from aws_lambda_powertools.event_handler.router import APIGatewayRouter

from tollgate.api.deps import ApiDeps
from tollgate.api.routes.shared import authenticated_tenant, documented, new_router, problem_responses
from tollgate.api.surface import needs
from tollgate.tenants.keys import Scope
from tollgate.usage.service import UsageReport, get_usage, parse_usage_query, utc_today

DAY = r"^\d{4}-\d{2}-\d{2}$"
_DIMENSION = "(day|job_type|model)"
GROUP_BY = rf"^({_DIMENSION}(,{_DIMENSION})*)?$"


def build_router(deps: ApiDeps) -> APIGatewayRouter:
    router = new_router()

    @router.get(
        "/usage",
        summary="The tenant's usage and cost over a range of days",
        description="Read from aggregates written with each attempt's outcome, never by counting jobs. Needs "
        "the jobs:read scope. Attempts, tokens and cost count on the UTC day each attempt closed; jobs on "
        "the day they finished. cost_per_completed_job divides the cost of every attempt of the jobs that "
        "completed (SUCCEEDED) by their number; it is null when grouping by model. batch_attempts counts the "
        "attempts made through a provider batch, and batch_discount_usd what the batch price saved against "
        "the list price (cost_usd is what was paid).",
        responses={**documented(UsageReport, "Usage rows and their total"), **problem_responses(401, 422)},
        tags=["usage"],
        **needs(Scope.JOBS_READ),
    )
    def read_usage(
        from_: Annotated[
            str | None,
            Query(
                alias="from",
                description="First UTC day (YYYY-MM-DD); default the 1st of to's month.",
                pattern=DAY,
            ),
        ] = None,
        to: Annotated[
            str | None,
            Query(description="Last UTC day, inclusive (YYYY-MM-DD); default today.", pattern=DAY),
        ] = None,
        group_by: Annotated[
            str | None,
            Query(
                description="Comma list of day, job_type, model; empty sums the whole range.",
                max_length=64,
                pattern=GROUP_BY,
            ),
        ] = None,
    ) -> Response[str]:
        tenant_id = authenticated_tenant(router.current_event, Scope.JOBS_READ)
        query = parse_usage_query(from_, to, group_by, today=utc_today(deps.acceptance.clock.now()))
        report = get_usage(deps.acceptance.db, tenant_id, query)
        return Response(
            status_code=200, content_type="application/json", body=report.model_dump_json(by_alias=True)
        )

    return router
