"""The simulated provider's Files and Batches endpoints: request files in, a batch that runs on the injected
clock, output and error files out, in OpenAI's formats.

A batch's lines are answered by the chat endpoint's own reader (the server hands in ``LineRunner``), spread
evenly over ``completion_seconds``: so a batch that expires or is cancelled part way has answered exactly the
lines whose time had come, and the rest go to the error file as never run. Faults for lines are drawn when
the batch is created (a queue first, then ``line_failure_rate``), so a test knows which lines will fail before
it moves the clock. File content problems fail the batch while it validates, as OpenAI reports them; only a
file over the byte limit is refused at upload.
"""

from __future__ import annotations

import json
import random
import threading
from collections import Counter, deque
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, Protocol

from tollgate.core.clock import Clock

BATCH_ENDPOINT = "/v1/chat/completions"
COMPLETION_WINDOW = "24h"
FILE_PURPOSES = frozenset({"batch", "assistants", "fine-tune", "vision", "user_data"})
# The fault that is no HTTP answer at all: the line ends in the error file with OpenAI's request_timeout.
TIMEOUT_FAULT = "timeout"
ACTIVE = frozenset({"validating", "in_progress", "finalizing", "cancelling"})
_EXPIRED_MESSAGE = "This request could not be executed before the completion window expired."
_CANCELLED_MESSAGE = "This request was not executed because the batch was cancelled."
_TIMEOUT_MESSAGE = "The request to the model timed out."


@dataclass(frozen=True)
class BatchSimulation:
    """How simulated batches behave; read when a batch is created, so changing it affects only later ones."""

    completion_seconds: float = 60.0  # from create to completed, lines answered evenly over it
    expire_after_seconds: float | None = None  # None: never; earlier than completion: the batch expires
    cancel_seconds: float = 0.0  # from cancelling to cancelled
    line_failure_rate: float = 0.0  # probability a line is answered with a 500 (after the queue)
    # Enqueued prompt tokens allowed per model (a model not named: no limit); a create over it fails.
    enqueued_token_limit: Mapping[str, int] = field(default_factory=dict)
    max_requests_per_file: int = 50_000
    max_file_bytes: int = 200 * 1024 * 1024

    def __post_init__(self) -> None:
        if self.completion_seconds < 0 or self.cancel_seconds < 0:
            raise ValueError("completion_seconds and cancel_seconds must not be negative")
        if self.expire_after_seconds is not None and self.expire_after_seconds < 0:
            raise ValueError("expire_after_seconds must not be negative")
        if not 0 <= self.line_failure_rate <= 1:
            raise ValueError("line_failure_rate must be between 0 and 1")
        if self.max_requests_per_file < 1 or self.max_file_bytes < 1:
            raise ValueError("file limits must be positive")
        if any(limit < 0 for limit in self.enqueued_token_limit.values()):
            raise ValueError("enqueued token limits must not be negative")

    @classmethod
    def from_json(cls, base: BatchSimulation, changes: Any) -> BatchSimulation:
        if not isinstance(changes, dict):
            raise ValueError("send the settings to change as a JSON object")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(changes) - known)
        if unknown:
            raise ValueError(
                f"unknown batch settings {', '.join(unknown)} (known: {', '.join(sorted(known))})"
            )
        return replace(base, **changes)


class LineRunner(Protocol):
    """What the chat endpoint lends the batches: its token estimate and its answer to one request."""

    def prompt_tokens(self, body: dict[str, Any]) -> int: ...

    def answer(self, body: dict[str, Any], fault: str | None) -> tuple[int, dict[str, Any]]:
        """(status, body) the chat endpoint would send for ``body`` with ``fault`` (no quotas, no latency)."""
        ...


class Refused(Exception):
    """A call the endpoint answers with an error status and OpenAI's error body."""

    def __init__(self, status: int, message: str, code: str | None = None, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.body = {
            "error": {"message": message, "type": "invalid_request_error", "param": param, "code": code}
        }


@dataclass
class _File:
    id: str
    filename: str
    purpose: str
    content: bytes
    created_at: int

    def json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "file",
            "bytes": len(self.content),
            "created_at": self.created_at,
            "filename": self.filename,
            "purpose": self.purpose,
            "status": "processed",
            "expires_at": None,
            "status_details": None,
        }


@dataclass
class _Line:
    custom_id: str
    body: dict[str, Any]
    fault: str | None


@dataclass
class _Batch:
    id: str
    input_file_id: str
    metadata: dict[str, str]
    created_at: float
    settings: BatchSimulation
    model: str | None = None
    lines: list[_Line] = field(default_factory=list)
    errors: list[dict[str, Any]] = field(default_factory=list)
    tokens: int = 0
    status: str = "validating"
    cancel_requested_at: float | None = None
    ended_at: float | None = None
    output_file_id: str | None = None
    error_file_id: str | None = None
    completed: int = 0
    failed: int = 0

    def answer_time(self, index: int) -> float:
        return self.created_at + self.settings.completion_seconds * (index + 1) / len(self.lines)

    def answered_by(self, moment: float) -> int:
        return sum(1 for i in range(len(self.lines)) if self.answer_time(i) <= moment)


@dataclass
class _Counts:
    files: int = 0
    lines_answered: int = 0
    lines_failed: int = 0
    lines_unrun: int = 0
    peak_enqueued_tokens: Counter[str] = field(default_factory=Counter)


class BatchStore:
    """Files and batches of one simulated provider; every method takes the provider's (reentrant) lock."""

    def __init__(
        self,
        settings: BatchSimulation,
        runner: LineRunner,
        clock: Clock,
        lock: threading.Condition,
        seed: int,
    ) -> None:
        self.settings = settings
        self._runner = runner
        self._clock = clock
        self._lock = lock
        self._rng = random.Random(seed)  # noqa: S311 - simulation, not security
        self._files: dict[str, _File] = {}
        self._batches: dict[str, _Batch] = {}  # in creation order
        self._line_faults: deque[str] = deque()
        self._counts = _Counts()

    # -- control ---------------------------------------------------------------------------------------

    def configure(self, settings: BatchSimulation) -> None:
        with self._lock:
            self.settings = settings

    def queue_line_faults(self, faults: Iterable[str]) -> None:
        with self._lock:
            self._line_faults.extend(faults)

    def clear_line_faults(self) -> None:
        with self._lock:
            self._line_faults.clear()

    def queued_line_faults(self) -> list[str]:
        with self._lock:
            return list(self._line_faults)

    def stats(self) -> dict[str, Any]:
        with self._lock:
            now = self._now()
            for batch in self._batches.values():
                self._advance(batch, now)
            by_status = Counter(batch.status for batch in self._batches.values())
            return {
                "batch_files": self._counts.files,
                "batches": dict(sorted(by_status.items())),
                "batch_lines_answered": self._counts.lines_answered,
                "batch_lines_failed": self._counts.lines_failed,
                "batch_lines_unrun": self._counts.lines_unrun,
                "peak_enqueued_tokens": dict(self._counts.peak_enqueued_tokens),
            }

    # -- files -----------------------------------------------------------------------------------------

    def upload(self, filename: str, purpose: str, content: bytes) -> dict[str, Any]:
        if purpose not in FILE_PURPOSES:
            raise Refused(
                400, f"'{purpose}' is not one of {sorted(FILE_PURPOSES)} - 'purpose'", param="purpose"
            )
        with self._lock:
            if purpose == "batch":
                if not filename.endswith(".jsonl"):
                    raise Refused(400, "Invalid file format for Batch API. Must be .jsonl", param="file")
                limit = self.settings.max_file_bytes
                if len(content) > limit:
                    raise Refused(
                        400,
                        f"File is too large: {len(content)} bytes. The Batch API takes files of up to "
                        f"{limit} bytes.",
                        code="file_too_large",
                        param="file",
                    )
            file = self._new_file(filename, purpose, content)
            if purpose == "batch":
                self._counts.files += 1
            self._lock.notify_all()
            return file.json()

    def file(self, file_id: str) -> dict[str, Any]:
        with self._lock:
            return self._file(file_id).json()

    def content(self, file_id: str) -> bytes:
        with self._lock:
            return self._file(file_id).content

    # -- batches ---------------------------------------------------------------------------------------

    def create(self, body: Any) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise Refused(400, "The request body must be a JSON object.")
        if body.get("endpoint") != BATCH_ENDPOINT:
            raise Refused(400, f"The simulated provider batches only {BATCH_ENDPOINT}.", param="endpoint")
        if body.get("completion_window") != COMPLETION_WINDOW:
            raise Refused(400, "completion_window must be '24h'.", param="completion_window")
        metadata = body.get("metadata") or {}
        if not isinstance(metadata, dict) or len(metadata) > 16:
            raise Refused(400, "metadata must be an object of at most 16 pairs.", param="metadata")
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
            raise Refused(400, "metadata keys and values must be strings.", param="metadata")
        with self._lock:
            input_file = self._file(str(body.get("input_file_id")))
            if input_file.purpose != "batch":
                raise Refused(
                    400, "The input file must be uploaded with purpose 'batch'.", param="input_file_id"
                )
            now = self._now()
            batch = _Batch(self._id("batch_"), input_file.id, dict(metadata), now, self.settings)
            self._validate(batch, input_file.content)
            if not batch.errors:
                self._enqueue(batch, now)
            self._batches[batch.id] = batch
            self._lock.notify_all()
            return self._json(batch)

    def retrieve(self, batch_id: str) -> dict[str, Any]:
        with self._lock:
            batch = self._batch(batch_id)
            self._advance(batch, self._now())
            return self._json(batch)

    def list(self, limit: int, after: str | None) -> dict[str, Any]:
        if not 1 <= limit <= 100:
            raise Refused(400, "limit must be between 1 and 100.", param="limit")
        with self._lock:
            now = self._now()
            newest_first = list(reversed(self._batches.values()))
            start = 0
            if after is not None:
                ids = [batch.id for batch in newest_first]
                if after not in ids:
                    raise Refused(400, f"No batch {after} to list after.", param="after")
                start = ids.index(after) + 1
            page = newest_first[start : start + limit]
            for batch in page:
                self._advance(batch, now)
            data = [self._json(batch) for batch in page]
            return {
                "object": "list",
                "data": data,
                "first_id": data[0]["id"] if data else None,
                "last_id": data[-1]["id"] if data else None,
                "has_more": start + limit < len(newest_first),
            }

    def cancel(self, batch_id: str) -> dict[str, Any]:
        with self._lock:
            batch = self._batch(batch_id)
            now = self._now()
            self._advance(batch, now)
            if batch.status not in {"validating", "in_progress", "finalizing"}:
                raise Refused(400, f"Cannot cancel a batch with status {batch.status}.", code="invalid_state")
            batch.cancel_requested_at, batch.status = now, "cancelling"
            self._lock.notify_all()
            return self._json(batch)

    # -- inside ----------------------------------------------------------------------------------------

    def _validate(self, batch: _Batch, content: bytes) -> None:
        """What OpenAI checks while a batch validates; the first problems become the batch's errors."""
        raw_lines = [line for line in content.split(b"\n") if line.strip()]
        if not raw_lines:
            batch.errors.append(_batch_error("empty_file", "The input file is empty."))
            return
        limit = batch.settings.max_requests_per_file
        if len(raw_lines) > limit:
            message = f"The input file has {len(raw_lines)} requests; a batch takes at most {limit}."
            batch.errors.append(_batch_error("too_many_tasks", message))
            return
        seen: set[str] = set()
        for number, raw in enumerate(raw_lines, start=1):
            problem = self._line_problem(batch, raw, seen)
            if problem:
                batch.errors.append(_batch_error(problem[0], problem[1], number))
                if len(batch.errors) >= 10:
                    return

    def _line_problem(self, batch: _Batch, raw: bytes, seen: set[str]) -> tuple[str, str] | None:
        try:
            request = json.loads(raw)
        except ValueError:
            return "invalid_json_line", "This line is not parseable as valid JSON."
        if not isinstance(request, dict) or not isinstance(request.get("body"), dict):
            return (
                "invalid_request",
                "A line must be an object with custom_id, method, url and a body object.",
            )
        custom_id = request.get("custom_id")
        if not isinstance(custom_id, str) or not custom_id:
            return "missing_custom_id", "A line must have a custom_id string."
        if custom_id in seen:
            return "duplicate_custom_id", f"The custom_id {custom_id!r} appears more than once in the file."
        seen.add(custom_id)
        if request.get("method") != "POST":
            return "invalid_method", "The method of every line must be POST."
        if request.get("url") != BATCH_ENDPOINT:
            return "url_mismatch", f"The url of every line must be the batch's endpoint {BATCH_ENDPOINT}."
        model = request["body"].get("model")
        if not isinstance(model, str) or not model:
            return "missing_model", "The body of every line must name a model."
        if batch.model is not None and model != batch.model:
            return (
                "model_mismatch",
                f"Every line must use the same model; {model!r} differs from {batch.model!r}.",
            )
        batch.model = model
        batch.lines.append(_Line(custom_id, request["body"], None))
        return None

    def _enqueue(self, batch: _Batch, now: float) -> None:
        """Takes the batch's prompt tokens into its model's queue, or fails the batch over the limit."""
        assert batch.model is not None  # a valid file names one model
        batch.tokens = sum(self._runner.prompt_tokens(line.body) for line in batch.lines)
        for other in self._batches.values():
            self._advance(other, now)
        queued = sum(
            b.tokens for b in self._batches.values() if b.model == batch.model and b.status in ACTIVE
        )
        limit = batch.settings.enqueued_token_limit.get(batch.model)
        if limit is not None and queued + batch.tokens > limit:
            message = (
                f"Enqueued token limit reached for {batch.model} in organization org-simulated. "
                f"Limit: {limit:,} enqueued tokens. Please try again once some in_progress batches have "
                "been completed."
            )
            batch.errors.append(_batch_error("token_limit_exceeded", message))
            batch.tokens = 0
            return
        peaks = self._counts.peak_enqueued_tokens
        peaks[batch.model] = max(peaks[batch.model], queued + batch.tokens)
        for line in batch.lines:
            line.fault = self._line_fault(batch.settings)

    def _line_fault(self, settings: BatchSimulation) -> str | None:
        if self._line_faults:
            return self._line_faults.popleft()
        if settings.line_failure_rate and self._rng.random() < settings.line_failure_rate:
            return "500"
        return None

    def _advance(self, batch: _Batch, now: float) -> None:
        """Moves the batch to where the clock says it is; ends it (files written) once. The create call
        answers "validating"; any later look has moved on, validation taking no time here."""
        if batch.status in {"failed", "completed", "expired", "cancelled"}:
            return
        if batch.errors:
            batch.status, batch.ended_at = "failed", batch.created_at
            return
        settings = batch.settings
        done = batch.created_at + settings.completion_seconds
        expiry = (
            None
            if settings.expire_after_seconds is None
            else batch.created_at + settings.expire_after_seconds
        )
        cancel = batch.cancel_requested_at
        if cancel is not None and cancel < done and (expiry is None or cancel < expiry):
            if now >= cancel + settings.cancel_seconds:
                self._end(batch, "cancelled", cut=cancel, at=cancel + settings.cancel_seconds)
            return
        if expiry is not None and expiry < done:
            if now >= expiry:
                self._end(batch, "expired", cut=expiry, at=expiry)
            else:
                batch.status, batch.completed = "in_progress", batch.answered_by(now)
            return
        if now >= done:
            self._end(batch, "completed", cut=done, at=done)
        else:
            batch.status, batch.completed = "in_progress", batch.answered_by(now)

    def _end(self, batch: _Batch, status: str, *, cut: float, at: float) -> None:
        unrun_code, unrun_message = {
            "expired": ("batch_expired", _EXPIRED_MESSAGE),
            "cancelled": ("batch_cancelled", _CANCELLED_MESSAGE),
        }.get(status, ("batch_expired", _EXPIRED_MESSAGE))
        outputs: list[bytes] = []
        errors: list[bytes] = []
        for index, line in enumerate(batch.lines):
            record: dict[str, Any] = {"id": self._id("batch_req_"), "custom_id": line.custom_id}
            if batch.answer_time(index) > cut:
                record |= {"response": None, "error": {"code": unrun_code, "message": unrun_message}}
                self._counts.lines_unrun += 1
            elif line.fault == TIMEOUT_FAULT:
                record |= {
                    "response": None,
                    "error": {"code": "request_timeout", "message": _TIMEOUT_MESSAGE},
                }
                self._counts.lines_failed += 1
            else:
                status_code, body = self._runner.answer(line.body, line.fault)
                response = {"status_code": status_code, "request_id": self._id("req_"), "body": body}
                record |= {"response": response, "error": None}
                if status_code == 200:
                    self._counts.lines_answered += 1
                else:
                    self._counts.lines_failed += 1
            encoded = json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"
            (
                outputs if record["error"] is None and record["response"]["status_code"] == 200 else errors
            ).append(encoded)
        stem = batch.id
        if outputs:
            batch.output_file_id = self._new_file(
                f"{stem}_output.jsonl", "batch_output", b"".join(outputs)
            ).id
        if errors:
            batch.error_file_id = self._new_file(f"{stem}_error.jsonl", "batch_output", b"".join(errors)).id
        batch.status, batch.ended_at = status, at
        batch.completed, batch.failed = len(outputs), len(errors)
        self._lock.notify_all()

    def _json(self, batch: _Batch) -> dict[str, Any]:
        created = int(batch.created_at)
        ended = None if batch.ended_at is None else int(batch.ended_at)
        status = batch.status

        def at(*statuses: str) -> int | None:
            return ended if status in statuses else None

        return {
            "id": batch.id,
            "object": "batch",
            "endpoint": BATCH_ENDPOINT,
            "model": batch.model,
            "errors": {"object": "list", "data": list(batch.errors)} if batch.errors else None,
            "input_file_id": batch.input_file_id,
            "completion_window": COMPLETION_WINDOW,
            "status": status,
            "output_file_id": batch.output_file_id,
            "error_file_id": batch.error_file_id,
            "created_at": created,
            "in_progress_at": created if status not in {"validating", "failed"} else None,
            "expires_at": created + 24 * 3600,
            "finalizing_at": at("completed"),
            "completed_at": at("completed"),
            "failed_at": at("failed"),
            "expired_at": at("expired"),
            "cancelling_at": None if batch.cancel_requested_at is None else int(batch.cancel_requested_at),
            "cancelled_at": at("cancelled"),
            "request_counts": {
                "total": len(batch.lines) if not batch.errors else 0,
                "completed": batch.completed,
                "failed": batch.failed,
            },
            "metadata": dict(batch.metadata),
        }

    def _new_file(self, filename: str, purpose: str, content: bytes) -> _File:
        file = _File(self._id("file-"), filename, purpose, content, int(self._now()))
        self._files[file.id] = file
        return file

    def _file(self, file_id: str) -> _File:
        file = self._files.get(file_id)
        if file is None:
            raise Refused(404, f"No such File object: {file_id}", param="id")
        return file

    def _batch(self, batch_id: str) -> _Batch:
        batch = self._batches.get(batch_id)
        if batch is None:
            raise Refused(404, f"No batch found with id '{batch_id}'.", param="batch_id")
        return batch

    def _id(self, prefix: str) -> str:
        return f"{prefix}{self._rng.getrandbits(96):024x}"

    def _now(self) -> float:
        return self._clock.now().timestamp()


def _batch_error(code: str, message: str, line: int | None = None) -> dict[str, Any]:
    return {"code": code, "message": message, "param": None, "line": line}


def settings_json(settings: BatchSimulation) -> dict[str, Any]:
    return {**asdict(settings), "enqueued_token_limit": dict(settings.enqueued_token_limit)}
