"""The relay benchmark's AWS: a moto server in a process of its own, whose SQS send cost does not grow with
the number of messages already in the queue.

moto 5 answers every ``queue.attributes.get("ContentBasedDeduplication")`` by building the whole attribute
dict, and that dict includes three approximate message counts, each a scan of every message in the queue
with a clock read per message. It does this six times per message sent, so one SendMessageBatch of 10 into
a queue that holds 1,000 messages takes about a second here instead of a few milliseconds, and a benchmark
that relays thousands of events would measure that scan rather than the relay or the SQS call. Real SQS has
no such cost. This process answers that one attribute from the queue's own field; every other read of the
attributes, GetQueueAttributes included, still runs moto's code unchanged. FIFO deduplication still compares
each new message with every message in the queue, as moto does; that is a string comparison per message, and
the relay benchmark's drift column shows what it adds as the queue fills.

``python -m bench.relay_aws`` prints the endpoint URL on its first line and serves until SIGTERM.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator, Mapping
from typing import Any

from moto.sqs.models import Queue

from tollgate_dev.local.aws import LocalAws

FAST_ATTRIBUTE = "ContentBasedDeduplication"


class _QueueAttributes(Mapping[str, Any]):
    """moto's attribute dict, built only when something asks for more than the deduplication flag."""

    def __init__(self, queue: Any, build: Any) -> None:
        self._queue = queue
        self._build = build
        self._built: dict[str, Any] | None = None

    def _all(self) -> dict[str, Any]:
        if self._built is None:
            self._built = self._build(self._queue)
        return self._built

    def get(self, key: str, default: Any = None) -> Any:
        if key == FAST_ATTRIBUTE:
            # moto lists the flag for FIFO queues only, lower-cased like every boolean attribute it reports.
            if not self._queue.fifo_queue:
                return default
            value = self._queue.content_based_deduplication
            return str(value).lower() if isinstance(value, bool) else value
        return self._all().get(key, default)

    def __getitem__(self, key: str) -> Any:
        return self._all()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())


def keep_sends_independent_of_depth() -> None:
    # The property object itself, from the class dict: its getter is moto's own attribute builder.
    build = Queue.__dict__["attributes"].fget
    Queue.attributes = property(lambda queue: _QueueAttributes(queue, build))  # type: ignore[assignment,method-assign]


def check_equivalence() -> None:
    """The shortcut must say what moto says, for both kinds of queue and both settings of the flag."""
    samples = [
        Queue("check-std", "eu-west-1", "000000000000"),
        Queue("check.fifo", "eu-west-1", "000000000000", FifoQueue="true"),
        Queue(
            "check-cbd.fifo", "eu-west-1", "000000000000", FifoQueue="true", ContentBasedDeduplication="true"
        ),
    ]
    for queue in samples:
        fast = queue.attributes.get(FAST_ATTRIBUTE)
        full = dict(queue.attributes.items()).get(FAST_ATTRIBUTE)
        if fast != full:
            raise RuntimeError(f"{queue.name}: shortcut says {fast!r}, moto says {full!r}")


def main() -> int:
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    keep_sends_independent_of_depth()
    check_equivalence()
    aws = LocalAws()
    endpoint = aws.start()
    print(endpoint, flush=True)
    stop.wait()
    aws.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
