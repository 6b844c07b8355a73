"""ResultsStack: the results bus, Tollgate's public contract for job outcomes.

It owns the EventBridge bus ``tollgate-<stage>-results`` that the outbox relay publishes every outcome event
on, an archive of what was published there (so a consumer can be replayed), and an example subscriber: a
rule for every completed event whose target is an SQS queue with a dead-letter queue. Tenants' own rules
are written the same way, on the same bus.
"""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from stacks.config import StageConfig
from tollgate.events import EXTRACTION_COMPLETED

ARCHIVE_RETENTION = cdk.Duration.days(14)
SUBSCRIBER_RETENTION = cdk.Duration.days(4)
DLQ_RETENTION = cdk.Duration.days(14)


class ResultsStack(cdk.Stack):
    """Exposes ``bus`` (PipelineStack grants the relay PutEvents on it) and ``event_source`` (the source of
    every event the relay puts there, ``tollgate.<stage>``, which rules match on)."""

    def __init__(self, scope: Construct, construct_id: str, *, config: StageConfig, **kwargs: Any) -> None:
        super().__init__(scope, construct_id, env=config.environment, **kwargs)
        self.event_source = f"tollgate.{config.stage}"
        self.bus = events.EventBus(self, "Results", event_bus_name=f"tollgate-{config.stage}-results")
        # Archived events cost storage only; a consumer that lost its state can have a window replayed.
        self.bus.archive(
            "Archive",
            archive_name=f"tollgate-{config.stage}-results",
            description=f"Tollgate {config.stage}: every outcome event published on the results bus",
            event_pattern=events.EventPattern(source=[self.event_source]),
            retention=ARCHIVE_RETENTION,
        )
        self.completed_queue, self.completed_dead_letters = self._example_subscriber(config)

        cdk.CfnOutput(self, "ResultsBusName", value=self.bus.event_bus_name)
        cdk.CfnOutput(self, "ResultsBusArn", value=self.bus.event_bus_arn)
        cdk.CfnOutput(self, "CompletedResultsQueueUrl", value=self.completed_queue.queue_url)

    def _example_subscriber(self, config: StageConfig) -> tuple[sqs.Queue, sqs.Queue]:
        dead_letters = sqs.Queue(
            self,
            "CompletedResultsDeadLetters",
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            retention_period=DLQ_RETENTION,
            removal_policy=config.cdk_removal_policy,
        )
        queue = sqs.Queue(
            self,
            "CompletedResults",
            # SQS-managed encryption: EventBridge can send to it without a key policy of its own.
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            retention_period=SUBSCRIBER_RETENTION,
            dead_letter_queue=sqs.DeadLetterQueue(queue=dead_letters, max_receive_count=5),
            removal_policy=config.cdk_removal_policy,
        )
        events.Rule(
            self,
            "Completed",
            event_bus=self.bus,
            description=f"Tollgate {config.stage}: example subscriber, every completed job to a queue",
            event_pattern=events.EventPattern(source=[self.event_source], detail_type=[EXTRACTION_COMPLETED]),
            targets=[
                # What EventBridge cannot deliver after its retries lands in the dead-letter queue too.
                targets.SqsQueue(queue, dead_letter_queue=dead_letters, retry_attempts=8)
            ],
        )
        return queue, dead_letters
