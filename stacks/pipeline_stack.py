"""PipelineStack: the job signal path, from committed outbox rows to the job types' queues the worker reads.

It owns a FIFO queue and a dead-letter queue per registered job type, the live notifications' FIFO queue and
its DLQ, and the outbox relay and scheduler Lambdas with their one-minute schedules. The alarms on a stuck
pipeline watch these from ObservabilityStack.
"""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_secretsmanager as secretsmanager
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from stacks.config import StageConfig, settings_environment
from stacks.constructs.documents_access import DocumentsRetentionAccess, ExportedDocumentsBucket
from stacks.constructs.entrypoint_function import EntrypointFunction
from stacks.constructs.job_queue import JobQueue, construct_name
from stacks.constructs.lambda_packaging import DependenciesLayer, function_code, lambda_database_environment
from stacks.constructs.notification_queue import NotificationQueue
from tollgate.jobtypes.registry import JOB_TYPES


class PipelineStack(cdk.Stack):
    """Exposes ``job_queues`` (a queue and DLQ per job type, by type name: the worker consumes the queues,
    ObservabilityStack alarms on the DLQs' depth), ``notifications`` (the relay sends job state changes there,
    NotificationsStack's notifier consumes them) and ``relay_function`` (the API nudges it)."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: StageConfig,
        vpc: ec2.IVpc,
        database_endpoint: str,
        database_secret: secretsmanager.ISecret,
        database_clients: ec2.ISecurityGroup,
        webhook_state_machine: sfn.IStateMachine,
        documents_bucket: ExportedDocumentsBucket,
        results_bus: events.IEventBus,
        results_event_source: str,
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, construct_id, env=config.environment, **kwargs)
        self.config = config
        self.job_queues: dict[str, JobQueue] = {
            name: JobQueue(self, f"{construct_name(job_type)}Jobs", config=config, job_type=job_type)
            for name, job_type in JOB_TYPES.items()
        }
        # Here with the job queues rather than in NotificationsStack: the relay sends to it, and that stack
        # deploys after Api (its WebSocket stage logs through the account setting Api makes), which itself
        # needs the relay; the notifier only consumes it, which points the reference the deploy order's way.
        self.notifications = NotificationQueue(self, "Notifications", config=config)

        code = function_code()
        layer = DependenciesLayer(self, "Dependencies", layer_dir=config.layer_dir).layer
        common: dict[str, Any] = {
            "config": config,
            "code": code,
            "layer": layer,
            "vpc": vpc,
            "security_groups": [database_clients],
        }
        # Both functions work across tenants; DatabaseSettings' role default for them is tollgate_system.
        database_environment = lambda_database_environment(
            config, database_secret.secret_arn, database_endpoint
        )

        self.relay = EntrypointFunction(
            self,
            "OutboxRelay",
            entrypoint="outbox_relay",
            description="Tollgate outbox relay: publishes committed events (nudged, and swept every minute)",
            environment={
                **database_environment,
                "JOB_QUEUE_URLS": self.to_json_string(
                    {name: pair.queue.queue_url for name, pair in self.job_queues.items()}
                ),
                # Webhook events go to DeliveryStack's dispatcher, one execution per delivery.
                "WEBHOOK_STATE_MACHINE_ARN": webhook_state_machine.state_machine_arn,
                # Outcome events also go to ResultsStack's bus, the public contract.
                "RESULTS_BUS_NAME": results_bus.event_bus_name,
                "RESULTS_EVENT_SOURCE": results_event_source,
                # Job state changes go to the live notifier (NotificationsStack) through this queue.
                "NOTIFICATIONS_QUEUE_URL": self.notifications.queue.queue_url,
                **settings_environment(config.relay),
            },
            # The run ends before the claim lease on its last batch does, so a timed-out run's rows come
            # back to the next run just when this one can no longer publish them.
            timeout=cdk.Duration.seconds(config.relay.relay_claim_seconds),
            **common,
        )
        self.relay_function: lambda_.IFunction = self.relay.function
        self.scheduler = EntrypointFunction(
            self,
            "Scheduler",
            entrypoint="scheduler",
            description=(
                "Tollgate scheduler: reaps leases, expires deadlines, restarts stalled deliveries, "
                "publishes backlog metrics, applies retention"
            ),
            environment={
                **database_environment,
                # Deliveries whose execution ended without delivering them are started again from here.
                "WEBHOOK_STATE_MACHINE_ARN": webhook_state_machine.state_machine_arn,
                # Retention archives finished jobs there and deletes document versions no job uses.
                "DOCUMENTS_BUCKET": documents_bucket.bucket_name,
                **settings_environment(config.retry),
                **settings_environment(config.scheduler),
                **settings_environment(config.retention),
            },
            # Within the one-minute tick, so ticks do not queue up behind a slow one.
            timeout=cdk.Duration.seconds(55),
            **common,
        )
        self._run_every_minute(config)
        for handler in (self.relay, self.scheduler):
            database_secret.grant_read(handler.function)
        for pair in self.job_queues.values():
            pair.queue.grant_send_messages(self.relay.function)
        self.notifications.queue.grant_send_messages(self.relay.function)
        results_bus.grant_put_events_to(self.relay.function)
        for starter in (self.relay, self.scheduler):
            webhook_state_machine.grant_start_execution(starter.function)
        scheduler_role = self.scheduler.function.role
        assert scheduler_role is not None
        DocumentsRetentionAccess(self, "Retention", documents_bucket=documents_bucket, role=scheduler_role)

        # The support CLI's `tollgate dlq` commands read and redrive these: JOB_QUEUE_URLS and JOB_DLQ_URLS.
        cdk.CfnOutput(
            self,
            "JobQueueUrls",
            value=self.to_json_string({name: pair.queue.queue_url for name, pair in self.job_queues.items()}),
        )
        cdk.CfnOutput(
            self,
            "JobDlqUrls",
            value=self.to_json_string(
                {name: pair.dead_letters.queue_url for name, pair in self.job_queues.items()}
            ),
        )
        cdk.CfnOutput(self, "RelayFunctionName", value=self.relay.function.function_name)

    def _run_every_minute(self, config: StageConfig) -> None:
        relay = self.relay.function.node.default_child
        scheduler = self.scheduler.function.node.default_child
        assert isinstance(relay, lambda_.CfnFunction)
        assert isinstance(scheduler, lambda_.CfnFunction)
        # Nudges arrive after every accepted job; a few relays at once keep the database calm, and each run
        # drains everything claimable anyway. Two ticks at once would be safe (SKIP LOCKED, fenced updates)
        # but only contend for the same rows. A stage setting of 0 reserves nothing (the property is left
        # out): to Lambda, a reservation of 0 would mean never running at all.
        relay.reserved_concurrent_executions = config.relay_reserved_concurrency or None
        scheduler.reserved_concurrent_executions = config.scheduler_reserved_concurrency or None

        for handler, what, source in (
            (self.relay, "sweeps the outbox", "tollgate.sweep"),
            (self.scheduler, "ticks the scheduler", "tollgate.tick"),
        ):
            # A throttled nudge or tick older than a minute is superseded by the next sweep or tick; keeping
            # it queued (Lambda would retry for six hours) would only pile up redundant runs.
            handler.function.configure_async_invoke(max_event_age=cdk.Duration.minutes(1), retry_attempts=0)
            events.Rule(
                handler,
                "EveryMinute",
                description=f"Tollgate {config.stage}: {what} {config.tick_words}",
                # Every minute unless the stage spaces ticks out so a pausing cluster can pause.
                schedule=config.tick_schedule,
                targets=[
                    targets.LambdaFunction(
                        handler.function, event=events.RuleTargetInput.from_object({"source": source})
                    )
                ],
            )
