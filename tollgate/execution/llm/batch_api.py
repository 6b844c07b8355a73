"""The Batch API port the batcher and poller use, its OpenAI implementation, and the JSON Lines they speak.

A request line carries exactly the options of an immediate call (``request_options``) and an output line is
classified by the same reading as an immediate answer (``completion_result``), so a job ends the same way
whichever path ran it. The adapter is synchronous (the caller runs it in a thread) and makes one attempt per
call, like the immediate client: what to do after a refusal is the caller's retry policy.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, Literal, NoReturn, Protocol
from uuid import UUID

from tollgate.core.clock import Clock, SystemClock
from tollgate.execution.llm.client import (
    LlmResult,
    OutcomeClass,
    Task,
    classify_status,
    completion_result,
    parse_retry_after,
    refuses_response_format,
    request_options,
)
from tollgate.execution.llm.output import StructuredOutput
from tollgate.jobtypes.base import JobType

if TYPE_CHECKING:
    # Imported lazily at run time, as in client.py: only the worker talks to the provider.
    import openai
    from openai.types import Batch

CHAT_COMPLETIONS_URL: Literal["/v1/chat/completions"] = "/v1/chat/completions"
COMPLETION_WINDOW: Literal["24h"] = "24h"
# The Batch API's limits on one input file. OpenAI writes "200 MB"; counted in decimal megabytes, which is
# the smaller reading, a file under this fits whichever it means.
MAX_REQUESTS_PER_FILE = 50_000
MAX_FILE_BYTES = 200_000_000
# The error codes of lines the provider never ran, in the error file of an expired or cancelled batch.
LINE_EXPIRED = "batch_expired"
LINE_CANCELLED = "batch_cancelled"
LINE_TIMEOUT = "request_timeout"
NEVER_RAN = frozenset({LINE_EXPIRED, LINE_CANCELLED})
# The list endpoint's largest page.
_LIST_PAGE = 100
_DOWNLOAD_CHUNK = 64 * 1024


@dataclass(frozen=True)
class CustomId:
    """What one request line stands for: a job's attempt under its fence."""

    job_id: UUID
    attempt: int
    fence: int

    def __str__(self) -> str:
        return f"{self.job_id}:{self.attempt}:{self.fence}"

    @classmethod
    def parse(cls, text: str) -> CustomId:
        parts = text.split(":") if isinstance(text, str) else []
        if len(parts) != 3:
            raise ValueError(f"custom_id {text!r} is not 'job_id:attempt:fence'")
        try:
            job_id = UUID(parts[0])
        except ValueError:
            raise ValueError(f"custom_id {text!r} does not start with a job id (a UUID)") from None
        numbers: list[int] = []
        for name, part in zip(("attempt", "fence"), parts[1:], strict=True):
            # int() would also take "+1", " 1" or "1_0"; only the digits str() writes round-trip.
            if not part.isascii() or not part.isdigit() or str(int(part)) != part:
                raise ValueError(f"custom_id {text!r} has {name} {part!r}, not a non-negative integer")
            numbers.append(int(part))
        custom_id = cls(job_id, numbers[0], numbers[1])
        if str(custom_id) != text:  # an upper-case or braced UUID would not come back the same
            raise ValueError(f"custom_id {text!r} is not in canonical form ({custom_id})")
        return custom_id


class BatchStatus(StrEnum):
    """The provider's statuses of a batch."""

    VALIDATING = "validating"
    FAILED = "failed"
    IN_PROGRESS = "in_progress"
    FINALIZING = "finalizing"
    COMPLETED = "completed"
    EXPIRED = "expired"
    CANCELLING = "cancelling"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        """No further change: the output and error files (if any) are final."""
        return self in {BatchStatus.FAILED, BatchStatus.COMPLETED, BatchStatus.EXPIRED, BatchStatus.CANCELLED}


@dataclass(frozen=True)
class ProviderBatch:
    id: str
    status: BatchStatus
    input_file_id: str
    output_file_id: str | None
    error_file_id: str | None
    metadata: Mapping[str, str]
    created_at: datetime
    # request_counts: total lines, lines answered with a 200, lines that failed (error file)
    total: int
    completed: int
    failed: int
    # Why a failed batch failed (validation of its file, or the enqueued token limit), as "code: message".
    errors: tuple[str, ...] = ()


class BatchApiError(Exception):
    """The provider could not be reached or refused the call; the caller retries later.

    Holds only what the caller needs to decide (status, code, request id, how long to wait), never the SDK's
    exception, whose request carries the API key in its headers.
    """

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        code: str | None = None,
        request_id: str | None = None,
        retry_after_seconds: float | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.request_id = request_id
        self.retry_after_seconds = retry_after_seconds


class BatchApi(Protocol):
    def upload(self, name: str, content: bytes) -> str:
        """Uploads a request file (Files API, purpose "batch"); returns the file id."""
        ...

    def create(self, input_file_id: str, *, metadata: Mapping[str, str]) -> ProviderBatch: ...

    def retrieve(self, batch_id: str) -> ProviderBatch: ...

    def find(self, key: str, value: str, *, created_after: datetime) -> ProviderBatch | None:
        """The batch whose ``metadata[key] == value``, created at or after ``created_after``; None if none."""
        ...

    def cancel(self, batch_id: str) -> ProviderBatch: ...

    def lines(self, file_id: str) -> Iterator[bytes]:
        """The file's lines without their line ends, streamed."""
        ...


def request_line(
    custom_id: CustomId, task: Task, model: str, max_tokens: int, mode: StructuredOutput
) -> bytes:
    """One JSON Lines request: the same body an immediate call sends, addressed to the chat endpoint."""
    body = {"model": model, "max_completion_tokens": max_tokens, **request_options(mode, task)}
    line = {"custom_id": str(custom_id), "method": "POST", "url": CHAT_COMPLETIONS_URL, "body": body}
    # Compact and unescaped: the byte limit of a file is the Batch API's, not ours to spend on whitespace.
    return json.dumps(line, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


@dataclass(frozen=True)
class OutputLine:
    """One line of an output or error file.

    A request that ran has a status code and the response body (a chat completion for a 200, an error object
    otherwise); a request that never ran (expired, cancelled) or failed outside HTTP has only an error code.
    """

    custom_id: str
    status_code: int | None
    body: Mapping[str, Any] | None
    error_code: str | None
    error_message: str | None
    request_id: str | None

    @property
    def never_ran(self) -> bool:
        """The provider did not run this request (its batch expired or was cancelled first): no tokens spent,
        nothing to bill, the job only has to go back."""
        return self.status_code is None and self.error_code in NEVER_RAN


def _object(value: Any, what: str) -> Mapping[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ValueError(f"the line's {what} is not a JSON object")
    return value


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def parse_output_line(raw: bytes) -> OutputLine:
    """An output or error file line; ValueError saying why when it is not one."""
    try:
        value = json.loads(raw)
    except ValueError as reason:
        raise ValueError(f"the line is not JSON: {reason}") from None
    if not isinstance(value, dict):
        raise ValueError("the line is not a JSON object")
    custom_id = value.get("custom_id")
    if not isinstance(custom_id, str) or not custom_id:
        raise ValueError("the line has no custom_id")
    response = _object(value.get("response"), "response")
    error = _object(value.get("error"), "error")
    if response is None and error is None:
        raise ValueError(f"the line for {custom_id} has neither a response nor an error")
    status_code: int | None = None
    body: Mapping[str, Any] | None = None
    request_id: str | None = None
    if response is not None:
        status = response.get("status_code")
        if not isinstance(status, int) or isinstance(status, bool):
            raise ValueError(f"the line for {custom_id} has a response without an integer status_code")
        status_code, body = status, _object(response.get("body"), "response body")
        request_id = _text(response.get("request_id"))
    error_code = _text(error.get("code")) if error else None
    error_message = _text(error.get("message")) if error else None
    if error is None and status_code != 200 and body is not None:
        # A request that ran and was refused: the reason is in the body, as an immediate call's error is.
        detail = _object(body.get("error"), "response body's error") or {}
        error_code, error_message = _text(detail.get("code")), _text(detail.get("message"))
    return OutputLine(custom_id, status_code, body, error_code, error_message, request_id)


def line_result(line: OutputLine, job_type: JobType, model: str) -> LlmResult:
    """A line's outcome, classified exactly as the same answer to an immediate call would be."""
    from openai.types.chat import ChatCompletion
    from pydantic import ValidationError

    if line.status_code == 200 and line.body is not None:
        try:
            completion = ChatCompletion.model_validate(line.body)
        except ValidationError as error:
            detail = f"the response body is not a chat completion: {str(error)[:300]}"
            return LlmResult(OutcomeClass.INVALID_OUTPUT, model, request_id=line.request_id, error=detail)
        return completion_result(completion, job_type, model, request_id=line.request_id)
    message = line.error_message or "no message"
    if line.status_code is not None:
        outcome = classify_status(line.status_code)
        detail = f"{line.status_code}: {message}"
        detail_object = (line.body or {}).get("error")
        param = detail_object.get("param") if isinstance(detail_object, dict) else None
        if refuses_response_format(line.status_code, SimpleNamespace(param=param, message=message)):
            outcome = OutcomeClass.PROVIDER_FORMAT
            detail = f"the provider refused the response format (check PROVIDER_STRUCTURED_OUTPUT): {detail}"
        return LlmResult(outcome, model, request_id=line.request_id, error=detail[:500])
    # Never sent to the model, or failed outside HTTP: nothing the job's input did, so worth another try.
    outcome = OutcomeClass.TIMEOUT if line.error_code == LINE_TIMEOUT else OutcomeClass.TRANSIENT
    detail = f"{line.error_code or 'error'}: {message}"
    return LlmResult(outcome, model, request_id=line.request_id, error=detail[:500])


def _provider_batch(batch: Batch) -> ProviderBatch:
    counts = batch.request_counts
    errors = batch.errors.data if batch.errors and batch.errors.data else []
    return ProviderBatch(
        id=batch.id,
        status=BatchStatus(batch.status),
        input_file_id=batch.input_file_id,
        output_file_id=batch.output_file_id,
        error_file_id=batch.error_file_id,
        metadata=dict(batch.metadata or {}),
        created_at=datetime.fromtimestamp(batch.created_at, UTC),
        total=counts.total if counts else 0,
        completed=counts.completed if counts else 0,
        failed=counts.failed if counts else 0,
        errors=tuple(
            f"{e.code or 'error'}: {e.message or ''}" + (f" (line {e.line})" if e.line is not None else "")
            for e in errors
        ),
    )


class OpenAIBatchApi:
    """``BatchApi`` over the openai SDK's synchronous client, which must have ``max_retries=0``."""

    def __init__(self, client: openai.OpenAI, clock: Clock | None = None) -> None:
        if client.max_retries != 0:
            raise ValueError("the Batch API client must run with max_retries=0: retries are the caller's")
        self._client = client
        self._clock = clock or SystemClock()

    def upload(self, name: str, content: bytes) -> str:
        with self._errors("upload the request file"):
            uploaded = self._client.files.create(file=(name, content, "application/jsonl"), purpose="batch")
        return uploaded.id

    def create(self, input_file_id: str, *, metadata: Mapping[str, str]) -> ProviderBatch:
        with self._errors("create the batch"):
            batch = self._client.batches.create(
                input_file_id=input_file_id,
                endpoint=CHAT_COMPLETIONS_URL,
                completion_window=COMPLETION_WINDOW,
                metadata=dict(metadata),
            )
        return _provider_batch(batch)

    def retrieve(self, batch_id: str) -> ProviderBatch:
        with self._errors(f"retrieve batch {batch_id}"):
            batch = self._client.batches.retrieve(batch_id)
        return _provider_batch(batch)

    def find(self, key: str, value: str, *, created_after: datetime) -> ProviderBatch | None:
        # The list is newest first, so the first batch older than created_after ends the search: a batch
        # this caller created cannot be older than its own record of starting. The provider keeps whole
        # seconds, so the bound is too.
        oldest = created_after.replace(microsecond=0)
        after: str | None = None
        while True:
            with self._errors("list batches"):
                if after is None:
                    page = self._client.batches.list(limit=_LIST_PAGE)
                else:
                    page = self._client.batches.list(limit=_LIST_PAGE, after=after)
            for batch in page.data:
                if datetime.fromtimestamp(batch.created_at, UTC) < oldest:
                    return None
                if (batch.metadata or {}).get(key) == value:
                    return _provider_batch(batch)
            if not page.data or not page.has_more:
                return None
            after = page.data[-1].id

    def cancel(self, batch_id: str) -> ProviderBatch:
        with self._errors(f"cancel batch {batch_id}"):
            batch = self._client.batches.cancel(batch_id)
        return _provider_batch(batch)

    def lines(self, file_id: str) -> Iterator[bytes]:
        with (
            self._errors(f"download file {file_id}"),
            self._client.files.with_streaming_response.content(file_id) as response,
        ):
            chunks = response.iter_bytes(_DOWNLOAD_CHUNK)
            pending = b""
            while True:
                try:
                    chunk = next(chunks)
                except StopIteration:
                    break
                except Exception as error:  # whatever the transport raises mid-download
                    # Raised as ours, from None: the transport's exception holds the request and its headers.
                    raise BatchApiError(
                        f"the download of {file_id} broke off: {type(error).__name__}: {str(error)[:200]}"
                    ) from None
                pending += chunk
                *complete, pending = pending.split(b"\n")
                for line in complete:
                    if line.strip():
                        yield line.rstrip(b"\r")
            if pending.strip():
                yield pending.rstrip(b"\r")

    def _errors(self, doing: str) -> _Translated:
        return _Translated(doing, self._clock)


class _Translated:
    """Turns the SDK's exceptions into ``BatchApiError`` (without the SDK's exception chained to it)."""

    def __init__(self, doing: str, clock: Clock) -> None:
        self._doing = doing
        self._clock = clock

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: object
    ) -> Literal[False]:
        import openai

        if error is None or isinstance(error, BatchApiError) or not isinstance(error, openai.OpenAIError):
            return False
        self._raise(error)

    def _raise(self, error: openai.OpenAIError) -> NoReturn:
        import openai

        if isinstance(error, openai.APIStatusError):
            raise BatchApiError(
                f"could not {self._doing}: {error.status_code}: {error.message}"[:700],
                status=error.status_code,
                code=getattr(error, "code", None),
                request_id=error.request_id,
                retry_after_seconds=parse_retry_after(error.response.headers, self._clock.now()),
            ) from None
        if isinstance(error, openai.APITimeoutError):
            raise BatchApiError(f"could not {self._doing}: the call timed out") from None
        raise BatchApiError(f"could not {self._doing}: {type(error).__name__}: {str(error)[:300]}") from None
