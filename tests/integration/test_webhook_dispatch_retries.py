"""The dispatcher state machine retries an attempt that failed inside the Lambda (PostgreSQL restarting, say)
instead of ending the execution and leaving its delivery PENDING for good; found by the chaos run."""

from __future__ import annotations

import json
import secrets
import threading
from uuid import uuid4

import boto3
import psycopg
import pytest

from tollgate_dev.local.stepfunctions import create_dispatcher, release_dispatcher

pytestmark = pytest.mark.integration


def test_an_attempt_that_raised_is_tried_again_by_the_state_machine(local_aws):
    calls: list[dict[str, str]] = []
    changed = threading.Condition()

    def attempt(payload: dict[str, str]) -> dict[str, object]:
        with changed:
            calls.append(payload)
            changed.notify_all()
            if len(calls) == 1:
                raise psycopg.OperationalError("terminating connection due to administrator command")
        return {"outcome": "delivered", "wait_seconds": 0, "attempt": 1}

    arn = create_dispatcher(attempt, suffix=f"-{secrets.token_hex(4)}")
    delivery_id = str(uuid4())
    try:
        boto3.client("stepfunctions").start_execution(
            stateMachineArn=arn, name=delivery_id, input=json.dumps({"delivery_id": delivery_id})
        )
        with changed:
            # Bounds moto's state machine on a loaded machine; it runs out only when the retry never comes.
            retried = changed.wait_for(lambda: len(calls) >= 2, timeout=120)
    finally:
        release_dispatcher(arn)

    assert retried, "the execution ended with the attempt's error instead of trying again"
    assert calls == [{"delivery_id": delivery_id}] * 2
