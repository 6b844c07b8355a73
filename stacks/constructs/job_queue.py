"""A job type's SQS FIFO queue and its FIFO dead-letter queue, named for the stage and the type's queue
(``tollgate-<stage>-<queue>.fifo``, ``tollgate-<stage>-<queue>-dlq.fifo``)."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from stacks.config import StageConfig
from tollgate.jobtypes.base import JobType

DLQ_RETENTION = cdk.Duration.days(14)


def construct_name(job_type: JobType) -> str:
    """``invoice-extraction`` -> ``InvoiceExtraction``: the type's part of construct ids and output names."""
    return "".join(part.capitalize() for part in job_type.queue.split("-"))


class JobQueue(Construct):
    """Exposes ``queue`` (the relay sends to it, the worker consumes it) and ``dead_letters`` (support
    inspects and redrives it; ObservabilityStack alarms on its depth)."""

    def __init__(
        self, scope: Construct, construct_id: str, *, config: StageConfig, job_type: JobType
    ) -> None:
        super().__init__(scope, construct_id)
        self.job_type = job_type
        name = f"tollgate-{config.stage}-{job_type.queue}"
        # SQS-managed encryption: no key policy for the relay, the worker and the support CLI to share,
        # and messages carry event ids and routing data, never documents.
        self.dead_letters = sqs.Queue(
            self,
            "DeadLetters",
            queue_name=f"{name}-dlq.fifo",
            fifo=True,
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            retention_period=DLQ_RETENTION,
            removal_policy=config.cdk_removal_policy,
        )
        self.queue = sqs.Queue(
            self,
            "Queue",
            queue_name=f"{name}.fifo",
            fifo=True,
            # The relay sets MessageDeduplicationId to the event id, so a republished event is dropped.
            content_based_deduplication=False,
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            visibility_timeout=cdk.Duration.seconds(config.jobs_queue_visibility_seconds),
            # A signal nobody took in for the type's retention is not needed: the job is in PostgreSQL, where
            # the worker's own claim scans find it. Failed messages keep 14 days in the DLQ, whose clock
            # restarts on the move for FIFO queues.
            retention_period=cdk.Duration.days(job_type.message_retention_days),
            dead_letter_queue=sqs.DeadLetterQueue(
                queue=self.dead_letters, max_receive_count=config.jobs_queue_max_receive_count
            ),
            removal_policy=config.cdk_removal_policy,
        )
