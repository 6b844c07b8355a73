"""The ports the local system listens on: checked before anything starts, so that a taken port is one line
naming it rather than a traceback once PostgreSQL has started and the migrations have run.

A port can still be taken between the check and the bind; ``binding`` turns that failure into the same
exception, naming the port, so the command that started the system can say so in one line too.
"""

from __future__ import annotations

import errno
import socket
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

HOST = "127.0.0.1"


@dataclass(frozen=True)
class PortProblem:
    """Why one listener cannot have its port. ``name`` is the field that asks for it (``port``, ``erp_port``);
    ``clashes_with`` the field that asks for the same port first, if that is the problem."""

    name: str
    port: int
    reason: str  # "is in use", "cannot be used (Permission denied)", "is asked for twice"
    clashes_with: str | None = None


class PortsUnavailable(Exception):
    """Some ports cannot be bound. ``started`` says whether the system had started pieces already (a port
    taken after the check), which were stopped."""

    def __init__(self, problems: list[PortProblem], *, started: bool) -> None:
        self.problems = problems
        self.started = started
        super().__init__("; ".join(f"port {p.port} ({p.name}) {p.reason}" for p in problems))


def _reason(error: OSError) -> str:
    return "is in use" if error.errno == errno.EADDRINUSE else f"cannot be used ({error.strerror})"


def port_problem(port: int, host: str = HOST) -> str | None:
    """Why ``port`` cannot be bound on ``host`` now, or None. It binds as the servers do (SO_REUSEADDR, which
    socketserver and websockets set), so a port only in TIME_WAIT counts as free and one that something
    listens on does not."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as error:
            return _reason(error)
    return None


def check_ports(ports: Mapping[str, int], host: str = HOST) -> list[PortProblem]:
    """Every problem with the fixed ports in ``ports`` (name to port; 0 means any free port and is never a
    problem): the same port asked for twice, or a port that cannot be bound now."""
    problems = []
    first_asker: dict[int, str] = {}
    for name, port in ports.items():
        if not port:
            continue
        if port in first_asker:
            problems.append(PortProblem(name, port, "is asked for twice", clashes_with=first_asker[port]))
            continue
        first_asker[port] = name
        if (reason := port_problem(port, host)) is not None:
            problems.append(PortProblem(name, port, reason))
    return problems


@contextmanager
def binding(name: str, port: int) -> Iterator[None]:
    """Runs a bind of ``port``; a failure to bind it (taken since the check) becomes PortsUnavailable."""
    try:
        yield
    except OSError as error:
        if error.errno not in (errno.EADDRINUSE, errno.EACCES, errno.EADDRNOTAVAIL):
            raise
        raise PortsUnavailable([PortProblem(name, port, _reason(error))], started=True) from error
