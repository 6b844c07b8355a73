"""The WebSocket protocol's messages, in one home: what a client may send, and every message the server sends.
A notification only says that a job changed (never its result); the client reads the job for the rest."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Literal
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, ValidationError

# Bounds on one subscribe's filters: a client following more jobs than this follows the whole tenant.
MAX_FILTER_JOB_IDS = 1_000
MAX_FILTER_JOB_TYPES = 20
MAX_CLIENT_MESSAGE_BYTES = 64 * 1024
# A tenant's sequence is a PostgreSQL bigint: a larger cursor names no event and cannot even be queried.
MAX_CURSOR = 2**63 - 1


class Subscribe(BaseModel):
    """Start (or restart) the feed after ``cursor``, a sequence number the client saw last; no cursor is
    "from now on". Filters narrow what is sent, never what the cursor counts."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    action: Literal["subscribe"]
    cursor: int | None = Field(default=None, ge=0, le=MAX_CURSOR)
    job_ids: list[UUID] = Field(default_factory=list, max_length=MAX_FILTER_JOB_IDS)
    job_types: list[str] = Field(default_factory=list, max_length=MAX_FILTER_JOB_TYPES)


class ServerMessage(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    def encode(self) -> bytes:
        return self.model_dump_json().encode()


class Subscribed(ServerMessage):
    """The feed is on: events after ``cursor`` follow, in sequence order; ``latest`` is the newest now."""

    type: Literal["subscribed"] = "subscribed"
    cursor: int
    latest: int


class StateChanged(ServerMessage):
    """One job changed state. ``sequence`` is the tenant's event sequence (the client's next cursor);
    ``state_version`` grows with every change of the job, so an older one never follows a newer one."""

    type: Literal["job.state_changed"] = "job.state_changed"
    sequence: int
    job_id: UUID
    job_type: str
    state: str
    state_version: int
    occurred_at: datetime


class Resync(ServerMessage):
    """The cursor is older than what is kept for replay, or too far behind to replay: fetch a fresh snapshot
    (GET /extraction-jobs) and go on from ``latest``; the feed goes on from there too."""

    type: Literal["resync"] = "resync"
    latest: int
    reason: Literal["cursor_too_old", "too_far_behind"]


class ErrorMessage(ServerMessage):
    """A client message the server could not take; nothing changed."""

    type: Literal["error"] = "error"
    status: int
    title: str
    detail: str


class TooManyReplays(ErrorMessage):
    """A subscribe that would replay past the connection's or the tenant's allowance: nothing changed (a feed
    the connection had goes on live); subscribe again after ``retry_after`` seconds."""

    status: int = 429
    title: str = "Too many replays"
    retry_after: int


class BadMessage(ValueError):
    """A client message that is not a valid subscribe; ``reply`` says why, for the client."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.reply = ErrorMessage(status=400, title="Bad message", detail=detail)


def parse_client_message(raw: str | bytes | None) -> Subscribe:
    """The client's message as a subscribe; BadMessage saying why not (too large, not JSON, not a known
    action, a field of the wrong type)."""
    if raw is None:
        raise BadMessage('send a JSON object such as {"action": "subscribe", "cursor": 0}')
    data = raw.encode() if isinstance(raw, str) else raw
    if len(data) > MAX_CLIENT_MESSAGE_BYTES:
        raise BadMessage(f"a message may be at most {MAX_CLIENT_MESSAGE_BYTES} bytes")
    try:
        value = json.loads(data, parse_int=_bounded_int)
    except BadMessage:
        raise
    except (ValueError, RecursionError):
        raise BadMessage("the message is not JSON") from None
    if not isinstance(value, dict) or value.get("action") != "subscribe":
        raise BadMessage('the only action is "subscribe"')
    try:
        return Subscribe.model_validate_json(data)
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'message'}: {e['msg']}" for e in error.errors()
        )
        raise BadMessage(problems[:500]) from None


def _bounded_int(digits: str) -> int:
    # Python refuses to read integers of more than 4,300 digits (a ValueError that would read "not JSON"):
    # no number a client sends needs more than a cursor's 19, so a longer one is named for what it is.
    if len(digits.lstrip("-")) > len(str(MAX_CURSOR)):
        raise BadMessage(f"a number in the message is too large: a cursor is at most {MAX_CURSOR}")
    return int(digits)
