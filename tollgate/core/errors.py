"""Domain errors that reach a caller. Each carries its stable problem type, HTTP status and a title;
the API turns them into application/problem+json (RFC 9457) in one place."""

from __future__ import annotations

from typing import Any, ClassVar


class TollgateError(Exception):
    problem_type: ClassVar[str] = "internal-error"
    status: ClassVar[int] = 500
    title: ClassVar[str] = "Internal error"

    def __init__(self, detail: str, *, retry_after: int | None = None, **extensions: Any) -> None:
        super().__init__(detail)
        self.detail = detail
        self.retry_after = retry_after
        self.extensions = extensions


class InvalidRequest(TollgateError):
    problem_type = "invalid-request"
    status = 400
    title = "The request is malformed"


class MissingIdempotencyKey(TollgateError):
    problem_type = "missing-idempotency-key"
    status = 400
    title = "An Idempotency-Key header is required"


class Unauthorized(TollgateError):
    problem_type = "unauthorized"
    status = 401
    title = "Missing or invalid API key"


class Forbidden(TollgateError):
    problem_type = "forbidden"
    status = 403
    title = "Not allowed"


class NotFound(TollgateError):
    problem_type = "not-found"
    status = 404
    title = "No such resource"


class IdempotencyConflict(TollgateError):
    problem_type = "idempotency-conflict"
    status = 409
    title = "This Idempotency-Key was used for a different request"


class InvalidState(TollgateError):
    problem_type = "invalid-state"
    status = 409
    title = "The job is not in a state that allows this"


class PreconditionFailed(TollgateError):
    problem_type = "precondition-failed"
    status = 412
    title = "The resource changed since you read it"


class PreconditionRequired(TollgateError):
    problem_type = "precondition-required"
    status = 428
    title = "Say which version you acted on (If-Match)"


class CorrectionFailsValidation(TollgateError):
    problem_type = "correction-fails-validation"
    status = 422
    title = "The corrected result still fails validation"


class PayloadTooLarge(TollgateError):
    problem_type = "payload-too-large"
    status = 413
    title = "The document is too large"


class UnsupportedMediaType(TollgateError):
    problem_type = "unsupported-media-type"
    status = 415
    title = "Send application/json"


class ValidationFailed(TollgateError):
    problem_type = "validation-failed"
    status = 422
    title = "The request does not match the schema"


class DocumentUnavailable(TollgateError):
    problem_type = "document-unavailable"
    status = 422
    title = "The referenced document cannot be used"


class TenantOverQuota(TollgateError):
    problem_type = "tenant-over-quota"
    status = 429
    title = "Too much unfinished work for this tenant"


class SpendBudgetExhausted(TollgateError):
    problem_type = "spend-budget-exhausted"
    status = 429
    title = "The monthly spend budget would be passed"


class SystemOverloaded(TollgateError):
    problem_type = "system-overloaded"
    status = 503
    title = "The system backlog is full"


class DependencyUnavailable(TollgateError):
    problem_type = "dependency-unavailable"
    status = 503
    title = "A service we depend on is unavailable"
