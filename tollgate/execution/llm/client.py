"""The LLM port and its OpenAI implementation: one attempt, no SDK retries, every outcome classified.

Retries live in the job's retry policy (persisted), never here: the SDK runs with ``max_retries=0``. What
the provider says about when to come back (``retry-after-ms``, ``Retry-After`` in seconds or as an HTTP
date) is parsed and handed up, together with usage and the provider's request id.

The provider pool's structured-output capability (``StructuredOutput``) decides how the schema is sent; the
answer is read the same strict way whatever it was, so a prompt-only model's code fence or closing remark is
invalid output (retried by the job's policy), never repaired.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from datetime import datetime
from email.utils import parsedate_to_datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import BaseModel, ValidationError

from tollgate.core.clock import Clock
from tollgate.execution.llm.output import InvalidOutput, StructuredOutput, single_json_object
from tollgate.jobtypes.base import JobType
from tollgate.jobtypes.invoice_extraction.schema import Invoice
from tollgate.jobtypes.prompts import document_messages, prompt_only_messages
from tollgate.jobtypes.registry import INVOICE_EXTRACTION

if TYPE_CHECKING:
    # Imported lazily at run time: the API Lambda imports this module's types but never calls a model,
    # and the SDK adds most of a second to its cold start.
    import openai
    from openai.types.chat import ChatCompletion


class OutcomeClass(StrEnum):
    OK = "ok"
    THROTTLED = "throttled"
    TRANSIENT = "transient"
    TIMEOUT = "timeout"
    INVALID_OUTPUT = "invalid_output"
    REFUSED = "refused"
    TERMINAL = "terminal"
    # 401/403: our key, not the job. Retried (an operator fixes the key) and paused for every worker.
    PROVIDER_AUTH = "provider_unauthorized"
    # Not the provider's doing: the stored document could not be read, so no call was made.
    DOCUMENT_UNAVAILABLE = "document_unavailable"
    # The provider refused the response format: the pool's PROVIDER_STRUCTURED_OUTPUT, not the job. Retried
    # and paused for every worker, like a refused key, instead of failing every job in the backlog.
    PROVIDER_FORMAT = "provider_format_unsupported"

    @property
    def retryable(self) -> bool:
        return self in {
            OutcomeClass.THROTTLED,
            OutcomeClass.TRANSIENT,
            OutcomeClass.TIMEOUT,
            OutcomeClass.INVALID_OUTPUT,
            OutcomeClass.PROVIDER_AUTH,
            OutcomeClass.PROVIDER_FORMAT,
        }

    @property
    def pauses_pool(self) -> bool:
        """Every worker of the pool would get the same answer until an operator changes its configuration."""
        return self in {OutcomeClass.PROVIDER_AUTH, OutcomeClass.PROVIDER_FORMAT}


@dataclass(frozen=True)
class Task:
    """What one call is asked to do: a job type's work on a document's pages, with the job's options."""

    job_type: JobType
    pages: tuple[str, ...]
    options: Any

    @classmethod
    def invoice(cls, pages: tuple[str, ...]) -> Task:
        return cls(INVOICE_EXTRACTION, pages, INVOICE_EXTRACTION.parse_options({}))

    def system(self) -> str:
        return self.job_type.system_prompt(self.options)


@dataclass
class LlmResult:
    outcome: OutcomeClass
    model: str
    output: BaseModel | None = None  # the job type's output model, parsed strictly
    input_tokens: int | None = None
    output_tokens: int | None = None
    latency_ms: int = 0
    request_id: str | None = None
    retry_after_seconds: float | None = None
    error: str | None = None
    rate_limit_headers: dict[str, str] = field(default_factory=dict)


class LlmClient(Protocol):
    async def extract(self, task: Task, model: str, timeout: float, max_tokens: int) -> LlmResult: ...


def parse_retry_after(headers: Any, now: datetime) -> float | None:
    """Seconds to wait, from ``retry-after-ms`` or ``Retry-After`` (delta-seconds or an HTTP date)."""
    if headers is None:
        return None
    millis = headers.get("retry-after-ms")
    if millis:
        try:
            return max(float(millis) / 1000.0, 0.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        return max((parsedate_to_datetime(value) - now).total_seconds(), 0.0)
    except (TypeError, ValueError):
        return None


def _rate_limit_headers(headers: Any) -> dict[str, str]:
    if headers is None:
        return {}
    return {k.lower(): v for k, v in headers.items() if k.lower().startswith("x-ratelimit-")}


def classify_status(status: int) -> OutcomeClass:
    if status == 429:
        return OutcomeClass.THROTTLED
    if status in {401, 403}:
        return OutcomeClass.PROVIDER_AUTH
    if status in {408, 409} or status >= 500:
        return OutcomeClass.TRANSIENT
    return OutcomeClass.TERMINAL


def refuses_response_format(status: int, error: Any) -> bool:
    """A 400 (OpenAI, llama.cpp) or 422 (servers validating with FastAPI, as llama-cpp-python's does) about
    ``response_format``. The schema is the same for every job, so such a refusal is the pool's."""
    if status not in {400, 422}:
        return False
    return "response_format" in f"{getattr(error, 'param', None)} {getattr(error, 'message', '')}"


def request_options(mode: StructuredOutput, task: Task) -> dict[str, Any]:
    """The messages and response format of one request, as the pool's capability wants them."""
    kind, system = task.job_type, task.system()
    if mode is StructuredOutput.JSON_SCHEMA:
        envelope = {"name": kind.schema_name, "strict": True, "schema": json.loads(kind.json_schema)}
        return {
            "messages": document_messages(system, task.pages),
            "response_format": {"type": "json_schema", "json_schema": envelope},
        }
    if mode is StructuredOutput.JSON_OBJECT:
        # llama.cpp's servers constrain decoding to a schema given beside the type, not OpenAI's envelope.
        return {
            "messages": document_messages(system, task.pages),
            "response_format": {"type": "json_object", "schema": json.loads(kind.json_schema)},
        }
    return {"messages": prompt_only_messages(system, task.pages, kind.json_schema)}


def parse_output(job_type: JobType, content: str) -> BaseModel:
    """The answer as the type's output model, read the same way in every mode; raises ``InvalidOutput``
    saying why not."""
    value = single_json_object(content)
    try:
        return job_type.output.model_validate(value)
    except ValidationError as error:
        raise InvalidOutput(f"the JSON object does not match the schema: {str(error)[:400]}") from None


def parse_invoice(content: str) -> Invoice:
    parsed = parse_output(INVOICE_EXTRACTION, content)
    assert isinstance(parsed, Invoice)
    return parsed


class OpenAIExtractor:
    def __init__(
        self,
        client: openai.AsyncOpenAI,
        clock: Clock,
        structured_output: StructuredOutput = StructuredOutput.JSON_SCHEMA,
    ) -> None:
        self._client = client
        self._clock = clock
        self._mode = structured_output

    async def extract(self, task: Task, model: str, timeout: float, max_tokens: int) -> LlmResult:
        import openai

        started = time.perf_counter()

        def elapsed() -> int:
            return int((time.perf_counter() - started) * 1000)

        try:
            # Options as a plain dict: the SDK's TypedDicts add nothing to a wire format the tests pin down.
            raw = await self._client.chat.completions.with_raw_response.create(
                model=model,
                **request_options(self._mode, task),
                max_completion_tokens=max_tokens,
                timeout=timeout,
            )
        except openai.APITimeoutError:
            return LlmResult(OutcomeClass.TIMEOUT, model, latency_ms=elapsed(), error="the call timed out")
        except openai.APIStatusError as error:
            outcome, detail = classify_status(error.status_code), f"{error.status_code}: {error.message}"
            if refuses_response_format(error.status_code, error):
                outcome = OutcomeClass.PROVIDER_FORMAT
                detail = (
                    "the provider refused the response format of "
                    f"PROVIDER_STRUCTURED_OUTPUT={self._mode.value} (check the pool's setting): {detail}"
                )
            return LlmResult(
                outcome,
                model,
                latency_ms=elapsed(),
                request_id=error.request_id,
                retry_after_seconds=parse_retry_after(error.response.headers, self._clock.now()),
                error=detail[:500],
                rate_limit_headers=_rate_limit_headers(error.response.headers),
            )
        except openai.APIConnectionError as error:
            return LlmResult(OutcomeClass.TRANSIENT, model, latency_ms=elapsed(), error=str(error)[:500])

        completion = raw.parse()
        return completion_result(
            completion,
            task.job_type,
            model,
            latency_ms=elapsed(),
            request_id=raw.headers.get("x-request-id"),
            rate_limit_headers=_rate_limit_headers(raw.headers),
        )


def completion_result(
    completion: ChatCompletion,
    job_type: JobType,
    model: str,
    *,
    latency_ms: int = 0,
    request_id: str | None = None,
    rate_limit_headers: dict[str, str] | None = None,
) -> LlmResult:
    """A chat completion the provider answered with a 200, classified: the one reading shared by an immediate
    call and a batch's output line, so the same answer ends the same way on either path."""
    result = LlmResult(
        OutcomeClass.OK,
        completion.model or model,
        latency_ms=latency_ms,
        request_id=request_id or completion.id,
        rate_limit_headers=rate_limit_headers or {},
    )
    if completion.usage is not None:
        result.input_tokens = completion.usage.prompt_tokens
        result.output_tokens = completion.usage.completion_tokens
    choice = completion.choices[0] if completion.choices else None
    message = choice.message if choice else None
    if message is not None and getattr(message, "refusal", None):
        result.outcome, result.error = OutcomeClass.REFUSED, f"refused: {message.refusal}"[:500]
        return result
    if choice is None or message is None or not message.content:
        result.outcome, result.error = OutcomeClass.INVALID_OUTPUT, "the response has no content"
        return result
    if choice.finish_reason == "length":
        result.outcome, result.error = OutcomeClass.INVALID_OUTPUT, "the output was cut off at max tokens"
        return result
    try:
        result.output = parse_output(job_type, message.content)
    except InvalidOutput as error:
        result.outcome, result.error = OutcomeClass.INVALID_OUTPUT, f"invalid output: {error}"[:500]
    return result
