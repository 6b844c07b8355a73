"""Wakes the outbox relay after a commit so events go out in milliseconds, not at the next sweep.

A nudge is only a hint: losing one delays publication until the relay's one-minute sweep, it never loses
an event (the event is already committed in the outbox).
"""

from __future__ import annotations

import json
import threading
from typing import TYPE_CHECKING, Protocol

from aws_lambda_powertools import Logger

if TYPE_CHECKING:
    from mypy_boto3_lambda import LambdaClient

logger = Logger(service="tollgate", child=True)


class Nudger(Protocol):
    def nudge(self) -> None: ...


class NoNudge:
    def nudge(self) -> None:
        return None


class LambdaNudger:
    """Invokes the relay function asynchronously (InvocationType=Event): the request does not wait."""

    def __init__(self, client: LambdaClient, function_name: str) -> None:
        self._lambda = client
        self._function_name = function_name

    def nudge(self) -> None:
        try:
            self._lambda.invoke(
                FunctionName=self._function_name,
                InvocationType="Event",
                Payload=json.dumps({"source": "tollgate.outbox.nudge"}).encode(),
            )
        except Exception:
            logger.warning("relay nudge failed; the sweep will publish", exc_info=True)


class EventNudger:
    """For a relay loop in this process: a nudge sets the event the loop waits on."""

    def __init__(self) -> None:
        self.event = threading.Event()

    def nudge(self) -> None:
        self.event.set()
