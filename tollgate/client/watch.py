"""Watching a tenant's jobs on the live feed (README: Live notifications): each state change once, in order,
resuming from the last sequence handled after a dropped connection; with job ids, until each of them is
finished.

A job already finished when the watch starts sends no change any more, so the watch also reads each named job
once over the API after subscribing (a snapshot) and counts it as seen at that version. With ``--cursor`` the
feed first replays what happened after the cursor; a finished job's last change may lie before the cursor,
which only the end of the replay can tell, so that watch subscribes to the tenant's whole feed (the sequence
is gap-free, so the replay ends where the subscription's ``latest`` says) and keeps only its jobs' changes.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tollgate.client.follow import FINISHED

if TYPE_CHECKING:
    from websockets.sync.client import ClientConnection

FINAL = FINISHED - {"REVIEW_REQUIRED"}


class WatchRefused(Exception):
    """The feed will not serve this watch: the key (401/403), the tenant's connection cap (429), or a
    subscription it refused (a cursor past the latest event). ``input_problem`` tells which kind."""

    def __init__(self, message: str, *, input_problem: bool) -> None:
        super().__init__(message)
        self.input_problem = input_problem


class FeedLost(Exception):
    """The feed could not be reached again after as many tries as allowed."""


@dataclass
class JobWatch:
    """Each change is passed to ``on_change`` (a ``job.state_changed`` message, a ``job.snapshot`` made from
    the API's view of a named job, or a ``resync``); ``run`` returns once every named job is finished (or
    final, with ``through_review``), and never without job ids. ``cursor`` is the last sequence handled."""

    url: str
    api_key: str
    on_change: Callable[[dict[str, Any]], None]
    job_ids: Sequence[str] = ()
    cursor: int | None = None
    # The API's view of a job by id (state, state_version, job_type, updated_at); needed with job ids.
    snapshot: Callable[[str], dict[str, Any]] | None = None
    through_review: bool = False
    reconnects: int = 10
    reconnect_wait: float = 1.0
    sleep: Callable[[float], None] = time.sleep
    on_note: Callable[[str], None] = lambda _: None
    connection: ClientConnection | None = None
    _seen: dict[str, int] = field(default_factory=dict)  # job id -> highest state_version handled
    _done: set[str] = field(default_factory=set)
    _pending: dict[str, dict[str, Any]] = field(default_factory=dict)  # snapshots to apply after the replay
    _replay_until: int | None = None
    _closed: bool = False

    def __post_init__(self) -> None:
        self.job_ids = list(dict.fromkeys(self.job_ids))
        # A cursor given with job ids: the whole feed, so the replay's end is known (see the module's text).
        self._whole_feed = bool(self.job_ids) and self.cursor is not None
        self._snapshots_taken = False

    @property
    def finished(self) -> bool:
        return bool(self.job_ids) and self._done >= set(self.job_ids)

    def run(self) -> None:
        from websockets.exceptions import ConnectionClosed, InvalidStatus
        from websockets.sync.client import connect

        failures = 0
        while not self._closed and not self.finished:
            try:
                with connect(
                    self.url,
                    additional_headers={"Authorization": f"Bearer {self.api_key}"},
                    compression=None,
                    open_timeout=30,
                ) as connection:
                    self.connection = connection
                    connection.send(json.dumps(self._subscription()))
                    for raw in connection:
                        failures = 0
                        self._handle(json.loads(raw))
                        if self.finished or self._closed:
                            return
                # Closed by the server without an error (it went away): counted like a drop, so a server
                # that keeps closing at once is not asked again without a pause.
                failures += 1
                self._give_up_after(failures, "the feed closed the connection")
            except InvalidStatus as refused:
                status = refused.response.status_code
                if status in {401, 403}:
                    raise WatchRefused(
                        f"the feed refused the key ({status}): wrong, revoked, or without jobs:read",
                        input_problem=True,
                    ) from None
                if status == 429:
                    raise WatchRefused(
                        "the tenant holds as many feed connections as it may (429)", input_problem=False
                    ) from None
                failures += 1
                self._give_up_after(failures, f"the feed answered {status}")
            except (ConnectionClosed, OSError, TimeoutError) as error:
                if self._closed:
                    return
                failures += 1
                self._give_up_after(failures, f"{type(error).__name__}: {error}")
            finally:
                self.connection = None
            if self._closed or self.finished:
                return
            self.on_note(f"connection lost; resuming after #{self.cursor}")
            self.sleep(self.reconnect_wait * min(failures, 5))

    def close(self) -> None:
        """Stops the watch (from another thread, or a signal handler)."""
        self._closed = True
        if self.connection is not None:
            self.connection.close()

    def _give_up_after(self, failures: int, why: str) -> None:
        if failures > self.reconnects:
            raise FeedLost(f"the feed at {self.url} is unreachable after {failures} tries: {why}")

    def _subscription(self) -> dict[str, Any]:
        message: dict[str, Any] = {"action": "subscribe", "cursor": self.cursor}
        if self.job_ids and not self._whole_feed:
            message["job_ids"] = list(self.job_ids)
        return message

    def _handle(self, message: dict[str, Any]) -> None:
        kind = message.get("type")
        if kind == "subscribed":
            self.cursor = message["cursor"]
            if self._whole_feed:
                self._replay_until = max(self._replay_until or 0, message["latest"])
            if not self._snapshots_taken:
                self._snapshots_taken = True
                self._take_snapshots()
            self._after_replay()
        elif kind == "job.state_changed":
            self.cursor = message["sequence"]
            self._change(message)
            self._after_replay()
        elif kind == "resync":
            # Changes were missed: the feed goes on after `latest`; the named jobs are read again.
            self.cursor = message["latest"]
            self._replay_until = None
            self.on_change(message)
            self._snapshots_taken = True
            self._take_snapshots()
            self._after_replay()
        elif kind == "error":
            status = int(message.get("status") or 400)
            said = f"{message.get('title')}: {message.get('detail')}"
            raise WatchRefused(
                f"the feed refused the subscription ({status}): {said}", input_problem=400 <= status < 500
            )

    def _change(self, message: dict[str, Any]) -> None:
        job = str(message["job_id"])
        if self.job_ids and job not in self.job_ids:
            return
        if message["state_version"] <= self._seen.get(job, 0):
            return  # already handled (from a snapshot, or before a reconnect)
        self._seen[job] = message["state_version"]
        self.on_change(message)
        if self._is_done(message["state"]):
            self._done.add(job)

    def _take_snapshots(self) -> None:
        if self.snapshot is None:
            return
        for job in self.job_ids:
            if job not in self._done:
                self._pending[job] = self.snapshot(job)

    def _after_replay(self) -> None:
        """Applies the snapshots once the replay is over: at once, unless the whole feed is replaying."""
        replaying = self._replay_until is not None and (self.cursor or 0) < self._replay_until
        if replaying:
            return
        for job, view in list(self._pending.items()):
            del self._pending[job]
            if view["state_version"] <= self._seen.get(job, 0):
                continue
            self._seen[job] = view["state_version"]
            self.on_change(
                {
                    "type": "job.snapshot",
                    "job_id": job,
                    "job_type": view.get("job_type"),
                    "state": view["state"],
                    "state_version": view["state_version"],
                    "occurred_at": view.get("updated_at"),
                }
            )
            if self._is_done(view["state"]):
                self._done.add(job)

    def _is_done(self, state: str) -> bool:
        return state in (FINAL if self.through_review else FINISHED)
