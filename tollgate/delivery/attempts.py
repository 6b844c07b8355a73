"""One delivery attempt, as the dispatcher's state machine runs it: sign, send (SSRF-safe), record, and say
what happens next — delivered, wait and retry, or give up.

Schedule (like Svix): immediately, then 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h after successive failures,
each with ±20 % jitter; a 429 or 5xx's Retry-After is a floor. 2xx is delivered; 3xx is a failure, never
followed; 410 disables the endpoint; repeated 401/403 raise an alert; an endpoint failing for days is
disabled and its tenant told. A dead ERP never causes re-extraction: only the delivery is retried.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, Protocol
from uuid import UUID

from aws_lambda_powertools import Logger

from tollgate.core.clock import Clock
from tollgate.core.metrics import (
    DELIVERIES_GAVE_UP,
    DELIVERY_ATTEMPTS_FAILED,
    ENDPOINTS_DISABLED,
    MetricsSink,
    RecordedMetrics,
)
from tollgate.core.observability import SpanIds, TraceContext, log_context, random_span_id, trace_keys
from tollgate.core.retry import Jitter
from tollgate.db import Database
from tollgate.delivery.sender import DeliveryResult
from tollgate.delivery.signing import sign
from tollgate.delivery.states import DeliveryState, checked_transition
from tollgate.execution.llm.client import parse_retry_after

logger = Logger(service="tollgate-webhook-attempt", child=True)

# Seconds to wait after the n-th failed attempt (index n); after the last one, the delivery gives up.
SCHEDULE_SECONDS = (0, 5, 300, 1800, 7200, 18000, 36000, 36000)
JITTER_SHARE = 0.2
MAX_RETRY_AFTER_SECONDS = 24 * 3600
AUTH_FAILURE_ALERT_AFTER = 3


class Sender(Protocol):
    def post(self, url: str, body: bytes, headers: dict[str, str]) -> DeliveryResult: ...


class Next(StrEnum):
    DELIVERED = "delivered"
    RETRY = "retry"
    GAVE_UP = "gave_up"


@dataclass(frozen=True)
class AttemptDeps:
    db: Database
    clock: Clock
    sender: Sender
    jitter: Jitter
    # The state machine waits wait_seconds; local runs and tests compress time (0.0 = no waiting at all).
    time_scale: float = 1.0
    disable_after: timedelta = timedelta(days=5)
    metrics: MetricsSink = field(default_factory=RecordedMetrics)
    span_ids: SpanIds = random_span_id


@dataclass(frozen=True)
class AttemptOutcome:
    next: Next
    wait_seconds: int = 0
    attempt: int = 0
    status: int | None = None

    def as_state_output(self) -> dict[str, Any]:
        return {"outcome": self.next.value, "wait_seconds": self.wait_seconds, "attempt": self.attempt}


def signing_secrets(row: dict[str, Any], now: datetime) -> list[str]:
    secrets = [row["secret"]]
    expires = row["previous_secret_expires_at"]
    if row["previous_secret"] and expires is not None and expires > now:
        secrets.append(row["previous_secret"])
    return secrets


def retry_delay(deps: AttemptDeps, attempt: int, result: DeliveryResult, now: datetime) -> float | None:
    """Seconds until the next attempt, or None when the schedule is spent."""
    if attempt >= len(SCHEDULE_SECONDS):
        return None
    base = SCHEDULE_SECONDS[attempt]
    delay = base * (1 + deps.jitter(-JITTER_SHARE, JITTER_SHARE))
    status = result.status or 0
    if status == 429 or status >= 500:
        retry_after = parse_retry_after(result.headers, now)
        if retry_after is not None:
            delay = max(delay, min(retry_after, MAX_RETRY_AFTER_SECONDS))
    return max(delay, 0.0)


def attempt_delivery(deps: AttemptDeps, delivery_id: UUID) -> AttemptOutcome:
    with log_context(delivery_id=str(delivery_id)):
        return _attempt(deps, delivery_id)


def _attempt(deps: AttemptDeps, delivery_id: UUID) -> AttemptOutcome:
    q, now = deps.db.q, deps.clock.now()
    with deps.db.transaction() as conn:
        row = conn.execute(q.lock_delivery, {"delivery_id": delivery_id}).fetchone()
        if row is None:
            logger.error("no such delivery", extra={"delivery_id": str(delivery_id)})
            return AttemptOutcome(Next.GAVE_UP)
        state = DeliveryState(row["state"])
        if state is DeliveryState.DELIVERED:
            return AttemptOutcome(Next.DELIVERED, attempt=row["attempts"])
        if state is not DeliveryState.PENDING:
            return AttemptOutcome(Next.GAVE_UP, attempt=row["attempts"])
        if not row["enabled"] or row["deleted_at"] is not None:
            _finish(
                conn,
                deps,
                row,
                DeliveryState.ENDPOINT_DISABLED,
                attempt=row["attempts"],
                error="the endpoint is disabled",
            )
            return AttemptOutcome(Next.GAVE_UP, attempt=row["attempts"])
        counted = conn.execute(q.count_delivery_attempt, {"delivery_id": delivery_id, "now": now}).fetchone()
        assert counted is not None
        attempt = counted["attempts"]
    # The attempt is counted and committed before any byte leaves: a crash mid-send is still an attempt.
    body = row["body"].encode("utf-8")
    headers = sign(signing_secrets(row, now), str(delivery_id), now, body)
    headers["Content-Type"] = "application/json"
    trace = TraceContext.parse(row["trace_context"])
    if trace is not None:
        # The receiver's own tracing joins the job's trace: one id from the tenant's request to its ERP.
        headers["traceparent"] = trace.child(deps.span_ids).traceparent
    with log_context(
        tenant_id=str(row["tenant_id"]),
        endpoint_id=str(row["endpoint_id"]),
        **trace_keys(row["trace_context"]),
    ):
        result = deps.sender.post(row["url"], body, headers)
        return _record(deps, row, attempt, result, now)


def _finish(
    conn: Any,
    deps: AttemptDeps,
    row: dict[str, Any],
    state: DeliveryState,
    *,
    attempt: int,
    next_at: datetime | None = None,
    status: int | None = None,
    error: str | None = None,
) -> bool:
    """Moves the delivery on from PENDING at ``attempt``; False when it had moved on without this attempt."""
    # The row was read PENDING under lock_delivery; the attempt's outcome moves it on from there.
    checked_transition(DeliveryState(row["state"]), state)
    finished = conn.execute(
        deps.db.q.finish_delivery,
        {
            "delivery_id": row["delivery_id"],
            "state": state.value,
            "attempt": attempt,
            "next_attempt_at": next_at,
            "status": status,
            "error": error,
            "now": deps.clock.now(),
        },
    ).fetchone()
    return finished is not None


def _overtaken(
    conn: Any, deps: AttemptDeps, row: dict[str, Any], attempt: int, result: DeliveryResult
) -> AttemptOutcome:
    """Another execution attempted or delivered the delivery since this attempt began: its outcome stands,
    and this execution ends saying what the delivery is now (delivered, or stop here)."""
    current = conn.execute(deps.db.q.lock_delivery, {"delivery_id": row["delivery_id"]}).fetchone()
    delivered = current is not None and current["state"] == DeliveryState.DELIVERED
    logger.warning("delivery attempt overtaken by a newer one", extra={"attempt": attempt})
    return AttemptOutcome(
        Next.DELIVERED if delivered else Next.GAVE_UP, attempt=attempt, status=result.status
    )


def _record(
    deps: AttemptDeps, row: dict[str, Any], attempt: int, result: DeliveryResult, started: datetime
) -> AttemptOutcome:
    q, now = deps.db.q, deps.clock.now()
    keys = {"attempt": attempt}
    error = f"{result.error.value}: {result.detail}"[:500] if result.error else None
    if result.status is not None and not result.delivered and error is None:
        error = f"HTTP {result.status}"
    outcome: AttemptOutcome
    delay: float | None = None
    with deps.db.transaction() as conn:
        applied = False
        if result.delivered:
            conn.execute(q.endpoint_succeeded, {"endpoint_id": row["endpoint_id"]})
            applied = _finish(conn, deps, row, DeliveryState.DELIVERED, attempt=attempt, status=result.status)
            outcome = AttemptOutcome(Next.DELIVERED, attempt=attempt, status=result.status)
        elif result.status == 410:
            reason = "the endpoint answered 410 Gone"
            conn.execute(
                q.disable_endpoint, {"endpoint_id": row["endpoint_id"], "reason": reason, "now": now}
            )
            applied = _finish(
                conn,
                deps,
                row,
                DeliveryState.ENDPOINT_DISABLED,
                attempt=attempt,
                status=result.status,
                error=reason,
            )
            logger.warning("endpoint disabled: 410 Gone", extra=keys)
            deps.metrics.count(ENDPOINTS_DISABLED)
            outcome = AttemptOutcome(Next.GAVE_UP, attempt=attempt, status=410)
        else:
            health = conn.execute(
                q.endpoint_failed,
                {"endpoint_id": row["endpoint_id"], "now": now, "auth_failure": result.status in {401, 403}},
            ).fetchone()
            assert health is not None
            if health["auth_failures"] >= AUTH_FAILURE_ALERT_AFTER:
                logger.error(
                    "ALERT: the endpoint keeps refusing our signature", extra=keys | {"alert": "auth"}
                )
            delay = retry_delay(deps, attempt, result, now)
            failing_since = health["first_failure_at"]
            if failing_since is not None and now - failing_since >= deps.disable_after:
                reason = f"failing since {failing_since.isoformat()}"
                conn.execute(
                    q.disable_endpoint, {"endpoint_id": row["endpoint_id"], "reason": reason, "now": now}
                )
                applied = _finish(
                    conn,
                    deps,
                    row,
                    DeliveryState.ENDPOINT_DISABLED,
                    attempt=attempt,
                    status=result.status,
                    error=error,
                )
                # The tenant is told through the alert topic and the endpoint's disabled_reason.
                logger.error(
                    "ALERT: endpoint disabled after failing for days", extra=keys | {"alert": "disabled"}
                )
                deps.metrics.count(ENDPOINTS_DISABLED)
                outcome, delay = AttemptOutcome(Next.GAVE_UP, attempt=attempt, status=result.status), None
            elif delay is None:
                applied = _finish(
                    conn, deps, row, DeliveryState.FAILED, attempt=attempt, status=result.status, error=error
                )
                logger.error(
                    "ALERT: delivery gave up after its last attempt", extra=keys | {"alert": "exhausted"}
                )
                deps.metrics.count(DELIVERIES_GAVE_UP)
                outcome = AttemptOutcome(Next.GAVE_UP, attempt=attempt, status=result.status)
            else:
                applied = _finish(
                    conn,
                    deps,
                    row,
                    DeliveryState.PENDING,
                    attempt=attempt,
                    next_at=now + timedelta(seconds=delay),
                    status=result.status,
                    error=error,
                )
                wait = math.ceil(delay * deps.time_scale)
                outcome = AttemptOutcome(Next.RETRY, wait_seconds=wait, attempt=attempt, status=result.status)
        if not applied:
            outcome, delay = _overtaken(conn, deps, row, attempt, result), None
        conn.execute(
            q.insert_delivery_attempt,
            {
                "delivery_id": row["delivery_id"],
                "attempt": attempt,
                "tenant_id": row["tenant_id"],
                "started_at": started,
                "status": result.status,
                "error": error,
                "elapsed_ms": int(result.elapsed * 1000),
                "next_delay_seconds": math.ceil(delay) if delay is not None else None,
            },
        )
    if not result.delivered:
        deps.metrics.count(DELIVERY_ATTEMPTS_FAILED)
    logger.info("delivery attempt", extra=keys | {"status": result.status, "next": outcome.next.value})
    return outcome
