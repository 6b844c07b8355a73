"""``tollgate jobs show``'s timeline for people: the job's state changes, attempts, escalations, review,
webhook deliveries and support actions merged into one list in the order they happened."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tollgate.support.service import AttemptRecord, JobDetail
    from tollgate.support.timeline import DeliveryRecord

# Each line is placed at a time its use case wrote together with a state change, so the order holds however
# close together things happen: an attempt at its start (the claim's time, which its RUNNING change has too)
# with how it ended, a reviewer's decision at the time of the state it decided. Of things at the same instant,
# the cause comes first: the decision before the state it led to, the RUNNING change before its attempt.
ORDER = {"review": 0, "support": 0, "state": 1, "attempt": 2, "escalated": 3, "webhook": 4}


def timeline_lines(job: JobDetail) -> list[str]:
    """One line per thing that happened to the job, oldest first; a note first when the state changes
    before some version are no longer kept."""
    timeline = job.timeline
    if timeline is None:
        return ["(no timeline: the operations function that answered predates it)"]
    entries: list[tuple[datetime, int, str]] = []

    def add(at: datetime | None, kind: str, text: str) -> None:
        if at is not None:
            entries.append((at, ORDER[kind], f"{_when(at)}  {kind:<9} {text}"))

    for change in timeline.state_changes:
        text = f"{change.state} (version {change.state_version}, #{change.sequence})"
        add(change.occurred_at, "state", text)
    for attempt in job.attempts:
        add(attempt.started_at, "attempt", _attempt(attempt))
    started = {attempt.attempt: attempt.started_at for attempt in job.attempts}
    for escalation in timeline.escalations:
        codes = ", ".join(str(r.get("code", "?")) for r in escalation.reasons) or "no reasons recorded"
        to = escalation.to_model or "the large model"
        add(
            started.get(escalation.attempt, escalation.at),
            "escalated",
            f"#{escalation.attempt} {escalation.from_model or '-'} broke {codes}: retried on {to}",
        )
    if timeline.review is not None:
        review = timeline.review
        add(
            review.decided_at,
            "review",
            f"{review.decision} by {review.reviewer} on version {review.decided_on_version}: {review.note}",
        )
    for delivery in timeline.deliveries:
        for line_at, text in _delivery(delivery):
            add(line_at, "webhook", text)
    for entry in job.audit:
        add(entry.created_at, "support", f"{entry.actor} {entry.action} -> {entry.outcome}: {entry.reason}")
    lines = [text for _, _, text in sorted(entries, key=lambda e: (e[0], e[1]))]
    if timeline.missing_versions:
        missing = _versions(timeline.missing_versions)
        lines.insert(0, f"(no state change kept for version {missing}: they outlived the live feed's window)")
    return lines


def print_timeline(job: JobDetail, line: Callable[[str], None]) -> None:
    line("timeline")
    for text in timeline_lines(job):
        line(f"  {text}")


def _attempt(a: AttemptRecord) -> str:
    if a.finished_at is None:
        return f"#{a.attempt} started on {a.worker_id}, still running"
    cost = f"{a.cost_usd} USD" if a.cost_usd is not None else "no cost"
    return (
        f"#{a.attempt} {a.outcome or '?'} at {_when(a.finished_at)[11:]}: model {a.model or '-'}, tokens "
        f"{_n(a.input_tokens)} in / {_n(a.output_tokens)} out, {cost}, {_n(a.latency_ms)} ms, on "
        f"{a.worker_id}, provider request {a.provider_request_id or '-'}"
    )


def _delivery(d: DeliveryRecord) -> list[tuple[datetime | None, str]]:
    head = f"{d.event_type} to {d.url}: delivery {d.delivery_id} (webhook-id), {d.state}"
    if d.replays:
        head += f", replayed {d.replays} time(s)"
    if d.next_attempt_at is not None and d.state == "PENDING":
        head += f", next attempt {_when(d.next_attempt_at)}"
    lines: list[tuple[datetime | None, str]] = [(d.created_at, head)]
    for attempt in d.attempts:
        answer = f"HTTP {attempt.status}" if attempt.status is not None else "no answer"
        error = f" ({attempt.error})" if attempt.error else ""
        lines.append(
            (
                attempt.started_at,
                f"{d.event_type} attempt {attempt.attempt}: {answer}{error} in {_n(attempt.elapsed_ms)} ms",
            )
        )
    return lines


def _versions(versions: list[int]) -> str:
    if versions == list(range(versions[0], versions[-1] + 1)) and len(versions) > 1:
        return f"{versions[0]} to {versions[-1]}"
    return ", ".join(str(v) for v in versions)


def _n(value: Any) -> str:
    return "-" if value is None else str(value)


def _when(value: datetime | None) -> str:
    if value is None:
        return "-"
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"
