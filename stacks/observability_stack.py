"""ObservabilityStack: the stage's one alarm topic, every alarm, and the dashboard a person on call reads.

Deployed after every other stack and referenced by none: it only watches what they expose, so the stacks
that do the work never depend on how they are watched, and alarms can change without touching them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sqs as sqs
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from stacks.config import StageConfig
from stacks.constructs.alarm_topic import AlarmTopic
from stacks.constructs.backlog_metrics import (
    COUNTER_DRIFT,
    OLDEST_ELIGIBLE_JOB_AGE,
    OLDEST_OPEN_BATCH_AGE,
    OLDEST_UNPUBLISHED_OUTBOX_AGE,
    OLDEST_WAITING_REVIEW_AGE,
    OPEN_PROVIDER_BATCHES,
    REVIEW_DECISIONS,
    REVIEWS_WAITING,
    RUNNABLE_JOBS,
    RUNNING_JOBS,
    UNPUBLISHED_OUTBOX_EVENTS,
    WAITING_RETRIES,
    scheduler_count,
    scheduler_metric,
    time_to_decision,
)
from stacks.constructs.error_log_metric import ErrorLogMetric
from stacks.constructs.service_metrics import (
    BATCH_JOBS_RETURNED,
    BATCH_LINES_COMMITTED,
    BATCHES_ENDED,
    BATCHES_SUBMITTED,
    COUNT_PERIOD,
    DELIVERIES_GAVE_UP,
    DELIVERY_ATTEMPTS_FAILED,
    ENDPOINT_ALERTS,
    ENDPOINTS_DISABLED,
    EXTRACTIONS_VALIDATED,
    PROVIDER_CALLS,
    PROVIDER_THROTTLED,
    REVIEWS_REQUIRED,
    WEBHOOK_ATTEMPT_SERVICE,
    WEBHOOK_ENDPOINT_ALERTS,
    WORKER_ERRORS,
    WORKER_SERVICE,
    service_metric,
)
from tollgate.jobtypes.registry import JOB_TYPES

QUEUE_PERIOD = cdk.Duration.minutes(1)
# The jobs gauges come once a minute: three ticks in a row, so one slow or skipped tick pages nobody.
GAUGE_PERIODS = 3
# Five-minute periods of a high 429 share before paging: the adaptive rate settles well within them.
THROTTLING_PERIODS = 3
# The review rate is a share over hours of extractions, not minutes: a quiet minute's few reviews say little.
REVIEW_PERIOD = cdk.Duration.hours(1)
REVIEW_RATE_PERIODS = 3
RUNBOOK_SECTION = "README.md, section *Operations*, list *Runbook, by alarm*"

# Dashboard grid: 24 columns wide.
FULL, HALF, THIRD, QUARTER = 24, 12, 8, 6
GRAPH_HEIGHT = 6


class ObservabilityStack(cdk.Stack):
    """Exposes ``alarm_topic`` (every alarm notifies it), ``alarms`` and ``dashboard``."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: StageConfig,
        rest_api: apigw.RestApi,
        api_function: lambda_.IFunction,
        authorizer_function: lambda_.IFunction,
        scheduler_function: lambda_.IFunction,
        job_queues: Mapping[str, sqs.IQueue],
        dead_letter_queues: Mapping[str, sqs.IQueue],
        notifications_dead_letters: sqs.IQueue,
        worker_service: ecs.IBaseService,
        worker_logs: logs.ILogGroup,
        webhook_state_machine: sfn.IStateMachine,
        webhook_attempt_logs: logs.ILogGroup,
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, construct_id, env=config.environment, **kwargs)
        self.config = config
        self.alarm_topic = AlarmTopic(self, "Alarms", config=config)
        self.alarms: list[cloudwatch.Alarm] = []

        self.worker_errors = ErrorLogMetric(
            self, "WorkerErrors", log_group=worker_logs, metric_name=WORKER_ERRORS
        ).metric
        self.endpoint_alerts = ErrorLogMetric(
            self,
            "EndpointAlerts",
            log_group=webhook_attempt_logs,
            metric_name=WEBHOOK_ENDPOINT_ALERTS,
            alerts=ENDPOINT_ALERTS,
        ).metric
        self.provider_throttle_rate = cloudwatch.MathExpression(
            # No calls in a period is no data, not 0 %: an idle stage neither alarms nor looks healthy.
            expression="IF(calls > 0, 100 * FILL(throttled, 0) / calls)",
            using_metrics={
                "calls": service_metric(WORKER_SERVICE, PROVIDER_CALLS),
                "throttled": service_metric(WORKER_SERVICE, PROVIDER_THROTTLED),
            },
            period=COUNT_PERIOD,
            label="Answered 429 (%)",
        )
        self.review_rate = cloudwatch.MathExpression(
            # The share of validated results that went to review; no results in a period is no data.
            expression="IF(validated > 0, 100 * FILL(review, 0) / validated)",
            using_metrics={
                "validated": service_metric(WORKER_SERVICE, EXTRACTIONS_VALIDATED).with_(
                    period=REVIEW_PERIOD
                ),
                "review": service_metric(WORKER_SERVICE, REVIEWS_REQUIRED).with_(period=REVIEW_PERIOD),
            },
            period=REVIEW_PERIOD,
            label="Sent to review (%)",
        )

        self._api_alarms(rest_api)
        pipeline = self._pipeline_alarms(config, scheduler_function, job_queues, dead_letter_queues)
        pipeline["notifications_dead_letters"] = self._notifications_alarm(notifications_dead_letters)
        execution = self._jobs_alarms(config)
        delivery = self._delivery_alarms(config, webhook_state_machine)
        review = self._review_alarms(config)
        batch = self._batch_alarms(config)
        self.alarm_topic.notify(*self.alarms)

        # One per stage, named for it: dashboard names are unique per account, and so are stage names.
        dashboard_name = f"Tollgate-{config.stage}"
        self.dashboard = cloudwatch.Dashboard(self, "Dashboard", dashboard_name=dashboard_name)
        self._overview(config)
        self._api_row(rest_api, api_function, authorizer_function)
        self._pipeline_row(
            job_queues, {**dead_letter_queues, "notifications": notifications_dead_letters}, pipeline
        )
        self._jobs_row(config, worker_service, execution)
        self._provider_row(execution)
        self._delivery_row(webhook_state_machine, delivery)
        self._review_row(review)
        self._batch_row(batch)

        cdk.CfnOutput(self, "AlarmTopicArn", value=self.alarm_topic.topic.topic_arn)
        cdk.CfnOutput(
            self,
            "DashboardUrl",
            value=(
                f"https://{self.region}.console.aws.amazon.com/cloudwatch/home?region={self.region}"
                f"#dashboards/dashboard/{dashboard_name}"
            ),
        )

    def _alarm(
        self,
        name: str,
        *,
        description: str,
        metric: cloudwatch.IMetric,
        threshold: float,
        evaluation_periods: int = 1,
        missing: cloudwatch.TreatMissingData = cloudwatch.TreatMissingData.NOT_BREACHING,
    ) -> cloudwatch.Alarm:
        """An alarm above ``threshold`` that notifies the topic; named for the stage, so a notification says
        which stage it came from."""
        alarm = cloudwatch.Alarm(
            self,
            f"{name}Alarm",
            alarm_name=f"Tollgate-{self.config.stage}-{name}",
            alarm_description=description,
            metric=metric,
            threshold=threshold,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            evaluation_periods=evaluation_periods,
            treat_missing_data=missing,
        )
        self.alarms.append(alarm)
        return alarm

    def _api_alarms(self, rest_api: apigw.RestApi) -> None:
        self._alarm(
            "ApiServerErrors",
            description=(
                "The API answered 5xx: a fault (bad input gets a 4xx, never a 500), or admission's 503 "
                "because the whole backlog is beyond capacity. For a fault, the acceptance Lambda's log "
                "group holds the 'unhandled error' line with the tenant and request id; API Gateway's "
                "access log shows integration errors and timeouts."
            ),
            metric=rest_api.metric_server_error(period=COUNT_PERIOD, statistic=cloudwatch.Stats.SUM),
            threshold=0,
        )

    def _pipeline_alarms(
        self,
        config: StageConfig,
        scheduler_function: lambda_.IFunction,
        job_queues: Mapping[str, sqs.IQueue],
        dead_letter_queues: Mapping[str, sqs.IQueue],
    ) -> dict[str, cloudwatch.Alarm]:
        """The outbox's age, the scheduler's failures, and for each job type its queue's age
        (``queue_age:<type>``) and its DLQ's depth (``dead_letters:<type>``)."""
        alarms = {
            "outbox_age": self._alarm(
                "OutboxAge",
                description=(
                    f"Committed events wait more than {config.outbox_age_alarm_seconds} s for the outbox "
                    "relay. No data does not alarm: the gauge is absent until the scheduler's first tick "
                    "after a deploy, and a failing scheduler raises SchedulerErrors."
                ),
                metric=scheduler_metric(OLDEST_UNPUBLISHED_OUTBOX_AGE, period=self.config.tick_period),
                threshold=config.outbox_age_alarm_seconds,
                evaluation_periods=GAUGE_PERIODS,
            ),
            # The scheduler publishes every gauge above; its failing ticks are what silences them, and Lambda
            # counts those whether or not the tick got as far as publishing.
            "scheduler_errors": self._alarm(
                "SchedulerErrors",
                description=(
                    f"The scheduler's tick failed {GAUGE_PERIODS} minutes in a row: leases are not reaped, "
                    "deadlines not expired, stalled deliveries not restarted, and the backlog gauges (and "
                    "the alarms on them) go silent. Its log group holds the error; PostgreSQL or Secrets "
                    "Manager out of reach are the usual causes."
                ),
                metric=scheduler_function.metric_errors(period=QUEUE_PERIOD, statistic=cloudwatch.Stats.SUM),
                threshold=0,
                evaluation_periods=GAUGE_PERIODS,
            ),
        }
        # Named <alarm>-<queue> (JobsQueueAge-invoice-extraction): the runbook's entry for the alarm applies
        # to every type's.
        for job_type, queue in job_queues.items():
            alarms[f"queue_age:{job_type}"] = self._alarm(
                f"JobsQueueAge-{JOB_TYPES[job_type].queue}",
                description=(
                    f"A message on the {job_type} queue waited more than "
                    f"{config.jobs_queue_age_alarm_seconds} s for the worker's ingress: workers are down, "
                    "cannot reach PostgreSQL, or keep failing it."
                ),
                metric=queue.metric_approximate_age_of_oldest_message(
                    period=QUEUE_PERIOD, statistic=cloudwatch.Stats.MAXIMUM
                ),
                threshold=config.jobs_queue_age_alarm_seconds,
            )
        for job_type, dead_letters in dead_letter_queues.items():
            alarms[f"dead_letters:{job_type}"] = self._alarm(
                f"DeadLetters-{JOB_TYPES[job_type].queue}",
                description=(
                    f"A message of the {job_type} queue failed ingress too often and is in that type's "
                    f"dead-letter queue. Inspect and redrive it with `tollgate dlq list|redrive --job-type "
                    f"{job_type}`; the job itself is still in PostgreSQL."
                ),
                metric=dead_letters.metric_approximate_number_of_messages_visible(
                    period=QUEUE_PERIOD, statistic=cloudwatch.Stats.MAXIMUM
                ),
                threshold=0,
            )
        return alarms

    def _notifications_alarm(self, dead_letters: sqs.IQueue) -> cloudwatch.Alarm:
        return self._alarm(
            "NotificationsDeadLetters",
            description=(
                "A message of the live notifications queue failed the notifier five times and is in its "
                "dead-letter queue: the notifier cannot read PostgreSQL, the connections table or post to "
                "connections. Its log group holds the error. No notification is lost for good: the tenant's "
                "next state change catches every connection up from its cursor, and clients poll or "
                "resubscribe; purge the DLQ once the notifier works again."
            ),
            metric=dead_letters.metric_approximate_number_of_messages_visible(
                period=QUEUE_PERIOD, statistic=cloudwatch.Stats.MAXIMUM
            ),
            threshold=0,
        )

    def _jobs_alarms(self, config: StageConfig) -> dict[str, cloudwatch.Alarm]:
        return {
            "eligible_age": self._alarm(
                "EligibleJobAge",
                description=(
                    f"A job that could run now has waited more than {config.eligible_job_age_alarm_seconds} "
                    "s for a worker, although scaling adds tasks from "
                    f"{config.worker_scale_out_job_age_seconds} s on: the service is at its ceiling of "
                    f"{config.worker_max_tasks} tasks, tasks do not start, or workers cannot claim "
                    "(database, a paused provider key, a spent provider budget). No data does not alarm: the "
                    "SchedulerErrors alarm reports a failing scheduler."
                ),
                metric=scheduler_metric(OLDEST_ELIGIBLE_JOB_AGE, period=self.config.tick_period),
                threshold=config.eligible_job_age_alarm_seconds,
                evaluation_periods=GAUGE_PERIODS,
            ),
            "counter_drift": self._alarm(
                "CounterDrift",
                description=(
                    "The scheduler's reconciliation found a tenant's run-queue counters (unfinished, "
                    "running and queued jobs) different from a recount of its jobs, and corrected them. The "
                    "trigger on extraction_jobs keeps them in every job change, so a difference means a bug "
                    "there or a change made with triggers off; the scheduler's log names the tenant. "
                    "Admission and the fair claim read these counters."
                ),
                metric=scheduler_metric(COUNTER_DRIFT, period=self.config.tick_period),
                threshold=0,
            ),
            "worker_errors": self._alarm(
                "WorkerErrors",
                description=(
                    "The worker logged an ERROR line: an unexpected exception, or an alert such as "
                    "alert=provider_auth (the provider refused the API key, and every worker pauses). The "
                    "worker's log group holds the line, with the job, tenant and attempt as keys."
                ),
                metric=self.worker_errors,
                threshold=0,
            ),
            "throttling": self._alarm(
                "ProviderThrottling",
                description=(
                    f"More than {config.provider_throttle_alarm_percent:g} % of provider requests were "
                    f"answered 429 in {THROTTLING_PERIODS} five-minute periods in a row. Workers honour the "
                    "shared cooldown, so jobs slow down rather than fail: the configured requests or tokens "
                    "per minute are above the provider project's real quota, or another client shares it."
                ),
                metric=self.provider_throttle_rate,
                threshold=config.provider_throttle_alarm_percent,
                evaluation_periods=THROTTLING_PERIODS,
            ),
        }

    def _delivery_alarms(
        self, config: StageConfig, webhook_state_machine: sfn.IStateMachine
    ) -> dict[str, cloudwatch.Alarm]:
        disable_after = f"{config.webhooks.endpoint_disable_after_days:g} days"
        return {
            "failed": self._alarm(
                "DeliveriesFailed",
                description=(
                    "A webhook delivery's execution failed: its retry schedule is spent or its endpoint was "
                    "disabled (DeliveryGaveUp), or the attempt Lambda itself failed. The delivery stays in "
                    "PostgreSQL; inspect and replay it with `tollgate deliveries`."
                ),
                metric=webhook_state_machine.metric_failed(
                    period=COUNT_PERIOD, statistic=cloudwatch.Stats.SUM
                ),
                threshold=0,
            ),
            "gave_up": self._alarm(
                "DeliveriesGaveUp",
                description=(
                    "The attempt Lambda recorded a delivery that gave up: every retry of its schedule "
                    "(about 28 hours) failed. The delivery stays in PostgreSQL; `tollgate deliveries list` "
                    "for the tenant's endpoint, and replay once the endpoint answers again."
                ),
                metric=service_metric(WEBHOOK_ATTEMPT_SERVICE, DELIVERIES_GAVE_UP),
                threshold=0,
            ),
            "disabled": self._alarm(
                "EndpointsDisabled",
                description=(
                    "A tenant's webhook endpoint was disabled: it answered 410 Gone, or failed for "
                    f"{disable_after}. Its deliveries stop until the tenant fixes the receiver and "
                    "re-enables it with PATCH /webhook-endpoints/{id}; then replay what it missed."
                ),
                metric=service_metric(WEBHOOK_ATTEMPT_SERVICE, ENDPOINTS_DISABLED),
                threshold=0,
            ),
            "alerts": self._alarm(
                "EndpointAlerts",
                description=(
                    "A tenant's webhook endpoint keeps refusing our signature (repeated 401/403, "
                    "alert=auth): the tenant probably rotated the secret on their side only. The attempt "
                    "Lambda's log lines with alert=auth name the endpoint and the delivery. (A disabled "
                    "endpoint raises EndpointsDisabled instead.)"
                ),
                metric=self.endpoint_alerts,
                threshold=0,
            ),
        }

    def _review_alarms(self, config: StageConfig) -> dict[str, cloudwatch.Alarm]:
        return {
            "review_rate": self._alarm(
                "ReviewRate",
                description=(
                    f"More than {config.review_rate_alarm_percent:g} % of validated results went to "
                    f"review in {REVIEW_RATE_PERIODS} hours in a row, above the stage's target. Nothing "
                    "wrong reaches an ERP for it, but reviewers pay: `tollgate reviews list` shows which "
                    "rules the results broke (evidence reasons point at the model or prompt, arithmetic "
                    "at the documents)."
                ),
                metric=self.review_rate,
                threshold=config.review_rate_alarm_percent,
                evaluation_periods=REVIEW_RATE_PERIODS,
            ),
            "review_age": self._alarm(
                "ReviewAge",
                description=(
                    f"A result has waited more than {config.review_age_alarm_seconds} s for a reviewer: its "
                    "invoice has not reached the tenant's ERP. `tollgate reviews list` shows the queue, "
                    "oldest first; decide with `tollgate reviews decide` or a key with the review scope. "
                    "No data does not alarm: SchedulerErrors reports a failing scheduler."
                ),
                metric=scheduler_metric(OLDEST_WAITING_REVIEW_AGE, period=self.config.tick_period),
                threshold=config.review_age_alarm_seconds,
                evaluation_periods=GAUGE_PERIODS,
            ),
        }

    def _batch_alarms(self, config: StageConfig) -> dict[str, cloudwatch.Alarm]:
        hours = config.batch_age_alarm_seconds / 3600
        return {
            "batch_age": self._alarm(
                "BatchAge",
                description=(
                    f"A provider batch has been open more than {config.batch_age_alarm_seconds} s "
                    f"({hours:g} h), the lease its jobs wait under (the Batch API's 24 h window plus "
                    "batch_settle_seconds): no poller follows it. Is a worker with BATCH_API=true serving "
                    "the batch tier (its service's running tasks, its log's 'batch poll deferred' lines)? "
                    "provider_batches WHERE settled_at IS NULL, oldest created_at first, shows the batch's "
                    "state, holder and error. Its jobs come back on their own as their leases end and run on "
                    "the immediate path; the batch's lines are then not read. No data does not alarm: "
                    "SchedulerErrors reports a failing scheduler."
                ),
                metric=scheduler_metric(OLDEST_OPEN_BATCH_AGE, period=self.config.tick_period),
                threshold=config.batch_age_alarm_seconds,
                evaluation_periods=GAUGE_PERIODS,
            ),
        }

    def _overview(self, config: StageConfig) -> None:
        self.dashboard.add_widgets(
            cloudwatch.TextWidget(markdown=overview_markdown(config), width=FULL, height=2)
        )
        self.dashboard.add_widgets(
            cloudwatch.AlarmStatusWidget(
                title="Alarms",
                alarms=list(self.alarms),
                width=FULL,
                height=4,
            )
        )

    def _row(self, heading: str, *widgets: cloudwatch.IWidget) -> None:
        self.dashboard.add_widgets(cloudwatch.TextWidget(markdown=f"## {heading}", width=FULL, height=1))
        self.dashboard.add_widgets(*widgets)

    def _api_row(
        self, rest_api: apigw.RestApi, api_function: lambda_.IFunction, authorizer_function: lambda_.IFunction
    ) -> None:
        sums: dict[str, Any] = {"period": COUNT_PERIOD, "statistic": cloudwatch.Stats.SUM}
        self._row(
            "API: are tenants' requests answered?",
            graph("Requests", [rest_api.metric_count(label="Requests", **sums)]),
            graph(
                "Errors",
                [
                    rest_api.metric_client_error(label="4xx", **sums),
                    rest_api.metric_server_error(label="5xx", **sums),
                ],
            ),
            graph(
                "Latency (ms)",
                [
                    rest_api.metric_latency(label=percentile, period=COUNT_PERIOD, statistic=percentile)
                    for percentile in ("p50", "p99")
                ],
            ),
            graph(
                "Lambda errors",
                [
                    api_function.metric_errors(label="Acceptance errors", **sums),
                    api_function.metric_throttles(label="Acceptance throttles", **sums),
                    authorizer_function.metric_errors(label="Authorizer errors", **sums),
                ],
            ),
        )

    def _pipeline_row(
        self,
        job_queues: Mapping[str, sqs.IQueue],
        dead_letter_queues: Mapping[str, sqs.IQueue],
        alarms: dict[str, cloudwatch.Alarm],
    ) -> None:
        maxima: dict[str, Any] = {"period": QUEUE_PERIOD, "statistic": cloudwatch.Stats.MAXIMUM}
        self._row(
            "Pipeline: do accepted jobs reach the queues?",
            graph(
                "Outbox",
                [
                    scheduler_metric(
                        UNPUBLISHED_OUTBOX_EVENTS, period=self.config.tick_period, label="Unpublished events"
                    )
                ],
                right=[
                    scheduler_metric(
                        OLDEST_UNPUBLISHED_OUTBOX_AGE,
                        period=self.config.tick_period,
                        label="Oldest unpublished (s)",
                    )
                ],
                right_annotations=[alarms["outbox_age"].to_annotation()],
                width=THIRD,
            ),
            graph(
                "Job queues",
                [
                    queue.metric_approximate_number_of_messages_visible(
                        label=f"{job_type} messages", **maxima
                    )
                    for job_type, queue in job_queues.items()
                ],
                right=[
                    queue.metric_approximate_age_of_oldest_message(label=f"{job_type} oldest (s)", **maxima)
                    for job_type, queue in job_queues.items()
                ],
                # One threshold for every type: the first type's annotation says it.
                right_annotations=[alarms[f"queue_age:{next(iter(job_queues))}"].to_annotation()],
                width=THIRD,
            ),
            graph(
                "Dead letters",
                [
                    dead_letters.metric_approximate_number_of_messages_visible(label=job_type, **maxima)
                    for job_type, dead_letters in dead_letter_queues.items()
                ],
                width=THIRD,
            ),
        )

    def _jobs_row(
        self, config: StageConfig, worker_service: ecs.IBaseService, alarms: dict[str, cloudwatch.Alarm]
    ) -> None:
        def tasks(metric_name: str, label: str) -> cloudwatch.Metric:
            # Container Insights (on for the worker's cluster) is where ECS publishes task counts.
            return cloudwatch.Metric(
                namespace="ECS/ContainerInsights",
                metric_name=metric_name,
                dimensions_map={
                    "ClusterName": worker_service.cluster.cluster_name,
                    "ServiceName": worker_service.service_name,
                },
                period=cdk.Duration.minutes(1),
                statistic=cloudwatch.Stats.AVERAGE,
                label=label,
            )

        self._row(
            "Jobs: do workers keep up?",
            graph(
                "Backlog",
                [
                    scheduler_metric(RUNNABLE_JOBS, period=self.config.tick_period, label="Runnable"),
                    scheduler_metric(RUNNING_JOBS, period=self.config.tick_period, label="Running"),
                    scheduler_metric(
                        WAITING_RETRIES, period=self.config.tick_period, label="Waiting to retry"
                    ),
                ],
            ),
            graph(
                "Oldest eligible job (s)",
                [
                    scheduler_metric(
                        OLDEST_ELIGIBLE_JOB_AGE, period=self.config.tick_period, label="Oldest eligible"
                    )
                ],
                left_annotations=[
                    cloudwatch.HorizontalAnnotation(
                        value=config.worker_scale_out_job_age_seconds, label="Adds a task"
                    ),
                    alarms["eligible_age"].to_annotation(),
                ],
            ),
            graph(
                "Worker tasks",
                [
                    tasks("DesiredTaskCount", "Desired"),
                    tasks("RunningTaskCount", "Running"),
                ],
                left_annotations=[
                    cloudwatch.HorizontalAnnotation(value=config.worker_max_tasks, label="Ceiling")
                ],
            ),
            graph("Worker errors", [self.worker_errors.with_(label="ERROR lines")]),
        )

    def _provider_row(self, alarms: dict[str, cloudwatch.Alarm]) -> None:
        self._row(
            "Provider: is it throttling us?",
            graph(
                "Provider requests",
                [
                    service_metric(WORKER_SERVICE, PROVIDER_CALLS, label="Sent"),
                    service_metric(WORKER_SERVICE, PROVIDER_THROTTLED, label="Answered 429"),
                ],
                width=HALF,
            ),
            graph(
                "Answered 429 (%)",
                [self.provider_throttle_rate],
                left_annotations=[alarms["throttling"].to_annotation()],
                width=HALF,
            ),
        )

    def _delivery_row(
        self, webhook_state_machine: sfn.IStateMachine, alarms: dict[str, cloudwatch.Alarm]
    ) -> None:
        sums: dict[str, Any] = {"period": COUNT_PERIOD, "statistic": cloudwatch.Stats.SUM}
        self._row(
            "Delivery: do tenants get their webhooks?",
            graph(
                "Attempts without a 2xx",
                [service_metric(WEBHOOK_ATTEMPT_SERVICE, DELIVERY_ATTEMPTS_FAILED, label="Failed attempts")],
                width=THIRD,
            ),
            graph(
                "Deliveries and endpoints",
                [
                    service_metric(WEBHOOK_ATTEMPT_SERVICE, DELIVERIES_GAVE_UP, label="Deliveries gave up"),
                    service_metric(WEBHOOK_ATTEMPT_SERVICE, ENDPOINTS_DISABLED, label="Endpoints disabled"),
                    self.endpoint_alerts.with_(label="Endpoint alerts"),
                ],
                width=THIRD,
            ),
            graph(
                "Dispatcher executions",
                [
                    webhook_state_machine.metric_started(label="Started", **sums),
                    webhook_state_machine.metric_failed(label="Failed", **sums),
                ],
                width=THIRD,
            ),
        )

    def _review_row(self, alarms: dict[str, cloudwatch.Alarm]) -> None:
        labels = {"approve": "Approved", "correct": "Corrected", "reject": "Rejected"}
        self._row(
            "Review: do people decide what validation could not?",
            graph(
                "Sent to review (%)",
                [self.review_rate],
                width=QUARTER,
            ),
            graph(
                "Waiting reviews",
                [scheduler_metric(REVIEWS_WAITING, period=self.config.tick_period, label="Waiting")],
                right=[
                    scheduler_metric(
                        OLDEST_WAITING_REVIEW_AGE, period=self.config.tick_period, label="Oldest (s)"
                    )
                ],
                right_annotations=[alarms["review_age"].to_annotation()],
                width=QUARTER,
            ),
            graph(
                "Decisions",
                [scheduler_count(name, label=labels[kind]) for kind, name in REVIEW_DECISIONS.items()],
                width=QUARTER,
            ),
            graph(
                "Time to decision (s)",
                [time_to_decision(percentile) for percentile in ("p50", "p95")],
                width=QUARTER,
            ),
        )

    def _batch_row(self, alarms: dict[str, cloudwatch.Alarm]) -> None:
        self._row(
            "Batch path: do provider batches come back?",
            graph(
                "Open provider batches",
                [scheduler_metric(OPEN_PROVIDER_BATCHES, period=self.config.tick_period, label="Open")],
                right=[
                    scheduler_metric(
                        OLDEST_OPEN_BATCH_AGE, period=self.config.tick_period, label="Oldest (s)"
                    )
                ],
                right_annotations=[alarms["batch_age"].to_annotation()],
                width=THIRD,
            ),
            graph(
                "Batches",
                [service_metric(WORKER_SERVICE, BATCHES_SUBMITTED, label="Submitted")]
                + [
                    service_metric(WORKER_SERVICE, name, label=state.capitalize())
                    for state, name in BATCHES_ENDED.items()
                ],
                width=THIRD,
            ),
            graph(
                "Batch lines",
                [
                    service_metric(WORKER_SERVICE, BATCH_LINES_COMMITTED, label="Committed"),
                    service_metric(WORKER_SERVICE, BATCH_JOBS_RETURNED, label="Jobs returned"),
                ],
                width=THIRD,
            ),
        )


def overview_markdown(config: StageConfig) -> str:
    """The note at the top: how the rows are ordered, and where the runbook is."""
    runbook = f"[the runbook]({config.runbook_url})" if config.runbook_url else RUNBOOK_SECTION
    return (
        f"# Tollgate {config.stage}\n"
        "Top to bottom: is the API answering, do accepted jobs reach the queue, do workers keep up, is the "
        "provider throttling us, do tenants get their webhooks, do reviewers keep up, do provider batches "
        "come back. Every alarm says what "
        "it means in its "
        f"description; what to do is in {runbook}."
    )


def graph(
    title: str,
    left: list[cloudwatch.IMetric],
    *,
    right: list[cloudwatch.IMetric] | None = None,
    left_annotations: list[cloudwatch.HorizontalAnnotation] | None = None,
    right_annotations: list[cloudwatch.HorizontalAnnotation] | None = None,
    width: int = QUARTER,
) -> cloudwatch.GraphWidget:
    """A line graph of the row's standard height; zero stays at the bottom so a flat line reads as none."""
    return cloudwatch.GraphWidget(
        title=title,
        left=left,
        right=right,
        left_annotations=left_annotations,
        right_annotations=right_annotations,
        left_y_axis=cloudwatch.YAxisProps(min=0),
        right_y_axis=cloudwatch.YAxisProps(min=0) if right else None,
        width=width,
        height=GRAPH_HEIGHT,
    )
