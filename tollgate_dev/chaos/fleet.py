"""The chaos run's worker and relay processes: started from the real entrypoints with an environment, as
ECS and Lambda would start them, watched, and restarted when they die.

Every process shares one folder of crash tokens. Arming a crash point drops a token there; the next process
to meet that point, whichever it is, takes the token and ends with exit status 137 (``os._exit``), the status
of a kill -9. A crash therefore needs no process of its own, started late on a busy machine and starved of
work by its healthy peers: it happens on the next piece of work that passes the point. The fleet tells an
injected crash (status 137 and a token taken by that process) from a surprise, which it records for the
report.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from tollgate.settings import REPO_ROOT
from tollgate_dev.faults import CRASH_STATUS, TAKEN, taken_name, token_name

WORKER_MODULE = "tollgate_dev.worker"
RELAY_MODULE = "tollgate_dev.chaos.relay"
# The line each entrypoint logs once it is about to take work (its settings read, its clients built).
STARTED_LINES = {WORKER_MODULE: b'"message":"worker started"', RELAY_MODULE: b'"message":"relay started"'}


@dataclass
class Member:
    name: str
    module: str
    process: subprocess.Popen[bytes]
    log: IO[bytes]
    log_path: Path
    log_offset: int  # where this process's lines start in its log (a restarted member appends)
    # Stopped by the fleet on purpose (at the end): its exit is no surprise.
    retiring: bool = False


@dataclass(frozen=True)
class Crash:
    """A process that took a crash token and died at its crash point."""

    token: str
    member: str
    at: float  # time.monotonic() when the fleet saw it exit


@dataclass
class Fleet:
    """Worker processes (``python -m tollgate_dev.worker``) and one relay process, with their logs in
    ``logs_dir`` and their crash tokens in ``tokens_dir``."""

    logs_dir: Path
    tokens_dir: Path
    worker_env: Mapping[str, str]
    relay_env: Mapping[str, str]
    clock: Callable[[], float] = time.monotonic
    surprises: list[str] = field(default_factory=list)
    _crashes: dict[str, Crash] = field(default_factory=dict)
    _members: dict[str, Member] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stopping: bool = False
    _relay_generation: int = 0
    _tokens_dropped: int = 0

    def __post_init__(self) -> None:
        shutil.rmtree(self.tokens_dir, ignore_errors=True)
        (self.tokens_dir / TAKEN).mkdir(parents=True)

    def start_worker(self, name: str) -> None:
        self._start(name, WORKER_MODULE, dict(self.worker_env), WORKER_ID=name)

    def start_relay(self) -> None:
        with self._lock:
            self._relay_generation += 1
            name = f"relay-{self._relay_generation}"
        self._start(name, RELAY_MODULE, dict(self.relay_env))

    def arm(self, crashpoint: str) -> str:
        """Drops a token for ``crashpoint``: the next process to meet it dies there. Returns the token."""
        with self._lock:
            self._tokens_dropped += 1
            token = token_name(crashpoint, self._tokens_dropped)
        # Written aside and renamed in, so no process can take a token that is half there.
        staging = self.tokens_dir / f".{token}"
        staging.touch()
        staging.rename(self.tokens_dir / token)
        return token

    def disarm(self, token: str) -> bool:
        """Takes a token back; False when a process took it first (then it crashed, or is about to)."""
        try:
            (self.tokens_dir / token).unlink()
        except FileNotFoundError:
            return False
        return True

    def crash(self, token: str) -> Crash | None:
        """The crash that took ``token``, once the process that took it has exited."""
        with self._lock:
            return self._crashes.get(token)

    def starting(self) -> list[str]:
        """The members that have not yet logged that they started."""
        with self._lock:
            members = list(self._members.values())
        return [
            m.name for m in members if not _logged_since(m.log_path, m.log_offset, STARTED_LINES[m.module])
        ]

    def alive(self, prefix: str = "") -> list[str]:
        with self._lock:
            return [name for name, m in self._members.items() if name.startswith(prefix)]

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

    def _start(self, name: str, module: str, env: dict[str, str], **extra: str) -> None:
        env.update(extra)
        env["CRASHPOINTS"] = json.dumps([])
        env["CRASH_TOKENS_DIR"] = str(self.tokens_dir)
        # The worker entrypoint lives beside the package, as in the container image.
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
        with self._lock:
            if self._stopping:
                return
            log_path = self.logs_dir / f"{name}.log"
            log = log_path.open("ab")
            process = subprocess.Popen(  # noqa: S603 - our own interpreter and module, no shell
                [sys.executable, "-m", module],
                cwd=REPO_ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
            member = Member(name, module, process, log, log_path, log.tell())
            self._members[name] = member
        threading.Thread(target=self._watch, args=(member,), name=f"watch-{name}", daemon=True).start()

    def _taken_by(self, pid: int) -> str | None:
        suffix = taken_name("", pid)
        with self._lock:
            known = set(self._crashes)
        for name in sorted(os.listdir(self.tokens_dir / TAKEN)):
            token = name.removesuffix(suffix)
            if name.endswith(suffix) and token not in known:  # a reused pid: the token not yet accounted for
                return token
        return None

    def _watch(self, member: Member) -> None:
        status = member.process.wait()
        member.log.close()
        token = self._taken_by(member.process.pid) if status == CRASH_STATUS else None
        with self._lock:
            self._members.pop(member.name, None)
            stopping = self._stopping
            if token is not None:
                self._crashes[token] = Crash(token, member.name, self.clock())
            elif not member.retiring:
                self.surprises.append(f"{member.name} exited with status {status}")
        if stopping or member.retiring:
            return
        # ECS replaces a task that died, and there is always one relay.
        if member.module == RELAY_MODULE:
            self.start_relay()
        else:
            self.start_worker(member.name)


def _logged_since(path: Path, offset: int, line: bytes) -> bool:
    try:
        with path.open("rb") as log:
            log.seek(offset)
            return line in log.read()
    except OSError:
        return False
