"""The relay benchmark's AWS: a moto server in a process of its own, whose SQS send cost does not grow with
the number of messages already in the queue.

moto 5 scans every message in a queue several times per send (see keep_moto_sqs_sends_flat in
tollgate_dev.local.aws), and a benchmark that relays thousands of events would measure that scan rather than
the relay or the SQS call; this process applies the local system's fix for it. FIFO deduplication still
compares each new message with every message in the queue, as moto does; that is a string comparison per
message, and the relay benchmark's drift column shows what it adds as the queue fills.

``python -m bench.relay_aws`` prints the endpoint URL on its first line and serves until SIGTERM.
"""

from __future__ import annotations

import signal
import sys
import threading

from tollgate_dev.local.aws import LocalAws, check_flat_sends, keep_moto_sqs_sends_flat


def main() -> int:
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    keep_moto_sqs_sends_flat()
    check_flat_sends()
    aws = LocalAws()
    endpoint = aws.start()
    print(endpoint, flush=True)
    stop.wait()
    aws.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
