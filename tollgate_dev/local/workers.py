"""Worker processes' loops, run in threads of the local system: each thread is one worker with its own
asyncio loop, exactly as ``worker/main.py`` runs in a container."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Sequence

from tollgate.core.observability import log_context
from tollgate.execution.attempt import ExecutionDeps
from tollgate.execution.batch.deps import BatchDeps
from tollgate.execution.worker import WorkerConfig, run_worker
from tollgate.ingress.consumer import IngressDeps


class WorkerThread:
    def __init__(
        self,
        name: str,
        ingress: Sequence[IngressDeps],
        execution: ExecutionDeps,
        config: WorkerConfig,
        on_activity: Callable[[], None],
        *,
        batch: BatchDeps | None = None,
    ) -> None:
        self.name = name
        self._args = (ingress, execution, config)
        self._batch = batch
        self._on_activity = on_activity
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), name=name, daemon=True)

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        self._ready.set()
        # Its tasks and the threads they start inherit the key: every line says which worker wrote it.
        with log_context(component=self.name):
            await run_worker(*self._args, stop=self._stop, on_activity=self._on_activity, batch=self._batch)

    def start(self) -> None:
        self._thread.start()
        self._ready.wait()

    def stop(self) -> None:
        """Like SIGTERM: stop claiming, let in-flight attempts drain, hand back what is left."""
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join()
