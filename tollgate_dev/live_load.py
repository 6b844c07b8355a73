"""Many live notification clients in one process, for the scale test: ``TOLLGATE_API_KEY=... python -m
tollgate_dev.live_load URL --clients 50 --expect 2000`` (the key from the environment, never the command
line). Each client connects with the key, subscribes from the tenant's latest event and counts the job
state changes it gets until it has ``--expect`` of them (or the time runs out). One asyncio
loop holds every client, in a process of its own, so the clients do not compete with the server under test
for its interpreter. Prints ``ready`` once every client is subscribed, then one JSON object: per client, the
count, whether the sequence numbers came gap-free and in order, and the seconds from ready to its last one."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from typing import Any

from websockets.asyncio.client import connect


async def _client(
    url: str, key: str, expect: int, subscribed: asyncio.Event, counter: list[int]
) -> dict[str, Any]:
    async with connect(
        url, additional_headers={"Authorization": f"Bearer {key}"}, compression=None
    ) as socket:
        await socket.send(json.dumps({"action": "subscribe"}))
        first = json.loads(await socket.recv())
        if first.get("type") != "subscribed":
            return {"error": f"not subscribed: {first}"}
        counter[0] += 1
        if counter[0] == counter[1]:
            subscribed.set()
        position, count, in_order, started = first["cursor"], 0, True, time.monotonic()
        while count < expect:
            message = json.loads(await socket.recv())
            if message.get("type") != "job.state_changed":
                return {"error": f"unexpected {message}", "count": count}
            in_order = in_order and message["sequence"] == position + 1
            position = message["sequence"]
            count += 1
        return {"count": count, "in_order": in_order, "last": position, "seconds": time.monotonic() - started}


async def listen(url: str, key: str, clients: int, expect: int, timeout: float) -> dict[str, Any]:
    subscribed = asyncio.Event()
    counter = [0, clients]
    tasks = [asyncio.create_task(_client(url, key, expect, subscribed, counter)) for _ in range(clients)]
    await asyncio.wait_for(subscribed.wait(), timeout)
    print("ready", flush=True)
    done, pending = await asyncio.wait(tasks, timeout=timeout)
    for task in pending:
        task.cancel()
    results = [
        task.result() if task in done and not task.exception() else {"error": "timed out"} for task in tasks
    ]
    return {"clients": results}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("url")
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--expect", type=int, required=True)
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args(argv)
    key = os.environ.get("TOLLGATE_API_KEY")
    if not key:
        parser.error("set TOLLGATE_API_KEY to the tenant's API key")
    result = asyncio.run(listen(args.url, key, args.clients, args.expect, args.timeout))
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
