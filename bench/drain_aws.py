"""The drain benchmark's AWS: a moto server in a process of its own, so the workers' S3 and DynamoDB calls
do not queue behind the simulated provider and the job loader for one interpreter lock.

``python -m bench.drain_aws`` prints the endpoint URL on its first line and serves until SIGTERM. DynamoDB
requests are applied one at a time, as real DynamoDB applies each conditional write atomically.
"""

from __future__ import annotations

import signal
import sys
import threading

from tollgate_dev.local.aws import LocalAws, serialize_moto_dynamodb


def main() -> int:
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    aws = LocalAws()
    endpoint = aws.start()
    serialize_moto_dynamodb()
    print(endpoint, flush=True)
    stop.wait()
    aws.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
