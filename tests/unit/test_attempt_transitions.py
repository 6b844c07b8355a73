"""Finishing an attempt checks the job's move against the state machine before it writes anything: a bug
that picks a target the machine does not have stops there, instead of reaching the database."""

from __future__ import annotations

from contextlib import AbstractContextManager
from datetime import timedelta
from typing import Any
from uuid import UUID, uuid4

import pytest

from tollgate.core.clock import FakeClock, SystemClock, new_id
from tollgate.core.job_states import IllegalTransition, JobState
from tollgate.core.retry import RetryPolicy
from tollgate.db import load_queries
from tollgate.execution import attempt
from tollgate.execution.attempt import ExecutionDeps, ModelRouter
from tollgate.execution.leasing import ClaimedJob
from tollgate.execution.llm.client import LlmResult, OutcomeClass, Task


class WriteNothingDatabase:
    """The project's queries, and no transaction: opening one means the use case got as far as writing."""

    q = load_queries()

    def transaction(self, tenant_id: UUID | None = None) -> AbstractContextManager[Any]:
        raise AssertionError("a transaction was opened for a move the state machine refuses")


def running_job(clock: FakeClock) -> ClaimedJob:
    return ClaimedJob(
        job_id=uuid4(),
        tenant_id=uuid4(),
        attempt=1,
        max_attempts=3,
        fence=1,
        deadline_at=clock.now() + timedelta(hours=1),
        document_id=uuid4(),
        model_policy="auto",
        estimated_tokens=100,
        trace_context=None,
        state_version=2,
        job_type="invoice_extraction",
        options={},
        model_escalated=False,
        service_tier="normal",
        batch_offers=0,
    )


def test_finishing_a_running_job_into_ready_is_refused_before_anything_is_written(monkeypatch):
    # Given a claimed (RUNNING) job whose outcome, by a bug, would send it back to READY.
    clock = FakeClock(SystemClock().now())
    deps = ExecutionDeps(
        db=WriteNothingDatabase(),
        # Never reached: the outcome below is already decided, and finishing calls none of them.
        documents=None,
        llm=None,
        limiter=None,
        clock=clock,
        new_id=new_id,
        retry_policy=RetryPolicy(),
        jitter=lambda low, high: high,
        router=ModelRouter("small-model", "large-model", escalate=False),
        prices={},
        worker_id="worker-a",
        provider_pool="test",
        lease_seconds=60,
        heartbeat_seconds=20,
        max_output_tokens=1000,
    )
    monkeypatch.setattr(attempt, "_decide", lambda *args, **kwargs: (JobState.READY, None, None))

    # When the attempt finishes, then the move is refused and no transaction was opened.
    with pytest.raises(IllegalTransition, match="from RUNNING to READY"):
        attempt._finish(
            deps, running_job(clock), Task.invoice(()), LlmResult(OutcomeClass.TRANSIENT, "small-model")
        )
