"""Local systems started one after another in one process (as the suite starts them) share one moto state,
whichever moto server serves it. Each system's queues, bus and budget table must still be its own: a job
message a stopped system left on its queue once reached the next system's workers, whose database did not
know the tenant, and every such message ended in the next system's dead-letter queue."""

from __future__ import annotations

import boto3
import pytest

pytestmark = pytest.mark.integration


def depth(queue_url: str) -> int:
    attributes = boto3.client("sqs").get_queue_attributes(
        QueueUrl=queue_url, AttributeNames=["ApproximateNumberOfMessages"]
    )["Attributes"]
    return int(attributes["ApproximateNumberOfMessages"])


def test_a_message_left_on_one_systems_queue_never_reaches_the_next_system(stack_factory):
    first = stack_factory()
    assert first.queues is not None
    left = first.queues["invoice_extraction"].url
    boto3.client("sqs").send_message(
        QueueUrl=left, MessageBody="{}", MessageGroupId="tenant", MessageDeduplicationId="left-behind"
    )
    first.stop()

    second = stack_factory()
    assert second.queues is not None
    assert {pair.url for pair in first.queues.values()}.isdisjoint(
        pair.url for pair in second.queues.values()
    ) and {pair.dlq_url for pair in first.queues.values()}.isdisjoint(
        pair.dlq_url for pair in second.queues.values()
    ), "each system has queues of its own"
    assert depth(left) == 1, "the message is still where the first system left it"
    assert all(depth(pair.url) == 0 and depth(pair.dlq_url) == 0 for pair in second.queues.values())
    assert first.limiter_table != second.limiter_table, "and a provider budget of its own"
    assert first.resource_prefix != second.resource_prefix
