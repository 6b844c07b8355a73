"""A job type's SQS FIFO queue and its FIFO dead-letter queue, named for the stage and the type's queue
(``tollgate-<stage>-<queue>.fifo``, ``tollgate-<stage>-<queue>-dlq.fifo``)."""

from __future__ import annotations

import aws_cdk as cdk
from constructs import Construct

from stacks.config import StageConfig
from stacks.constructs.fifo_pair import add_fifo_pair
from tollgate.jobtypes.base import JobType


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
        # A signal nobody took in for the type's retention is not needed: the job is in PostgreSQL, where the
        # worker's own claim scans find it. Failed messages keep 14 days in the DLQ, whose clock restarts on
        # the move for FIFO queues.
        self.queue, self.dead_letters = add_fifo_pair(
            self,
            name=f"tollgate-{config.stage}-{job_type.queue}",
            config=config,
            visibility_timeout=cdk.Duration.seconds(config.jobs_queue_visibility_seconds),
            retention_period=cdk.Duration.days(job_type.message_retention_days),
            max_receive_count=config.jobs_queue_max_receive_count,
        )
