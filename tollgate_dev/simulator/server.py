"""A simulated OpenAI-compatible provider on 127.0.0.1: ``POST /v1/chat/completions`` in OpenAI's wire format.

It behaves like a rate-limited provider so the worker, the global budget and the retry layer meet the
conditions they meet in production: requests/min and tokens/min quotas (reserving prompt estimate plus
max tokens, as OpenAI does) and a concurrency cap, answered past the limit with 429, ``Retry-After`` and
``retry-after-ms``; ``x-ratelimit-*`` headers; seeded latency; and faults, drawn by probability or queued
("the next N requests get fault X") from Python or from another process through ``POST /_simulator/faults``.
The answers come from the deterministic reader in ``simulated_extraction``. The Files and Batches endpoints
(``batches``) answer each request line with the same reader and the same completion body.

It answers according to the request's ``response_format``, as providers of different capabilities do: a
``json_schema`` or ``json_object`` request gets bare JSON (decoding is constrained); a request without one
gets what a prompt-only model sends, now and then (``prompt_only_rates``) or on demand (the fault queue)
wrapped in a code fence or with prose around it. A format the simulator is configured not to take
(``supported_formats``: a llama.cpp-like server takes no ``json_schema``) is refused with a 400.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import random
import socket
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tollgate.core.clock import Clock
from tollgate.jobtypes.prompts import document_pages
from tollgate_dev.simulator.batches import BatchSimulation, BatchStore, Refused, settings_json
from tollgate_dev.simulator.documents import (
    CLASSIFICATION_TITLE,
    SUMMARY_TITLE,
    DocumentMistake,
    classify,
    summarize,
)
from tollgate_dev.simulator.extraction import Mistake, extract

MISTAKES = frozenset(m.value for m in Mistake)
DOCUMENT_MISTAKES = frozenset(m.value for m in DocumentMistake)

logger = logging.getLogger(__name__)

CHAT_COMPLETIONS = "/v1/chat/completions"
ADMIN_FAULTS = "/_simulator/faults"
ADMIN_STATS = "/_simulator/stats"
ADMIN_RELEASE = "/_simulator/release"
ADMIN_BATCHES = "/_simulator/batches"
FILES = "/v1/files"
BATCHES = "/v1/batches"
ORGANIZATION = "org-simulated"


class Fault(StrEnum):
    RATE_LIMIT = "429"  # a 429 storm: refused with Retry-After whatever the quotas say
    TIMEOUT = "timeout"  # held past any sane client timeout; stop() or release_held() ends the hold
    MALFORMED_JSON = "malformed_json"  # content that is not JSON (cut off mid-object)
    WRONG_SCHEMA = "wrong_schema"  # valid JSON of the wrong shape
    # How a model that only follows the prompt dresses its JSON; drawn only for requests without a format
    # (``prompt_only_rates``), though a queued one applies to any request.
    CODE_FENCE = "code_fence"  # ```json ... ```
    LEADING_PROSE = "leading_prose"  # "Here is the extracted data:" before the object
    TRAILING_PROSE = "trailing_prose"  # a closing remark after the object
    SERVER_ERROR = "5xx"  # 500 or 503, drawn from the seed
    INTERNAL_ERROR = "500"
    OVERLOADED = "503"
    # Well-formed extractions with one mistake a real model makes (tollgate_dev.simulator.extraction).
    ARITHMETIC = "arithmetic"  # one wrong line amount
    INVENTED_IBAN = "invented_iban"
    SWAPPED_QUANTITY_PRICE = "swapped_quantity_price"
    DROPPED_LINE = "dropped_line"
    WRONG_CURRENCY = "wrong_currency"
    EVIDENCE_ELSEWHERE = "evidence_elsewhere"
    EVIDENCE_INVENTED = "evidence_invented"
    # The adversary's: one plausible wrong value with evidence quoting a real line (see ``Mistake``); those
    # that need a layout feature the document lacks answer truthfully.
    ISSUE_DATE_IS_DUE_DATE = "issue_date_is_due_date"
    DATES_SWAPPED = "dates_swapped"
    INVOICE_NUMBER_FROM_ORDER = "invoice_number_from_order"
    INVOICE_NUMBER_FROM_TAX_ID = "invoice_number_from_tax_id"
    CURRENCY_FROM_NOTE = "currency_from_note"
    IBAN_FROM_DIRECT_DEBIT = "iban_from_direct_debit"
    CUT_INVOICE_NUMBER = "cut_invoice_number"
    CUT_DATE = "cut_date"
    LONG_S = "long_s"
    KELVIN_SIGN = "kelvin_sign"
    FULLWIDTH_TOTAL = "fullwidth_total"
    TAX_RATE_CHANGED = "tax_rate_changed"
    DESCRIPTIONS_SWAPPED = "descriptions_swapped"
    DESCRIPTION_INVENTED = "description_invented"
    # The same for the other job types (tollgate_dev.simulator.documents); each applies to its own type.
    OVER_WORD_LIMIT = "over_word_limit"
    UNSUPPORTED_FACT = "unsupported_fact"
    LABEL_OUTSIDE_SET = "label_outside_set"
    FACT_NUMBER_CHANGED = "fact_number_changed"
    FACT_NAME_CHANGED = "fact_name_changed"
    SUMMARY_NUMBER_INVENTED = "summary_number_invented"
    LABEL_WITHOUT_CUE = "label_without_cue"


PROMPT_ONLY_HABITS = frozenset({Fault.CODE_FENCE, Fault.LEADING_PROSE, Fault.TRAILING_PROSE})
# The response_format types a provider may take; a request without one (or with "text") is always taken.
RESPONSE_FORMATS = frozenset({"json_schema", "json_object"})


@dataclass(frozen=True)
class Latency:
    """Lognormal response time with the given mean (seconds); a mean of 0 answers at once."""

    mean_seconds: float = 0.0
    sigma: float = 0.5

    def sample(self, rng: random.Random) -> float:
        if self.mean_seconds <= 0:
            return 0.0
        # mu chosen so that the distribution's mean, not its median, is mean_seconds.
        mu = math.log(self.mean_seconds) - self.sigma**2 / 2
        return rng.lognormvariate(mu, self.sigma)


@dataclass(frozen=True)
class SimulatorConfig:
    requests_per_minute: int | None = 500
    tokens_per_minute: int | None = 200_000
    max_concurrency: int | None = 16
    latency: Latency = field(default_factory=Latency)
    # Probability per request of each fault (by Fault value); drawn after the queue is empty.
    fault_rates: Mapping[str, float] = field(default_factory=dict)
    # Probability per request without a response_format of each prompt-only habit (code_fence,
    # leading_prose, trailing_prose), drawn when neither the queue nor fault_rates gave a fault.
    prompt_only_rates: Mapping[str, float] = field(default_factory=dict)
    # The response_format types taken (see RESPONSE_FORMATS); a llama.cpp-like server: {"json_object"}.
    supported_formats: frozenset[str] = RESPONSE_FORMATS
    storm_retry_after_seconds: float = 2.0
    timeout_hold_seconds: float = 600.0
    # Reserved for completion tokens when a request names no max_completion_tokens / max_tokens.
    default_max_tokens: int = 4096
    seed: int = 0
    host: str = "127.0.0.1"
    port: int = 0
    # The Files and Batches endpoints: completion time, expiry, line faults, enqueued token limits.
    batches: BatchSimulation = field(default_factory=BatchSimulation)

    def __post_init__(self) -> None:
        for name in self.fault_rates:
            Fault(name)  # raises on an unknown fault name
        if sum(self.fault_rates.values()) > 1:
            raise ValueError("fault probabilities add up to more than 1")
        habits = ", ".join(sorted(PROMPT_ONLY_HABITS))
        for name in self.prompt_only_rates:
            if Fault(name) not in PROMPT_ONLY_HABITS:
                raise ValueError(f"{name!r} is not a prompt-only habit ({habits})")
        if sum(self.prompt_only_rates.values()) > 1:
            raise ValueError("prompt-only probabilities add up to more than 1")
        if not self.supported_formats <= RESPONSE_FORMATS:
            unknown = ", ".join(sorted(self.supported_formats - RESPONSE_FORMATS))
            known = ", ".join(sorted(RESPONSE_FORMATS))
            raise ValueError(f"unknown response formats {unknown} (known: {known})")


@dataclass(frozen=True)
class SimulatorStats:
    requests: int = 0  # authenticated, well-formed chat completion requests (refused ones included)
    unsupported_formats: int = 0  # refused with a 400 for a response_format type not taken
    completions: int = 0  # answered 200
    rate_limited: int = 0  # 429s sent, quota or storm
    server_errors: int = 0  # 5xx sent
    faults: dict[str, int] = field(default_factory=dict)
    # The requests counted in ``requests`` by their response_format type ("none" without one).
    response_formats: dict[str, int] = field(default_factory=dict)
    in_flight: int = 0
    max_concurrency: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    # The batch path (filled from the batch store): input files uploaded, batches by their status now, lines
    # answered with a 200, lines that failed, lines never run (expired or cancelled first), and the most
    # prompt tokens each model had enqueued at once: the Batch API's own pool, apart from the quotas above.
    batch_files: int = 0
    batches: dict[str, int] = field(default_factory=dict)
    batch_lines_answered: int = 0
    batch_lines_failed: int = 0
    batch_lines_unrun: int = 0
    peak_enqueued_tokens: dict[str, int] = field(default_factory=dict)


class MonotonicClock:
    """Wall time at start plus monotonic time since: rate windows never jump with the system clock."""

    def __init__(self) -> None:
        self._origin = datetime.now(UTC)
        self._start = time.monotonic()

    def now(self) -> datetime:
        return self._origin + timedelta(seconds=time.monotonic() - self._start)


def estimate_tokens(text: str) -> int:
    """About four characters a token, as OpenAI's own rate limiter estimates before counting."""
    return math.ceil(len(text) / 4)


def prompt_text(messages: Iterable[Any]) -> str:
    parts: list[str] = []
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts += [p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)]
    return "".join(parts)


def openai_duration(seconds: float) -> str:
    """OpenAI's x-ratelimit-reset-* format: "20ms", "1s", "1.5s", "6m0s", "1h2m3s"."""
    if seconds <= 0:
        return "0s"
    if seconds < 1:
        return f"{max(1, round(seconds * 1000))}ms"
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    text = f"{secs:.3f}".rstrip("0").rstrip(".") + "s"
    if hours or minutes:
        text = f"{int(minutes)}m{text}"
    if hours:
        text = f"{int(hours)}h{text}"
    return text


class _Bucket:
    """A per-minute quota as a token bucket: full at ``capacity``, refilled continuously over 60 s."""

    def __init__(self, capacity: int, now: float) -> None:
        self.capacity = capacity
        self.level = float(capacity)
        self.updated = now

    @property
    def rate(self) -> float:
        return self.capacity / 60.0

    def refill(self, now: float) -> None:
        self.level = min(self.capacity, self.level + max(0.0, now - self.updated) * self.rate)
        self.updated = now

    def wait_seconds(self, amount: float) -> float:
        return max(0.0, (amount - self.level) / self.rate)

    def reset_seconds(self) -> float:
        return (self.capacity - self.level) / self.rate


@dataclass
class _Reply:
    status: int
    body: dict[str, Any] | None
    headers: dict[str, str] = field(default_factory=dict)
    # Drop the connection without an answer (a held request when the simulator stops).
    hang_up: bool = False
    # Sent as it is instead of the JSON body (a file's content).
    raw: bytes | None = None


@dataclass(frozen=True)
class _Call:
    """An admitted chat completion request."""

    body: dict[str, Any]
    model: str
    fault: Fault | None
    prompt_tokens: int
    max_tokens: int
    limit_headers: dict[str, str]


class _Refused(Exception):
    def __init__(self, reply: _Reply) -> None:
        super().__init__(reply.status)
        self.reply = reply


def _error(message: str, kind: str, code: str | None = None, param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that timed out and hung up is normal here, not worth a traceback.
        logger.debug("simulated provider connection error", exc_info=True)


class SimulatedProvider:
    """Start with ``start()`` (returns the base URL, ending in /v1), stop with ``stop()``."""

    def __init__(self, config: SimulatorConfig | None = None, *, clock: Clock | None = None) -> None:
        self.config = config or SimulatorConfig()
        self._clock: Clock = clock or MonotonicClock()
        self._rng = random.Random(self.config.seed)  # noqa: S311 - simulation, not security
        self._changed = threading.Condition()
        self._stopping = threading.Event()
        self._release_generation = 0
        self._queue: deque[Fault] = deque()
        self._stats = SimulatorStats()
        self._faults: Counter[str] = Counter()
        self._formats: Counter[str] = Counter()
        now = self._seconds()
        rpm, tpm = self.config.requests_per_minute, self.config.tokens_per_minute
        self._requests = _Bucket(rpm, now) if rpm else None
        self._tokens = _Bucket(tpm, now) if tpm else None
        self._connections: set[socket.socket] = set()
        # Shares the condition's (reentrant) lock, so stats, waits and batch changes are one consistent view.
        self._batches = BatchStore(
            self.config.batches, _LineRunner(self), self._clock, self._changed, self.config.seed + 1
        )
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------------------------------

    def start(self) -> str:
        self._stopping.clear()
        self._server = _Server((self.config.host, self.config.port), self._handler_class())
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="simulated-provider"
        )
        self._thread.daemon = True
        self._thread.start()
        return self.base_url

    @property
    def base_url(self) -> str:
        if self._server is None:
            raise RuntimeError("the simulated provider is not started")
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def stop(self) -> None:
        """Ends held and sleeping requests, closes open connections and stops serving."""
        self._stopping.set()
        with self._changed:
            self._changed.notify_all()
        if self._server is None:
            return
        self._server.shutdown()
        with self._changed:
            connections = list(self._connections)
        for connection in connections:
            _hang_up(connection)
        self._server.server_close()  # joins the handler threads, which all return now
        if self._thread:
            self._thread.join()
        self._server = None

    def __enter__(self) -> SimulatedProvider:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- control ---------------------------------------------------------------------------------------

    def queue_fault(self, fault: Fault | str, count: int = 1) -> None:
        """The next ``count`` chat requests that pass the quotas get ``fault``, after any queued before."""
        fault = Fault(fault)
        with self._changed:
            self._queue.extend([fault] * count)

    def queue_faults(self, faults: Iterable[Fault | str]) -> None:
        checked = [Fault(f) for f in faults]
        with self._changed:
            self._queue.extend(checked)

    def clear_faults(self) -> None:
        with self._changed:
            self._queue.clear()

    def queued_faults(self) -> list[Fault]:
        with self._changed:
            return list(self._queue)

    def release_held(self) -> None:
        """Lets requests held by the timeout fault answer normally now."""
        with self._changed:
            self._release_generation += 1
            self._changed.notify_all()

    def configure_batches(self, **changes: Any) -> BatchSimulation:
        """Changes how batches created from now on behave (fields of ``BatchSimulation``)."""
        with self._changed:
            settings = BatchSimulation.from_json(self._batches.settings, changes)
            self.config = replace(self.config, batches=settings)
            self._batches.configure(settings)
            return settings

    def queue_line_fault(self, fault: Fault | str, count: int = 1) -> None:
        """The next ``count`` lines of batches created from now on get ``fault`` (a 429 or 5xx answer, a
        timeout, or a faulty 200 such as malformed_json), after any queued before."""
        self._batches.queue_line_faults([Fault(fault).value] * count)

    def queue_line_faults(self, faults: Iterable[Fault | str]) -> None:
        self._batches.queue_line_faults([Fault(f).value for f in faults])

    def clear_line_faults(self) -> None:
        self._batches.clear_line_faults()

    @property
    def stats(self) -> SimulatorStats:
        with self._changed:
            return self._snapshot()

    def wait_for(self, predicate: Callable[[SimulatorStats], bool], timeout: float) -> bool:
        """Blocks until the stats satisfy ``predicate`` (or the timeout passes); no polling."""
        with self._changed:
            return self._changed.wait_for(lambda: predicate(self._snapshot()), timeout)

    def _snapshot(self) -> SimulatorStats:
        return SimulatorStats(
            **{
                **asdict(self._stats),
                "faults": dict(self._faults),
                "response_formats": dict(self._formats),
                **self._batches.stats(),
            }
        )

    def _count(self, **increments: int) -> None:
        values = asdict(self._stats)
        for name, amount in increments.items():
            values[name] += amount
        values["max_concurrency"] = max(values["max_concurrency"], values["in_flight"])
        self._stats = SimulatorStats(**values)
        self._changed.notify_all()

    def _seconds(self) -> float:
        return self._clock.now().timestamp()

    # -- the chat completions endpoint -----------------------------------------------------------------

    def _handle_chat(self, body: Any, authorization: str | None) -> _Reply:
        """One chat completion request, from admission to answer (runs on the request's thread)."""
        request_id = self._new_id("req_")
        reply = self._complete(body, authorization)
        reply.headers["x-request-id"] = request_id
        return reply

    def _complete(self, body: Any, authorization: str | None) -> _Reply:
        if not authorization or not authorization.startswith("Bearer ") or not authorization[7:].strip():
            return _Reply(
                401,
                _error(
                    "You didn't provide an API key. Send Authorization: Bearer <key>.",
                    "invalid_request_error",
                    "missing_api_key",
                ),
            )
        problem = _invalid_request(body)
        if problem:
            return _Reply(400, _error(problem[1], "invalid_request_error", "invalid_value", problem[0]))
        kind = _format_type(body)
        if kind is not None and kind not in self.config.supported_formats:
            with self._changed:
                self._count(unsupported_formats=1)
            taken = ", ".join(["text", *sorted(self.config.supported_formats)])
            message = (
                f"Invalid parameter: 'response_format' of type '{kind}' is not supported by this server "
                f"(it takes: {taken})."
            )
            error = _error(message, "invalid_request_error", "unsupported_value", "response_format")
            return _Reply(400, error)
        model = str(body["model"])
        prompt_tokens = estimate_tokens(prompt_text(body["messages"]))
        max_tokens = int(
            body.get("max_completion_tokens") or body.get("max_tokens") or self.config.default_max_tokens
        )
        with self._changed:
            self._formats[kind or "none"] += 1
            self._count(requests=1)
            try:
                limit_headers = self._admit(model, prompt_tokens + max_tokens)
            except _Refused as refused:
                self._count(rate_limited=1)
                return refused.reply
            self._count(in_flight=1)
            fault = self._next_fault(constrained=kind is not None)
        try:
            return self._answer(_Call(body, model, fault, prompt_tokens, max_tokens, limit_headers))
        finally:
            with self._changed:
                self._count(in_flight=-1)

    def _answer(self, call: _Call) -> _Reply:
        model, fault, limit_headers, prompt_tokens = (
            call.model,
            call.fault,
            call.limit_headers,
            call.prompt_tokens,
        )
        if fault is Fault.RATE_LIMIT:
            with self._changed:
                self._count(rate_limited=1)
            wait = self.config.storm_retry_after_seconds
            message = (
                f"Rate limit reached for {model} in organization {ORGANIZATION}: the provider is shedding "
                f"load. Please try again in {openai_duration(wait)}."
            )
            headers = {**limit_headers, **_retry_after(wait)}
            return _Reply(429, _error(message, "requests", "rate_limit_exceeded"), headers)
        with self._changed:
            delay = self.config.latency.sample(self._rng)
        if self._stopping.wait(delay):
            return _Reply(503, None, hang_up=True)
        if fault is Fault.TIMEOUT and not self._hold():
            return _Reply(503, None, hang_up=True)
        if fault in (Fault.SERVER_ERROR, Fault.INTERNAL_ERROR, Fault.OVERLOADED):
            return self._server_error(fault)
        completion, completion_tokens = self._completion(call)
        with self._changed:
            self._count(completions=1, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens)
        return _Reply(200, completion, dict(limit_headers))

    def _completion(self, call: _Call) -> tuple[dict[str, Any], int]:
        """The chat completion body answering ``call`` and its completion tokens: one for both endpoints."""
        body, model, fault = call.body, call.model, call.fault
        prompt_tokens, max_tokens = call.prompt_tokens, call.max_tokens
        extraction = _read(body, fault)
        content = json.dumps(extraction, ensure_ascii=False, indent=None if _format_type(body) else 2)
        if fault in PROMPT_ONLY_HABITS:
            content = _dress(content, fault)
        elif fault is Fault.MALFORMED_JSON:
            content = content[: len(content) // 2]
        elif fault is Fault.WRONG_SCHEMA:
            content = json.dumps(_wrong_shape(extraction), ensure_ascii=False)
        finish_reason = "stop"
        completion_tokens = estimate_tokens(content)
        if completion_tokens > max_tokens:
            # Like a model that runs out of its budget: the text is cut off where the budget ends.
            content, completion_tokens, finish_reason = content[: max_tokens * 4], max_tokens, "length"
        return (
            {
                "id": self._new_id("chatcmpl-"),
                "object": "chat.completion",
                "created": int(self._clock.now().timestamp()),
                "model": model,
                "choices": [
                    {
                        "index": 0,
                        "message": {
                            "role": "assistant",
                            "content": content,
                            "refusal": None,
                            "annotations": [],
                        },
                        "logprobs": None,
                        "finish_reason": finish_reason,
                    }
                ],
                "usage": {
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": completion_tokens,
                    "total_tokens": prompt_tokens + completion_tokens,
                    "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
                    "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0},
                },
                "service_tier": "default",
                "system_fingerprint": "fp_simulated",
            },
            completion_tokens,
        )

    def _server_error(self, fault: Fault) -> _Reply:
        with self._changed:
            self._count(server_errors=1)
            status = self._server_error_status(fault)
        return _Reply(status, _server_error_body(status))

    def _server_error_status(self, fault: Fault) -> int:
        status = {Fault.INTERNAL_ERROR: 500, Fault.OVERLOADED: 503}.get(fault)
        with self._changed:
            return status if status is not None else self._rng.choice((500, 503))

    def _hold(self) -> bool:
        """Holds a request (timeout fault); False when the simulator is stopping, True when released or
        when the hold time ran out."""
        with self._changed:
            generation = self._release_generation
            self._changed.wait_for(
                lambda: self._stopping.is_set() or self._release_generation != generation,
                timeout=self.config.timeout_hold_seconds,
            )
        return not self._stopping.is_set()

    def _admit(self, model: str, reserved_tokens: int) -> dict[str, str]:
        """Takes a request and its token reservation, or raises _Refused with a 429 (lock held)."""
        now = self._seconds()
        for bucket in (self._requests, self._tokens):
            if bucket:
                bucket.refill(now)
        limit = self.config.max_concurrency
        if limit is not None and self._stats.in_flight >= limit:
            message = (
                f"Too many concurrent requests for {model} in organization {ORGANIZATION}: "
                f"limit {limit} in flight. Please try again in 1s."
            )
            raise _Refused(
                _Reply(
                    429,
                    _error(message, "requests", "rate_limit_exceeded"),
                    {**self._limit_headers(), **_retry_after(1.0)},
                )
            )
        if self._requests and self._requests.level < 1:
            wait = self._requests.wait_seconds(1)
            used = self._requests.capacity - math.floor(self._requests.level)
            message = (
                f"Rate limit reached for {model} in organization {ORGANIZATION} on requests per min (RPM): "
                f"Limit {self._requests.capacity}, Used {used}, Requested 1. "
                f"Please try again in {openai_duration(wait)}."
            )
            raise _Refused(
                _Reply(
                    429,
                    _error(message, "requests", "rate_limit_exceeded"),
                    {**self._limit_headers(), **_retry_after(wait)},
                )
            )
        if self._tokens and self._tokens.level < reserved_tokens:
            capacity = self._tokens.capacity
            used = capacity - math.floor(self._tokens.level)
            too_large = reserved_tokens > capacity
            message = (
                f"{'Request too large' if too_large else 'Rate limit reached'} for {model} in organization "
                f"{ORGANIZATION} on tokens per min (TPM): Limit {capacity}, Used {used}, "
                f"Requested {reserved_tokens}."
            )
            headers = self._limit_headers()
            if not too_large:  # waiting never makes a request larger than the quota fit
                wait = self._tokens.wait_seconds(reserved_tokens)
                message += f" Please try again in {openai_duration(wait)}."
                headers |= _retry_after(wait)
            raise _Refused(_Reply(429, _error(message, "tokens", "rate_limit_exceeded"), headers))
        if self._requests:
            self._requests.level -= 1
        if self._tokens:
            self._tokens.level -= reserved_tokens
        return self._limit_headers()

    def _limit_headers(self) -> dict[str, str]:
        headers: dict[str, str] = {}
        for name, bucket in (("requests", self._requests), ("tokens", self._tokens)):
            if bucket:
                headers[f"x-ratelimit-limit-{name}"] = str(bucket.capacity)
                headers[f"x-ratelimit-remaining-{name}"] = str(max(0, math.floor(bucket.level)))
                headers[f"x-ratelimit-reset-{name}"] = openai_duration(bucket.reset_seconds())
        return headers

    def _next_fault(self, *, constrained: bool) -> Fault | None:
        """The queued fault first, else one drawn by the configured probabilities, then (for a request
        without a response format) a prompt-only habit drawn by its own (caller holds the lock)."""
        fault: Fault | None = None
        if self._queue:
            fault = self._queue.popleft()
        else:
            fault = self._draw(self.config.fault_rates)
            if fault is None and not constrained:
                fault = self._draw(self.config.prompt_only_rates)
        if fault is not None:
            self._faults[fault.value] += 1
        return fault

    def _draw(self, rates: Mapping[str, float]) -> Fault | None:
        if not rates:
            return None
        draw = self._rng.random()
        for name, probability in rates.items():
            if draw < probability:
                return Fault(name)
            draw -= probability
        return None

    def _new_id(self, prefix: str) -> str:
        with self._changed:
            return f"{prefix}{self._rng.getrandbits(128):032x}"

    # -- admin endpoints -------------------------------------------------------------------------------

    def _handle_admin(self, method: str, path: str, body: Any) -> _Reply:
        if path == ADMIN_BATCHES:
            return self._handle_batch_admin(method, body)
        if path == ADMIN_FAULTS and method == "POST":
            try:
                if isinstance(body, dict) and "faults" in body:
                    self.queue_faults(body["faults"])
                elif isinstance(body, dict) and "fault" in body:
                    self.queue_fault(body["fault"], int(body.get("count", 1)))
                else:
                    raise ValueError("send {'faults': [...]} or {'fault': NAME, 'count': N}")
            except (ValueError, TypeError) as error:
                known = ", ".join(f.value for f in Fault)
                return _Reply(400, _error(f"{error} (faults: {known})", "invalid_request_error"))
            return _Reply(200, {"queued": [f.value for f in self.queued_faults()]})
        if path == ADMIN_FAULTS and method == "DELETE":
            self.clear_faults()
            return _Reply(200, {"queued": []})
        if path == ADMIN_FAULTS and method == "GET":
            return _Reply(200, {"queued": [f.value for f in self.queued_faults()]})
        if path == ADMIN_RELEASE and method == "POST":
            self.release_held()
            return _Reply(200, {"released": True})
        if path == ADMIN_STATS and method == "GET":
            return _Reply(200, asdict(self.stats))
        return _Reply(404, _error(f"Unknown simulator endpoint {method} {path}", "invalid_request_error"))

    def _handle_batch_admin(self, method: str, body: Any) -> _Reply:
        """GET: settings and queued line faults; POST {"settings": {...}, "line_faults": [...]} or
        {"line_fault": NAME, "count": N}; DELETE: clears the queued line faults."""
        if method == "POST":
            try:
                if not isinstance(body, dict):
                    raise ValueError("send a JSON object")
                if "settings" in body:
                    changes = body["settings"]
                    if not isinstance(changes, dict):
                        raise ValueError("'settings' must be an object of BatchSimulation fields")
                    self.configure_batches(**changes)
                if "line_faults" in body:
                    self.queue_line_faults(body["line_faults"])
                if "line_fault" in body:
                    self.queue_line_fault(body["line_fault"], int(body.get("count", 1)))
            except (ValueError, TypeError) as error:
                known = ", ".join(f.value for f in Fault)
                return _Reply(400, _error(f"{error} (line faults: {known})", "invalid_request_error"))
        elif method == "DELETE":
            self.clear_line_faults()
        elif method != "GET":
            return _Reply(405, _error(f"{method} is not taken here", "invalid_request_error"))
        settings = settings_json(self._batches.settings)
        return _Reply(200, {"settings": settings, "line_faults": self._batches.queued_line_faults()})

    def _handle_files_and_batches(self, method: str, target: str, headers: Any, raw: bytes) -> _Reply:
        """The Files and Batches endpoints (runs on the request's thread)."""
        authorization = headers.get("Authorization")
        if not authorization or not authorization.startswith("Bearer ") or not authorization[7:].strip():
            return _Reply(
                401,
                _error(
                    "You didn't provide an API key. Send Authorization: Bearer <key>.",
                    "invalid_request_error",
                    "missing_api_key",
                ),
            )
        url = urlsplit(target)
        parts = url.path.rstrip("/").split("/")[1:]  # ["v1", "files", id, "content"]
        try:
            if parts[1] == "files":
                reply = self._handle_files(method, parts[2:], headers, raw)
            elif parts[1] == "batches":
                reply = self._handle_batches(method, parts[2:], url.query, raw)
            else:
                reply = None
        except Refused as refused:
            return _Reply(refused.status, refused.body)
        return reply or _Reply(404, _error(f"Invalid URL ({method} {url.path})", "invalid_request_error"))

    def _handle_files(self, method: str, rest: list[str], headers: Any, raw: bytes) -> _Reply | None:
        if method == "POST" and not rest:
            form = _multipart(headers.get("Content-Type", ""), raw)
            filename, content = form.get("file", (None, b""))
            if filename is None:
                raise Refused(400, "Send the file as a multipart part named 'file'.", param="file")
            purpose = form.get("purpose", (None, b""))[1].decode("utf-8", "replace")
            return _Reply(200, self._batches.upload(filename, purpose, content))
        if method == "GET" and len(rest) == 1:
            return _Reply(200, self._batches.file(rest[0]))
        if method == "GET" and len(rest) == 2 and rest[1] == "content":
            return _Reply(200, None, raw=self._batches.content(rest[0]))
        return None

    def _handle_batches(self, method: str, rest: list[str], query: str, raw: bytes) -> _Reply | None:
        if method == "POST" and not rest:
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                raise Refused(400, "We could not parse the JSON body of your request.") from None
            return _Reply(200, self._batches.create(body))
        if method == "GET" and not rest:
            arguments = parse_qs(query)
            try:
                limit = int(arguments.get("limit", ["20"])[0])
            except ValueError:
                raise Refused(400, "limit must be an integer.", param="limit") from None
            return _Reply(200, self._batches.list(limit, arguments.get("after", [None])[0]))
        if method == "GET" and len(rest) == 1:
            return _Reply(200, self._batches.retrieve(rest[0]))
        if method == "POST" and len(rest) == 2 and rest[1] == "cancel":
            return _Reply(200, self._batches.cancel(rest[0]))
        return None

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        provider = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Headers and body go out as two writes; with Nagle on, the client's delayed ACK adds ~40 ms.
            disable_nagle_algorithm = True

            def setup(self) -> None:
                super().setup()
                with provider._changed:
                    provider._connections.add(self.connection)
                    # A connection accepted while stop() runs must not keep a thread waiting for a request.
                    if provider._stopping.is_set():
                        _hang_up(self.connection)

            def finish(self) -> None:
                with provider._changed:
                    provider._connections.discard(self.connection)
                with contextlib.suppress(OSError):  # the peer is gone; nothing left to flush
                    super().finish()

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                path = self.path.split("?", 1)[0]
                if path.startswith((FILES, BATCHES)):
                    self._send(provider._handle_files_and_batches(self.command, self.path, self.headers, raw))
                    return
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = ...
                if body is ...:
                    reply = _Reply(
                        400,
                        _error("We could not parse the JSON body of your request.", "invalid_request_error"),
                    )
                elif path.startswith("/_simulator/"):
                    reply = provider._handle_admin(self.command, path, body)
                elif path == CHAT_COMPLETIONS and self.command == "POST":
                    reply = provider._handle_chat(body, self.headers.get("Authorization"))
                else:
                    reply = _Reply(
                        404, _error(f"Invalid URL ({self.command} {path})", "invalid_request_error")
                    )
                self._send(reply)

            def _send(self, reply: _Reply) -> None:
                if reply.hang_up:
                    self.close_connection = True
                    return
                payload = reply.raw if reply.raw is not None else json.dumps(reply.body).encode()
                self.send_response(reply.status)
                kind = "application/octet-stream" if reply.raw is not None else "application/json"
                self.send_header("Content-Type", kind)
                for key, value in reply.headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = do_DELETE = _serve

            def log_message(self, format: str, *args: Any) -> None:
                pass  # the stats say what happened; request lines would only add noise to test output

        return Handler


class _LineRunner:
    """The chat endpoint's reader, lent to the batch store: what a batch line gets is what the same request
    would get from /v1/chat/completions, minus quotas and latency (the Batch API has its own pool)."""

    def __init__(self, provider: SimulatedProvider) -> None:
        self._provider = provider

    def prompt_tokens(self, body: dict[str, Any]) -> int:
        messages = body.get("messages")
        return estimate_tokens(prompt_text(messages if isinstance(messages, list) else []))

    def answer(self, body: dict[str, Any], fault: str | None) -> tuple[int, dict[str, Any]]:
        problem = _invalid_request(body)
        if problem:
            return 400, _error(problem[1], "invalid_request_error", "invalid_value", problem[0])
        kind = _format_type(body)
        if kind is not None and kind not in self._provider.config.supported_formats:
            message = (
                f"Invalid parameter: 'response_format' of type '{kind}' is not supported by this server."
            )
            return 400, _error(message, "invalid_request_error", "unsupported_value", "response_format")
        model = str(body["model"])
        checked = Fault(fault) if fault is not None else None
        if checked is Fault.RATE_LIMIT:
            message = f"Rate limit reached for {model} in organization {ORGANIZATION}: shedding load."
            return 429, _error(message, "requests", "rate_limit_exceeded")
        if checked in (Fault.SERVER_ERROR, Fault.INTERNAL_ERROR, Fault.OVERLOADED):
            status = self._provider._server_error_status(checked)
            return status, _server_error_body(status)
        max_tokens = int(
            body.get("max_completion_tokens")
            or body.get("max_tokens")
            or self._provider.config.default_max_tokens
        )
        call = _Call(body, model, checked, self.prompt_tokens(body), max_tokens, {})
        completion, _ = self._provider._completion(call)
        return 200, completion


def _server_error_body(status: int) -> dict[str, Any]:
    if status == 503:
        return _error("The server is overloaded or not ready yet.", "server_error")
    return _error("The server had an error while processing your request. Sorry about that!", "server_error")


def _multipart(content_type: str, raw: bytes) -> dict[str, tuple[str | None, bytes]]:
    """The parts of a multipart/form-data body by name, as (filename, data)."""
    kind, _, parameters = content_type.partition(";")
    if kind.strip().lower() != "multipart/form-data":
        raise Refused(400, "Send the file as multipart/form-data.")
    boundary = ""
    for parameter in parameters.split(";"):
        name, _, value = parameter.strip().partition("=")
        if name.lower() == "boundary":
            boundary = value.strip('"')
    if not boundary:
        raise Refused(400, "The multipart body has no boundary.")
    form: dict[str, tuple[str | None, bytes]] = {}
    for part in raw.split(b"--" + boundary.encode())[1:]:
        if part.startswith(b"--"):
            break  # the closing delimiter
        head, separator, data = part.removeprefix(b"\r\n").partition(b"\r\n\r\n")
        if not separator:
            raise Refused(400, "A multipart part has no header end.")
        disposition = ""
        for header in head.decode("utf-8", "replace").split("\r\n"):
            key, _, value = header.partition(":")
            if key.strip().lower() == "content-disposition":
                disposition = value
        fields = {}
        for item in disposition.split(";")[1:]:
            key, _, value = item.strip().partition("=")
            fields[key.lower()] = value.strip('"')
        if "name" in fields:
            form[fields["name"]] = (fields.get("filename"), data.removesuffix(b"\r\n"))
    return form


def _hang_up(connection: socket.socket) -> None:
    with contextlib.suppress(OSError):  # already closed by the client
        connection.shutdown(socket.SHUT_RDWR)


def _retry_after(seconds: float) -> dict[str, str]:
    # Retry-After is whole seconds (RFC 9110), rounded up so a client that honours it is not early.
    return {"retry-after": str(max(1, math.ceil(seconds))), "retry-after-ms": str(math.ceil(seconds * 1000))}


def _invalid_request(body: Any) -> tuple[str, str] | None:
    """(param, message) of the first problem with a chat completion request, as OpenAI reports a 400."""
    if not isinstance(body, dict):
        return "body", "The request body must be a JSON object."
    if not isinstance(body.get("model"), str) or not body["model"]:
        return "model", "You must provide a model parameter."
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
        return "messages", "'messages' must be a non-empty array of message objects."
    if body.get("stream"):
        return "stream", "The simulated provider does not stream; send stream=false."
    for name in ("max_completion_tokens", "max_tokens"):
        value = body.get(name)
        if value is not None and (not isinstance(value, int) or value < 1):
            return name, f"'{name}' must be a positive integer."
    return _invalid_response_format(body.get("response_format"))


def _invalid_response_format(response_format: Any) -> tuple[str, str] | None:
    if response_format is None:
        return None
    kinds = {"text", *RESPONSE_FORMATS}
    if not isinstance(response_format, dict) or response_format.get("type") not in kinds:
        kinds_text = ", ".join(sorted(kinds))
        return "response_format", f"'response_format' must be an object whose 'type' is one of {kinds_text}."
    if response_format["type"] == "json_schema":
        envelope = response_format.get("json_schema")
        if not isinstance(envelope, dict) or not isinstance(envelope.get("schema"), dict):
            return "response_format.json_schema", "'json_schema' must be an object holding a 'schema' object."
    if response_format["type"] == "json_object" and not isinstance(response_format.get("schema", {}), dict):
        return "response_format.schema", "'schema' must be a JSON schema object."
    return None


def _format_type(body: dict[str, Any]) -> str | None:
    """The constrained format a (valid) request asks for; None without one or for plain text."""
    response_format = body.get("response_format")
    if response_format is None or response_format.get("type") == "text":
        return None
    return str(response_format["type"])


def _read(body: dict[str, Any], fault: Fault | None) -> dict[str, Any]:
    """The answer to the request's job type, told apart by the output schema the request carries."""
    pages = document_pages(body["messages"])
    request = prompt_text(body["messages"]) + json.dumps(body.get("response_format"), sort_keys=True)
    if SUMMARY_TITLE in request or CLASSIFICATION_TITLE in request:
        slip = (
            DocumentMistake(fault.value) if fault is not None and fault.value in DOCUMENT_MISTAKES else None
        )
        reader = summarize if SUMMARY_TITLE in request else classify
        return reader(pages, prompt_text(body["messages"]), slip)
    mistake = Mistake(fault.value) if fault is not None and fault.value in MISTAKES else None
    return extract(pages, mistake=mistake)


def _dress(content: str, habit: Fault) -> str:
    """The JSON as a model answering from the prompt alone sends it now and then."""
    if habit is Fault.CODE_FENCE:
        return f"```json\n{content}\n```"
    if habit is Fault.LEADING_PROSE:
        return f"Here is the extracted invoice data:\n\n{content}"
    return f"{content}\n\nLet me know if you need any other fields extracted."


def _wrong_shape(extraction: dict[str, Any]) -> dict[str, Any]:
    """What a model answering without the schema might send: plausible, valid JSON, wrong shape."""
    supplier = extraction.get("supplier") or {}
    total = extraction.get("total")
    return {
        "vendor": supplier.get("name"),
        "invoice": {"number": extraction.get("invoice_number"), "date": extraction.get("issue_date")},
        "amount_due": float(total) if total is not None else None,
        "items": len(extraction.get("line_items") or []),
    }
