"""Routes for extraction jobs: submit one, list the tenant's, read one or its result, cancel one."""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools import Logger
from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.openapi.params import Body, Header, Query
from aws_lambda_powertools.event_handler.router import APIGatewayRouter

from tollgate.accept.models import AttemptList, CreateJobRequest, JobPage, JobResultView, JobView
from tollgate.accept.service import (
    accept_job,
    cancel_job,
    get_job,
    get_job_result,
    list_job_attempts,
    list_jobs,
)
from tollgate.api.deps import ApiDeps
from tollgate.api.routes.shared import (
    authenticated_tenant,
    documented,
    json_response,
    new_router,
    path_id,
    problem_responses,
)
from tollgate.api.surface import needs
from tollgate.core.job_states import JobState
from tollgate.core.observability import trace_for_request
from tollgate.jobtypes.registry import JobTypeName
from tollgate.tenants.keys import Scope

logger = Logger(service="tollgate-api")

IDEMPOTENCY_KEY = r"^[\x21-\x7e]{1,255}$"
JOB = "extraction job"
TAGS = ["extraction-jobs"]


def build_router(deps: ApiDeps) -> APIGatewayRouter:
    router = new_router()

    @router.post(
        "/extraction-jobs",
        summary="Submit a job: an invoice extraction, a document summary or a document classification",
        description="`job_type` says which; `options` follow that type's schema. Answers 202 with the job "
        "and its Location. The same Idempotency-Key with the same "
        "request answers with the first job (Idempotent-Replayed: true); with a different request, 409.",
        responses={
            **documented(JobView, "Accepted", 202),
            **documented(JobView, "Replay of a finished job"),
            **problem_responses(400, 401, 403, 409, 413, 415, 422, 429, 503),
        },
        tags=TAGS,
        **needs(Scope.JOBS_WRITE),
    )
    def create_job(
        request: Annotated[CreateJobRequest, Body()],
        idempotency_key: Annotated[
            str,
            Header(
                alias="Idempotency-Key",
                description="Unique per request, 1-255 visible ASCII.",
                pattern=IDEMPOTENCY_KEY,
            ),
        ],
        traceparent: Annotated[str | None, Header(description="W3C trace context to carry along.")] = None,
    ) -> Response[str]:
        event = router.current_event
        trace = trace_for_request(traceparent, event.headers.get("X-Amzn-Trace-Id"))
        accepted = accept_job(
            deps.acceptance,
            authenticated_tenant(event, Scope.JOBS_WRITE),
            idempotency_key,
            request,
            trace.traceparent,
        )
        job = accepted.job
        logger.info(
            "job accepted",
            extra={"job_id": str(job.job_id), "replayed": accepted.replayed, "trace_id": trace.trace_id},
        )
        headers = {"Location": job.links.self}
        if accepted.replayed:
            headers["Idempotent-Replayed"] = "true"
        status = 200 if accepted.replayed and job.state.is_finished else 202
        return json_response(status, job, headers)

    @router.get(
        "/extraction-jobs",
        summary="List the tenant's jobs, newest first",
        description="?state= and ?job_type= keep the jobs in that state or of that type; a value the API "
        "does not know is a 422 that names the values it takes. Pages are keyset cursors.",
        responses={**documented(JobPage, "A page of jobs"), **problem_responses(400, 401, 422)},
        tags=TAGS,
        **needs(Scope.JOBS_READ),
    )
    def list_extraction_jobs(
        state: Annotated[JobState | None, Query(description="Only jobs in this state.")] = None,
        job_type: Annotated[JobTypeName | None, Query(description="Only jobs of this type.")] = None,
        limit: Annotated[int, Query(ge=1, le=100)] = 20,
        cursor: Annotated[str | None, Query(max_length=512)] = None,
    ) -> Response[str]:
        tenant_id = authenticated_tenant(router.current_event, Scope.JOBS_READ)
        page = list_jobs(
            deps.acceptance.db, tenant_id, state=state, job_type=job_type, limit=limit, cursor=cursor
        )
        return json_response(200, page)

    @router.get(
        "/extraction-jobs/<job_id>",
        summary="One job",
        responses={**documented(JobView, "The job"), **problem_responses(401, 404)},
        tags=TAGS,
        **needs(Scope.JOBS_READ),
    )
    def get_extraction_job(job_id: str) -> Response[str]:
        tenant_id = authenticated_tenant(router.current_event, Scope.JOBS_READ)
        return json_response(200, get_job(deps.acceptance.db, tenant_id, path_id(job_id, JOB)))

    @router.get(
        "/extraction-jobs/<job_id>/result",
        summary="A finished job's validated extraction",
        responses={**documented(JobResultView, "The result"), **problem_responses(401, 404, 409)},
        tags=TAGS,
        **needs(Scope.JOBS_READ),
    )
    def get_extraction_result(job_id: str) -> Response[str]:
        tenant_id = authenticated_tenant(router.current_event, Scope.JOBS_READ)
        return json_response(200, get_job_result(deps.acceptance.db, tenant_id, path_id(job_id, JOB)))

    @router.get(
        "/extraction-jobs/<job_id>/attempts",
        summary="A job's attempts: outcome, model, tokens, cost and latency of each (needs ops:read)",
        responses={**documented(AttemptList, "The attempts, oldest first"), **problem_responses(401, 404)},
        tags=TAGS,
        **needs(Scope.OPS_READ),
    )
    def get_extraction_attempts(job_id: str) -> Response[str]:
        tenant_id = authenticated_tenant(router.current_event, Scope.OPS_READ)
        return json_response(200, list_job_attempts(deps.acceptance.db, tenant_id, path_id(job_id, JOB)))

    @router.post(
        "/extraction-jobs/<job_id>/cancel",
        summary="Cancel a job that has not started, waits for a retry, or waits in a provider batch",
        responses={**documented(JobView, "The cancelled job"), **problem_responses(401, 404, 409)},
        tags=TAGS,
        **needs(Scope.JOBS_WRITE),
    )
    def cancel_extraction_job(job_id: str) -> Response[str]:
        tenant_id = authenticated_tenant(router.current_event, Scope.JOBS_WRITE)
        acceptance = deps.acceptance
        cancelled = cancel_job(
            acceptance.db,
            tenant_id,
            path_id(job_id, JOB),
            new_id=acceptance.new_id,
            nudger=acceptance.nudger,
        )
        return json_response(200, cancelled)

    return router
