"""The live notifications' SQS FIFO queue and its FIFO dead-letter queue
(``tollgate-<stage>-notifications.fifo``, ``...-notifications-dlq.fifo``): the relay sends
``job.state_changed.v1`` there, the notifier consumes it."""

from __future__ import annotations

import aws_cdk as cdk
from constructs import Construct

from stacks.config import StageConfig
from stacks.constructs.fifo_pair import add_fifo_pair

# A message only says "this tenant has events up to seq n"; the notifier reads the events themselves from
# PostgreSQL, so a message older than the replay window (at most a day by default) has nothing left to say.
MESSAGE_RETENTION = cdk.Duration.days(1)
# Receives of one message before it moves to the DLQ: a message that keeps failing means the notifier does
# (the database or the management API out of reach), and the tenant's next event catches its connections up.
MAX_RECEIVE_COUNT = 5
# The notifier's timeout (NotificationsStack), here beside the queue whose visibility must cover it: Lambda's
# SQS event source wants six times the function's timeout, so a batch that is retried after a throttled or
# failed invocation is not received a second time while the first one still runs.
NOTIFIER_TIMEOUT = cdk.Duration.seconds(30)
VISIBILITY_TIMEOUT = cdk.Duration.seconds(6 * NOTIFIER_TIMEOUT.to_seconds())


class NotificationQueue(Construct):
    """Exposes ``queue`` (the relay sends to it, the notifier consumes it) and ``dead_letters``
    (ObservabilityStack alarms on its depth)."""

    def __init__(self, scope: Construct, construct_id: str, *, config: StageConfig) -> None:
        super().__init__(scope, construct_id)
        self.queue, self.dead_letters = add_fifo_pair(
            self,
            name=f"tollgate-{config.stage}-notifications",
            config=config,
            visibility_timeout=VISIBILITY_TIMEOUT,
            retention_period=MESSAGE_RETENTION,
            max_receive_count=MAX_RECEIVE_COUNT,
        )
