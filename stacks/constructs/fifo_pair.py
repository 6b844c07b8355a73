"""An SQS FIFO queue with its FIFO dead-letter queue (``<name>.fifo``, ``<name>-dlq.fifo``), as every queue of
the system is made: SQS-managed encryption, TLS only, deduplication by the sender's id, failed messages kept
14 days. The job queues and the notifications queue differ only in their name, visibility, retention and
receives before the DLQ."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from stacks.config import StageConfig

DLQ_RETENTION = cdk.Duration.days(14)


def add_fifo_pair(
    scope: Construct,
    *,
    name: str,
    config: StageConfig,
    visibility_timeout: cdk.Duration,
    retention_period: cdk.Duration,
    max_receive_count: int,
) -> tuple[sqs.Queue, sqs.Queue]:
    """Adds ``DeadLetters`` and ``Queue`` to ``scope`` (their construct ids, so logical ids stay as they
    were); returns (queue, dead letters). SQS-managed encryption: no key policy for the relay, the workers,
    the notifier and the support CLI to share, and messages carry ids and routing data, never documents."""
    dead_letters = sqs.Queue(
        scope,
        "DeadLetters",
        queue_name=f"{name}-dlq.fifo",
        fifo=True,
        encryption=sqs.QueueEncryption.SQS_MANAGED,
        enforce_ssl=True,
        retention_period=DLQ_RETENTION,
        removal_policy=config.cdk_removal_policy,
    )
    queue = sqs.Queue(
        scope,
        "Queue",
        queue_name=f"{name}.fifo",
        fifo=True,
        # The relay sets MessageDeduplicationId to the event id, so a republished event is dropped.
        content_based_deduplication=False,
        encryption=sqs.QueueEncryption.SQS_MANAGED,
        enforce_ssl=True,
        visibility_timeout=visibility_timeout,
        retention_period=retention_period,
        dead_letter_queue=sqs.DeadLetterQueue(queue=dead_letters, max_receive_count=max_receive_count),
        removal_policy=config.cdk_removal_policy,
    )
    return queue, dead_letters
