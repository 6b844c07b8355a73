"""The chaos run's worker and relay processes: started from the real entrypoints with an environment, as
ECS and Lambda would start them, watched, and restarted when they die.

A crash point ends its process with exit status 137 (``os._exit``), the status of a kill -9; that is how
the fleet tells an injected crash from a surprise, which it records for the report.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from tollgate.settings import REPO_ROOT

CRASH_STATUS = 137
WORKER_MODULE = "worker.main"
RELAY_MODULE = "tollgate.chaos.relay"


@dataclass
class Member:
    name: str
    module: str
    crashpoint: str | None
    process: subprocess.Popen[bytes]
    log: IO[bytes]
    # Stopped by the fleet on purpose (to re-arm it, or at the end): its exit is no surprise.
    retiring: bool = False


@dataclass
class Fleet:
    """Worker processes (``python -m worker.main``) and one relay process, with their logs in ``logs_dir``."""

    logs_dir: Path
    worker_env: Mapping[str, str]
    relay_env: Mapping[str, str]
    # When (time.monotonic) each crash point ended its process, in order.
    crash_times: dict[str, list[float]] = field(default_factory=dict)
    surprises: list[str] = field(default_factory=list)
    _members: dict[str, Member] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stopping: bool = False
    _relay_generation: int = 0
    _relay_armed: str | None = None

    def start_worker(self, name: str, crashpoint: str | None = None, **settings: str) -> None:
        self._start(name, WORKER_MODULE, {**self.worker_env, **settings}, crashpoint, WORKER_ID=name)

    def start_relay(self) -> None:
        with self._lock:
            crashpoint, self._relay_armed = self._relay_armed, None
            self._relay_generation += 1
            name = f"relay-{self._relay_generation}"
        self._start(name, RELAY_MODULE, dict(self.relay_env), crashpoint)

    def arm_relay(self, crashpoint: str) -> None:
        """Replaces the running relay by one that dies at ``crashpoint`` (the next relay is a healthy one)."""
        with self._lock:
            self._relay_armed = crashpoint
            current = [m for m in self._members.values() if m.module == RELAY_MODULE]
            for member in current:
                member.retiring = True
        for member in current:
            member.process.send_signal(signal.SIGTERM)

    def armed_pending(self) -> bool:
        """Whether a process armed with a crash point is running (or armed to start) and has not met it."""
        with self._lock:
            return self._relay_armed is not None or any(m.crashpoint for m in self._members.values())

    def alive(self, prefix: str = "") -> list[str]:
        with self._lock:
            return [name for name, m in self._members.items() if name.startswith(prefix)]

    def retire(self, name: str) -> None:
        """Stops one member gracefully (SIGTERM: a worker drains, a relay finishes its sweep)."""
        with self._lock:
            member = self._members.get(name)
            if member is None:
                return
            member.retiring = True
        member.process.send_signal(signal.SIGTERM)

    def stop(self, timeout: float) -> None:
        with self._lock:
            self._stopping = True
            members = list(self._members.values())
        for member in members:
            member.retiring = True
            member.process.send_signal(signal.SIGTERM)
        for member in members:
            try:
                member.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.surprises.append(f"{member.name} did not stop within {timeout:.0f} s; killed")
                member.process.kill()
                member.process.wait()

    def _start(
        self, name: str, module: str, env: dict[str, str], crashpoint: str | None, **extra: str
    ) -> None:
        env.update(extra)
        env["CRASHPOINTS"] = json.dumps([crashpoint] if crashpoint else [])
        # The worker entrypoint lives beside the package, as in the container image.
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
        with self._lock:
            if self._stopping:
                return
            log = (self.logs_dir / f"{name}.log").open("ab")
            process = subprocess.Popen(  # noqa: S603 - our own interpreter and module, no shell
                [sys.executable, "-m", module],
                cwd=REPO_ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
            member = Member(name, module, crashpoint, process, log)
            self._members[name] = member
        threading.Thread(target=self._watch, args=(member,), name=f"watch-{name}", daemon=True).start()

    def _watch(self, member: Member) -> None:
        status = member.process.wait()
        member.log.close()
        with self._lock:
            self._members.pop(member.name, None)
            stopping = self._stopping
            if status == CRASH_STATUS and member.crashpoint:
                self.crash_times.setdefault(member.crashpoint, []).append(time.monotonic())
            elif not member.retiring:
                self.surprises.append(f"{member.name} exited with status {status}")
        if stopping:
            return
        if member.module == RELAY_MODULE:
            self.start_relay()  # there is always one relay; a crashed or re-armed one is replaced
        elif member.crashpoint is None and not member.retiring:
            self.start_worker(member.name)  # ECS replaces a task that died
