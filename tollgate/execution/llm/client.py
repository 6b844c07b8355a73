"""The LLM port and its OpenAI implementation: one attempt, no SDK retries, every outcome classified.

Retries live in the job's retry policy (persisted), never here: the SDK runs with ``max_retries=0``. What
the provider says about when to come back (``retry-after-ms``, ``Retry-After`` in seconds or as an HTTP
date) is parsed and handed up, together with usage and the provider's request id.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from datetime import datetime
from email.utils import parsedate_to_datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import ValidationError

from tollgate.core.clock import Clock
from tollgate.execution.extraction.prompt import build_messages
from tollgate.execution.extraction.schema import Invoice, response_format

if TYPE_CHECKING:
    # Imported lazily at run time: the API Lambda imports this module's types but never calls a model,
    # and the SDK adds most of a second to its cold start.
    import openai


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

    @property
    def retryable(self) -> bool:
        return self in {
            OutcomeClass.THROTTLED,
            OutcomeClass.TRANSIENT,
            OutcomeClass.TIMEOUT,
            OutcomeClass.INVALID_OUTPUT,
            OutcomeClass.PROVIDER_AUTH,
        }


@dataclass
class LlmResult:
    outcome: OutcomeClass
    model: str
    invoice: Invoice | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    latency_ms: int = 0
    request_id: str | None = None
    retry_after_seconds: float | None = None
    error: str | None = None
    rate_limit_headers: dict[str, str] = field(default_factory=dict)


class LlmClient(Protocol):
    async def extract(
        self, pages: tuple[str, ...], model: str, timeout: float, max_tokens: int
    ) -> LlmResult: ...


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


class OpenAIExtractor:
    def __init__(self, client: openai.AsyncOpenAI, clock: Clock) -> None:
        self._client = client
        self._clock = clock

    async def extract(self, pages: tuple[str, ...], model: str, timeout: float, max_tokens: int) -> LlmResult:
        import openai

        started = time.perf_counter()

        def elapsed() -> int:
            return int((time.perf_counter() - started) * 1000)

        try:
            # The SDK's TypedDict overloads do not accept plain dicts; the wire format is what matters.
            raw = await self._client.chat.completions.with_raw_response.create(  # type: ignore[call-overload]
                model=model,
                messages=build_messages(pages),
                response_format=response_format(),
                max_completion_tokens=max_tokens,
                timeout=timeout,
            )
        except openai.APITimeoutError:
            return LlmResult(OutcomeClass.TIMEOUT, model, latency_ms=elapsed(), error="the call timed out")
        except openai.APIStatusError as error:
            return LlmResult(
                classify_status(error.status_code),
                model,
                latency_ms=elapsed(),
                request_id=error.request_id,
                retry_after_seconds=parse_retry_after(error.response.headers, self._clock.now()),
                error=f"{error.status_code}: {error.message}"[:500],
                rate_limit_headers=_rate_limit_headers(error.response.headers),
            )
        except openai.APIConnectionError as error:
            return LlmResult(OutcomeClass.TRANSIENT, model, latency_ms=elapsed(), error=str(error)[:500])

        completion = raw.parse()
        result = LlmResult(
            OutcomeClass.OK,
            completion.model or model,
            latency_ms=elapsed(),
            request_id=raw.headers.get("x-request-id") or completion.id,
            rate_limit_headers=_rate_limit_headers(raw.headers),
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
            result.invoice = Invoice.model_validate(json.loads(message.content))
        except (json.JSONDecodeError, ValidationError) as error:
            result.outcome = OutcomeClass.INVALID_OUTPUT
            result.error = f"{type(error).__name__}: {str(error)[:400]}"
        return result
