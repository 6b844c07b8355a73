"""Routes for reviewers (scope ``review``): the queue of results waiting for review, one job's review, and
the decision, which names the state_version it was made on in If-Match."""

from __future__ import annotations

import re
from typing import Annotated

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.openapi.params import Body, Header, Query
from aws_lambda_powertools.event_handler.router import APIGatewayRouter

from tollgate.api.deps import ApiDeps
from tollgate.api.routes.shared import (
    authenticated_key,
    authenticated_tenant,
    documented,
    json_response,
    new_router,
    path_id,
    problem_responses,
)
from tollgate.api.surface import needs
from tollgate.core.errors import InvalidRequest, PreconditionRequired
from tollgate.jobtypes.registry import ReviewReasonCode
from tollgate.review.models import ReviewDecided, ReviewDecisionRequest, ReviewPage, ReviewView
from tollgate.review.service import (
    ReviewDeps,
    Reviewer,
    decide_review,
    get_review,
    list_reviews,
)
from tollgate.tenants.keys import Scope

JOB = "extraction job"
TAGS = ["reviews"]
# One strong entity tag: the state_version, quoted as an ETag is, or bare.
_ENTITY_TAG = re.compile(r'^(?:"(\d{1,9})"|(\d{1,9}))$')


def etag(state_version: int) -> str:
    return f'"{state_version}"'


def expected_version(if_match: str | None) -> int | None:
    """The state_version an If-Match header names; None when there is none to go by (no header, or ``*``,
    which would match whatever the job became). Anything but one strong tag is a 400."""
    if if_match is None or if_match.strip() in {"", "*"}:
        return None
    match = _ENTITY_TAG.match(if_match.strip())
    if match is None:
        raise InvalidRequest(
            'If-Match takes the one state_version you reviewed, as the review\'s ETag gives it: If-Match: "7"'
        )
    return int(match[1] or match[2])


def build_router(deps: ApiDeps) -> APIGatewayRouter:
    router = new_router()

    def reviews() -> ReviewDeps:
        assert deps.reviews is not None
        return deps.reviews

    @router.get(
        "/reviews",
        summary="Results waiting for review, oldest first (needs review)",
        description="Jobs in REVIEW_REQUIRED, the longest waiting first; ?reason= keeps those whose result "
        "broke that rule (a reason code such as total_mismatch). Pages are keyset cursors.",
        responses={**documented(ReviewPage, "A page of waiting reviews"), **problem_responses(400, 401, 422)},
        tags=TAGS,
        **needs(Scope.REVIEW),
    )
    def list_waiting_reviews(
        reason: Annotated[
            ReviewReasonCode | None,
            Query(description="Only results that broke this rule; a code no policy gives is a 422."),
        ] = None,
        limit: Annotated[int, Query(ge=1, le=100)] = 20,
        cursor: Annotated[str | None, Query(max_length=512)] = None,
    ) -> Response[str]:
        tenant_id = authenticated_tenant(router.current_event, Scope.REVIEW)
        page = list_reviews(reviews().db, tenant_id, reason=reason, limit=limit, cursor=cursor)
        return json_response(200, page)

    @router.get(
        "/extraction-jobs/<job_id>/review",
        summary="A job's review: its result, reasons and evidence in the OCR text (needs review)",
        description="The model's result (not accepted data), the rules it broke, and each value's evidence "
        "located in the document with the page text around it. The ETag is the job's state_version: send it "
        "back as If-Match with the decision. 409 for a job that never went to review.",
        responses={**documented(ReviewView, "The review"), **problem_responses(401, 404, 409)},
        tags=TAGS,
        **needs(Scope.REVIEW),
    )
    def get_job_review(job_id: str) -> Response[str]:
        tenant_id = authenticated_tenant(router.current_event, Scope.REVIEW)
        view = get_review(reviews(), tenant_id, path_id(job_id, JOB))
        return json_response(200, view, {"ETag": etag(view.state_version)})

    @router.post(
        "/extraction-jobs/<job_id>/review",
        summary="Approve, correct or reject a result waiting for review (needs review)",
        description="approve accepts the model's result as it is (its reasons are recorded as overridden); "
        "correct applies a JSON merge patch (RFC 7396) to the extracted invoice and accepts it only if it "
        "passes the validation policy (422 with the reasons if not); reject accepts nothing. Approve and "
        "correct end the job SUCCEEDED with result version 2 and send extraction.completed.v1; reject ends "
        "it REJECTED and sends extraction.rejected.v1. If-Match must carry the state_version read from the "
        "review (its ETag): 428 without it, 412 when the job is at another version (another reviewer "
        "decided first), 409 when the job does not wait for review.",
        responses={
            **documented(ReviewDecided, "The decision, and the job's new state"),
            **problem_responses(400, 401, 404, 409, 412, 422, 428),
        },
        tags=TAGS,
        **needs(Scope.REVIEW),
    )
    def decide_job_review(
        job_id: str,
        request: Annotated[ReviewDecisionRequest, Body()],
        if_match: Annotated[
            str | None,
            Header(
                alias="If-Match",
                description='The state_version the decision was made on: the review\'s ETag ("7").',
            ),
        ] = None,
    ) -> Response[str]:
        event = router.current_event
        tenant_id = authenticated_tenant(event, Scope.REVIEW)
        job = path_id(job_id, JOB)  # a malformed id is a 404 before any other check, as on every route
        version = expected_version(if_match)
        if version is None:
            raise PreconditionRequired(
                "send If-Match with the state_version you reviewed (the ETag of GET .../review)"
            )
        decided = decide_review(
            reviews(),
            tenant_id,
            job,
            request,
            expected_version=version,
            reviewer=Reviewer.api_key(authenticated_key(event)),
        )
        return json_response(200, decided, {"ETag": etag(decided.state_version)})

    return router
