"""Log keys that follow one piece of work, and the W3C trace context that follows a job from the API through
the outbox, SQS and the worker to the tenant's webhook.

Keys live in a context variable (Powertools' thread-safe keys), so concurrent asyncio tasks and threads each
log their own job; ``asyncio.to_thread`` carries them into the thread it starts.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from aws_lambda_powertools import Logger

# Every Logger reaches the same context variable; this one only manages it and never writes (a child logger
# could not: Powertools refuses keys on a child whose parent is not created yet).
_keys = Logger(service="tollgate-log-context")

# version 00: trace id, parent (span) id, flags; an all-zero trace or span id is invalid.
_TRACEPARENT = re.compile(r"^00-(?!0{32})([0-9a-f]{32})-(?!0{16})([0-9a-f]{16})-([0-9a-f]{2})$")
# API Gateway's and Lambda's X-Ray header: Root=1-<8 hex time>-<24 hex>;Parent=<16 hex>;Sampled=<0|1>
_XRAY_ROOT = re.compile(r"Root=1-([0-9a-f]{8})-([0-9a-f]{24})")
_XRAY_PARENT = re.compile(r"Parent=([0-9a-f]{16})")
_XRAY_SAMPLED = re.compile(r"Sampled=([01])")

SpanIds = Callable[[], str]


def random_span_id() -> str:
    return secrets.token_hex(8)


@contextmanager
def log_context(**keys: object) -> Iterator[None]:
    """Adds ``keys`` to every log line written by this task or thread until the block ends."""
    before = dict(_keys.thread_safe_get_current_keys())
    # Replacing the mapping (never mutating it) keeps a task's keys out of the tasks it shares a parent with.
    _keys.thread_safe_clear_keys()
    _keys.thread_safe_append_keys(**before, **{k: v for k, v in keys.items() if v is not None})
    try:
        yield
    finally:
        _keys.thread_safe_clear_keys()
        if before:
            _keys.thread_safe_append_keys(**before)


@dataclass(frozen=True)
class TraceContext:
    trace_id: str
    span_id: str
    flags: str = "01"

    @property
    def traceparent(self) -> str:
        return f"00-{self.trace_id}-{self.span_id}-{self.flags}"

    def child(self, span_ids: SpanIds = random_span_id) -> TraceContext:
        """The same trace, one hop further: what a process sends on when it calls the next one."""
        return TraceContext(self.trace_id, span_ids(), self.flags)

    @classmethod
    def parse(cls, traceparent: str | None) -> TraceContext | None:
        match = _TRACEPARENT.match(traceparent or "")
        return cls(*match.groups()) if match else None

    @classmethod
    def from_xray(cls, header: str | None) -> TraceContext | None:
        """X-Ray's trace id is the same 128 bits written differently, so the job's trace is the request's."""
        root = _XRAY_ROOT.search(header or "")
        if root is None:
            return None
        parent = _XRAY_PARENT.search(header or "")
        sampled = _XRAY_SAMPLED.search(header or "")
        return cls(
            root.group(1) + root.group(2),
            parent.group(1) if parent else random_span_id(),
            "01" if sampled is None or sampled.group(1) == "1" else "00",
        )

    @classmethod
    def new(cls, span_ids: SpanIds = random_span_id) -> TraceContext:
        return cls(secrets.token_hex(16), span_ids())


def trace_for_request(traceparent: str | None, xray_header: str | None) -> TraceContext:
    """The caller's trace when it sent a valid one, else the API Gateway request's, else a new one: every
    job gets a trace id that its logs, messages and webhooks share."""
    return TraceContext.parse(traceparent) or TraceContext.from_xray(xray_header) or TraceContext.new()


def trace_keys(traceparent: str | None) -> dict[str, str]:
    """The log key for a stored trace context (none when there is none)."""
    context = TraceContext.parse(traceparent)
    return {"trace_id": context.trace_id} if context else {}
