"""The local system's patch of moto's SQS (keep_moto_sqs_sends_flat): the same answers as moto's own, FIFO
deduplication and redrive as before, and nothing left patched after its undo."""

from __future__ import annotations

import json
import secrets

import boto3
import pytest
from moto.sqs.models import Queue

from tollgate_dev.local.aws import (
    FlatAttributesProperty,
    check_flat_sends,
    create_jobs_queues,
    keep_moto_sqs_sends_flat,
)

pytestmark = pytest.mark.integration


@pytest.fixture
def flat_sends():
    """The patch for one test; afterwards moto is as it was (patched still, if a local system of the session
    holds the patch)."""
    original = Queue.__dict__["attributes"]
    undo = keep_moto_sqs_sends_flat()
    try:
        yield
    finally:
        undo()
    assert Queue.__dict__["attributes"] is original


def test_the_patch_answers_as_moto_does_and_its_undo_restores_moto(flat_sends):
    patched = Queue.__dict__["attributes"]
    assert isinstance(patched, FlatAttributesProperty), "moto's attribute property is replaced"
    check_flat_sends()
    assert keep_moto_sqs_sends_flat()() is None, "a second patch is a no-op, and so is its undo"
    assert Queue.__dict__["attributes"] is patched


def test_fifo_deduplication_and_the_dead_letter_queue_work_as_before(flat_sends, local_aws):
    sqs = boto3.client("sqs")
    queues = create_jobs_queues(f"flat-{secrets.token_hex(4)}", max_receive_count=1)
    for body in ("first", "again"):
        sqs.send_message(
            QueueUrl=queues.url, MessageBody=body, MessageGroupId="g", MessageDeduplicationId="one"
        )
    attributes = sqs.get_queue_attributes(QueueUrl=queues.url, AttributeNames=["All"])["Attributes"]
    assert attributes["ApproximateNumberOfMessages"] == "1", "the repeat was dropped"
    assert attributes["ContentBasedDeduplication"] == "false"
    assert json.loads(attributes["RedrivePolicy"])["maxReceiveCount"] == 1

    received = sqs.receive_message(QueueUrl=queues.url, VisibilityTimeout=0)["Messages"]
    assert [m["Body"] for m in received] == ["first"]
    assert "Messages" not in sqs.receive_message(QueueUrl=queues.url), "past maxReceiveCount: moved"
    moved = sqs.receive_message(QueueUrl=queues.dlq_url)["Messages"]
    assert [m["Body"] for m in moved] == ["first"]
