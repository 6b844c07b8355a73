"""ObservabilityStack's template: one encrypted alarm topic per stage that every alarm notifies, each alarm on
the metric, threshold and period it promises, the metric filters behind the log-derived ones, and one
dashboard that shows every alarm; no other stack keeps a topic or an alarm of its own."""

from __future__ import annotations

import io
import json
import logging
import re
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Template as CdkTemplate
from aws_lambda_powertools import Logger
from pydantic import ValidationError

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
    REVIEW_TIME_TO_DECISION,
    REVIEWS_WAITING,
    RUNNABLE_JOBS,
    RUNNING_JOBS,
    SCHEDULER_SERVICE,
    UNPUBLISHED_OUTBOX_EVENTS,
    WAITING_RETRIES,
)
from stacks.constructs.service_metrics import (
    BATCH_JOBS_RETURNED,
    BATCH_LINES_COMMITTED,
    BATCHES_ENDED,
    BATCHES_SUBMITTED,
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
)
from stacks.observability_stack import RUNBOOK_SECTION, overview_markdown
from tests.infrastructure.cfn import function_by_handler, local_id, only, references, resources, type_queues
from tests.infrastructure.synth import Synthesized
from tollgate.delivery import attempts
from tollgate.jobtypes.registry import JOB_TYPES

pytestmark = pytest.mark.infrastructure

Template = dict[str, Any]

ATTEMPT = "functions.webhook_attempt.handler.lambda_handler"
API = "functions.api.handler.lambda_handler"
AUTHORIZER = "functions.authorizer.handler.lambda_handler"
# Each job type's queue has its age alarm and its DLQ its depth alarm, named <alarm>-<queue>.
PER_TYPE_ALARMS = {
    f"{alarm}-{job_type.queue}"
    for alarm in ("DeadLetters", "JobsQueueAge")
    for job_type in JOB_TYPES.values()
}
ALARMS = PER_TYPE_ALARMS | {
    "ApiServerErrors",
    "OutboxAge",
    "SchedulerErrors",
    "EligibleJobAge",
    "CounterDrift",
    "WorkerErrors",
    "ProviderThrottling",
    "DeliveriesFailed",
    "DeliveriesGaveUp",
    "EndpointsDisabled",
    "EndpointAlerts",
    "ReviewAge",
    "ReviewRate",
    "BatchAge",
    "NotificationsDeadLetters",
}
ROWS = ["API", "Pipeline", "Jobs", "Provider", "Delivery", "Review", "Batch path"]


def _alarms(template: Template) -> dict[str, tuple[str, dict[str, Any]]]:
    """Alarm name without the stage prefix -> (logical id, properties)."""
    return {
        alarm["Properties"]["AlarmName"].removeprefix("Tollgate-dev-"): (logical_id, alarm["Properties"])
        for logical_id, alarm in resources(template, "AWS::CloudWatch::Alarm").items()
    }


def _alarm(template: Template, name: str) -> dict[str, Any]:
    return _alarms(template)[name][1]


def _dimension(alarm: dict[str, Any], name: str) -> Any:
    (value,) = [d["Value"] for d in alarm["Dimensions"] if d["Name"] == name]
    return value


def _is_count_above_zero(alarm: dict[str, Any]) -> bool:
    return (
        alarm["Statistic"] == "Sum"
        and alarm["Period"] == 300
        and alarm["Threshold"] == 0
        and alarm["ComparisonOperator"] == "GreaterThanThreshold"
        and alarm["EvaluationPeriods"] == 1
        and alarm["TreatMissingData"] == "notBreaching"
    )


def _filter_on(template: Template, metric_name: str) -> dict[str, Any]:
    (metric_filter,) = [
        f["Properties"]
        for f in resources(template, "AWS::Logs::MetricFilter").values()
        if f["Properties"]["MetricTransformations"][0]["MetricName"] == metric_name
    ]
    return metric_filter


def _dashboard(template: Template) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(properties, widgets): the body's tokens are rendered as ``<logical id>`` or ``<output name>``."""
    _, dashboard = only(template, "AWS::CloudWatch::Dashboard")
    properties: dict[str, Any] = dashboard["Properties"]
    separator, parts = properties["DashboardBody"]["Fn::Join"]

    def text(part: Any) -> str:
        if isinstance(part, str):
            return part
        if "Fn::GetAtt" in part:
            return f"<{part['Fn::GetAtt'][0]}>"
        if "Fn::GetStackOutput" in part:
            return f"<{part['Fn::GetStackOutput']['OutputName']}>"
        return f"<{part.get('Ref', 'token')}>"

    widgets: list[dict[str, Any]] = json.loads(separator.join(text(part) for part in parts))["widgets"]
    return properties, widgets


def test_the_stage_has_one_encrypted_topic_and_every_alarm_notifies_it(
    observability_template: Template,
) -> None:
    topic_id, topic = only(observability_template, "AWS::SNS::Topic")
    (key_id,) = resources(observability_template, "AWS::KMS::Key")
    alarms = _alarms(observability_template)

    assert topic["Properties"]["KmsMasterKeyId"] == {"Fn::GetAtt": [key_id, "Arn"]}
    assert set(alarms) == ALARMS
    for _, alarm in alarms.values():
        assert alarm["AlarmName"].startswith("Tollgate-dev-")
        assert alarm["AlarmActions"] == [{"Ref": topic_id}]
        assert alarm["OKActions"] == [{"Ref": topic_id}]
        assert alarm["AlarmDescription"]


def test_no_other_stack_has_a_topic_or_an_alarm_of_its_own(
    data_template: Template,
    delivery_template: Template,
    pipeline_template: Template,
    api_template: Template,
    worker_template: Template,
) -> None:
    """The worker's scaling policies keep theirs: those alarms act on the service, they notify nobody."""
    for template in (data_template, delivery_template, pipeline_template, api_template, worker_template):
        policies = set(resources(template, "AWS::ApplicationAutoScaling::ScalingPolicy"))
        assert resources(template, "AWS::SNS::Topic") == {}
        for alarm in resources(template, "AWS::CloudWatch::Alarm").values():
            actions = alarm["Properties"]["AlarmActions"]
            assert actions and {action["Ref"] for action in actions} <= policies
            assert "OKActions" not in alarm["Properties"]
    for template in (delivery_template, pipeline_template):
        assert "AlarmTopicArn" not in template["Outputs"]


def test_cloudwatch_alone_may_use_the_topic_key_and_only_over_tls(observability_template: Template) -> None:
    topic_id, _ = only(observability_template, "AWS::SNS::Topic")
    (key,) = resources(observability_template, "AWS::KMS::Key").values()
    _, topic_policy = only(observability_template, "AWS::SNS::TopicPolicy")
    statements = topic_policy["Properties"]["PolicyDocument"]["Statement"]
    key_statements = key["Properties"]["KeyPolicy"]["Statement"]

    assert key["Properties"]["EnableKeyRotation"] is True
    (cloudwatch_key,) = [
        s for s in key_statements if s["Principal"] == {"Service": "cloudwatch.amazonaws.com"}
    ]
    assert set(cloudwatch_key["Action"]) == {"kms:Decrypt", "kms:GenerateDataKey*"}
    assert "aws:SourceAccount" in cloudwatch_key["Condition"]["StringEquals"]
    assert {
        "Action": "sns:Publish",
        "Condition": {"Bool": {"aws:SecureTransport": "false"}},
        "Effect": "Deny",
    }.items() <= next(s for s in statements if s["Effect"] == "Deny").items()
    (publish,) = [s for s in statements if s["Effect"] == "Allow"]
    assert publish["Principal"] == {"Service": "cloudwatch.amazonaws.com"}
    assert publish["Resource"] == {"Ref": topic_id}


def test_alarm_email_is_subscribed_when_configured() -> None:
    # The construct alone, in a bare stack: a second synth of the whole app would double the suite's time.
    stack = cdk.Stack(cdk.App(), "Alarms")
    AlarmTopic(stack, "Alarms", config=StageConfig(stage="dev", alarm_email="ops@example.com"))
    template: Template = CdkTemplate.from_stack(stack).to_json()

    _, subscription = only(template, "AWS::SNS::Subscription")
    assert subscription["Properties"]["Protocol"] == "email"
    assert subscription["Properties"]["Endpoint"] == "ops@example.com"


def test_a_malformed_alarm_email_is_rejected() -> None:
    with pytest.raises(ValidationError, match="alarm_email"):
        StageConfig(stage="dev", alarm_email="ops at example")


def test_no_email_is_subscribed_by_default(observability_template: Template, config: StageConfig) -> None:
    assert config.alarm_email is None
    assert resources(observability_template, "AWS::SNS::Subscription") == {}


@pytest.mark.parametrize("job_type", sorted(JOB_TYPES))
def test_each_types_dead_letters_alarm_on_the_first_message(
    observability_template: Template, pipeline_template: Template, job_type: str
) -> None:
    _, dead_letters = type_queues(pipeline_template)[job_type]
    alarm = _alarm(observability_template, f"DeadLetters-{JOB_TYPES[job_type].queue}")

    assert (alarm["Namespace"], alarm["MetricName"]) == ("AWS/SQS", "ApproximateNumberOfMessagesVisible")
    assert local_id(_dimension(alarm, "QueueName"), pipeline_template) == dead_letters
    assert alarm["Statistic"] == "Maximum"
    assert alarm["ComparisonOperator"] == "GreaterThanThreshold"
    assert alarm["Threshold"] == 0
    assert f"--job-type {job_type}" in alarm["AlarmDescription"]


def test_the_notifications_dead_letters_alarm_on_the_first_message(
    observability_template: Template, pipeline_template: Template
) -> None:
    (dead_letters,) = [
        logical_id
        for logical_id, queue in resources(pipeline_template, "AWS::SQS::Queue").items()
        if queue["Properties"]["QueueName"] == "tollgate-dev-notifications-dlq.fifo"
    ]
    alarm = _alarm(observability_template, "NotificationsDeadLetters")

    assert (alarm["Namespace"], alarm["MetricName"]) == ("AWS/SQS", "ApproximateNumberOfMessagesVisible")
    assert local_id(_dimension(alarm, "QueueName"), pipeline_template) == dead_letters
    assert alarm["Statistic"] == "Maximum"
    assert alarm["Threshold"] == 0 and alarm["ComparisonOperator"] == "GreaterThanThreshold"


def test_unpublished_outbox_age_alarms_but_not_before_the_first_tick(
    observability_template: Template, config: StageConfig
) -> None:
    alarm = _alarm(observability_template, "OutboxAge")

    assert (alarm["Namespace"], alarm["MetricName"]) == ("Tollgate", OLDEST_UNPUBLISHED_OUTBOX_AGE)
    assert alarm["Dimensions"] == [{"Name": "service", "Value": "tollgate-scheduler"}]
    assert alarm["Statistic"] == "Maximum"
    assert alarm["Threshold"] == config.outbox_age_alarm_seconds
    assert alarm["ComparisonOperator"] == "GreaterThanThreshold"
    assert alarm["EvaluationPeriods"] == 3
    # The gauge is absent until the scheduler's first tick after a deploy: no data must not page.
    assert alarm["TreatMissingData"] == "notBreaching"


def test_a_failing_scheduler_alarms_in_place_of_its_silent_gauges(
    observability_template: Template, pipeline_template: Template
) -> None:
    """Every gauge alarm ignores missing data, so the scheduler's own failures are what reports it silent."""
    alarm = _alarm(observability_template, "SchedulerErrors")
    scheduler, _ = function_by_handler(pipeline_template, "functions.scheduler.handler.lambda_handler")

    assert (alarm["Namespace"], alarm["MetricName"]) == ("AWS/Lambda", "Errors")
    assert local_id(_dimension(alarm, "FunctionName"), pipeline_template) == scheduler
    assert (alarm["Statistic"], alarm["Period"]) == ("Sum", 60)
    assert (alarm["ComparisonOperator"], alarm["Threshold"]) == ("GreaterThanThreshold", 0)
    assert alarm["EvaluationPeriods"] == 3
    assert alarm["TreatMissingData"] == "notBreaching"


def test_no_alarm_pages_for_a_metric_that_is_not_there_yet(synthesized: Synthesized) -> None:
    """Right after a deploy no gauge, count or queue metric has a data point: an alarm that treats missing
    data as breaching would page then, and whenever a stage is idle."""
    breaching = [
        (stack.stack_name, alarm["Properties"].get("AlarmName", logical_id))
        for stack in synthesized.app.node.children
        if isinstance(stack, cdk.Stack)
        for logical_id, alarm in resources(
            CdkTemplate.from_stack(stack).to_json(), "AWS::CloudWatch::Alarm"
        ).items()
        if alarm["Properties"].get("TreatMissingData") == "breaching"
    ]

    assert breaching == []


@pytest.mark.parametrize("job_type", sorted(JOB_TYPES))
def test_each_types_queue_age_alarms_when_ingress_stalls(
    observability_template: Template, pipeline_template: Template, config: StageConfig, job_type: str
) -> None:
    jobs, _ = type_queues(pipeline_template)[job_type]
    alarm = _alarm(observability_template, f"JobsQueueAge-{JOB_TYPES[job_type].queue}")

    assert (alarm["Namespace"], alarm["MetricName"]) == ("AWS/SQS", "ApproximateAgeOfOldestMessage")
    assert local_id(_dimension(alarm, "QueueName"), pipeline_template) == jobs
    assert alarm["Threshold"] == config.jobs_queue_age_alarm_seconds


def test_oldest_eligible_job_alarms_after_scaling_had_its_chance(
    observability_template: Template, config: StageConfig
) -> None:
    alarm = _alarm(observability_template, "EligibleJobAge")

    assert (alarm["Namespace"], alarm["MetricName"]) == ("Tollgate", OLDEST_ELIGIBLE_JOB_AGE)
    assert alarm["Dimensions"] == [{"Name": "service", "Value": "tollgate-scheduler"}]
    assert (alarm["Statistic"], alarm["Period"]) == ("Maximum", 60)
    assert alarm["Threshold"] == config.eligible_job_age_alarm_seconds == 900
    assert config.worker_scale_out_job_age_seconds < alarm["Threshold"] < config.jobs.default_deadline_seconds
    assert alarm["EvaluationPeriods"] == 3
    # A failing scheduler raises SchedulerErrors; one cause, one page.
    assert alarm["TreatMissingData"] == "notBreaching"


def test_provider_429_rate_alarms_only_on_periods_with_calls(
    observability_template: Template, config: StageConfig
) -> None:
    alarm = _alarm(observability_template, "ProviderThrottling")
    queries = {query["Id"]: query for query in alarm["Metrics"]}
    (expression,) = [query for query in queries.values() if "Expression" in query]

    assert expression["ReturnData"] is True
    # No calls in a period gives no data point, which does not breach: an idle stage never alarms.
    assert re.fullmatch(r"IF\(calls > 0, 100 \* FILL\(throttled, 0\) / calls\)", expression["Expression"]), (
        expression["Expression"]
    )
    assert alarm["TreatMissingData"] == "notBreaching"
    for query_id, metric_name in (("calls", PROVIDER_CALLS), ("throttled", PROVIDER_THROTTLED)):
        stat = queries[query_id]["MetricStat"]
        assert queries[query_id]["ReturnData"] is False
        assert stat["Metric"] == {
            "Namespace": "Tollgate",
            "MetricName": metric_name,
            "Dimensions": [{"Name": "service", "Value": WORKER_SERVICE}],
        }
        assert (stat["Stat"], stat["Period"]) == ("Sum", 300)
    assert alarm["Threshold"] == config.provider_throttle_alarm_percent == 10
    assert alarm["ComparisonOperator"] == "GreaterThanThreshold"
    assert alarm["EvaluationPeriods"] == 3


def test_a_review_waiting_past_the_stages_age_alarms(observability_template: Template) -> None:
    config = StageConfig(stage="dev")
    alarm = _alarm(observability_template, "ReviewAge")

    assert (alarm["Namespace"], alarm["MetricName"]) == ("Tollgate", OLDEST_WAITING_REVIEW_AGE)
    assert alarm["Dimensions"] == [{"Name": "service", "Value": SCHEDULER_SERVICE}]
    assert (alarm["Statistic"], alarm["Period"]) == ("Maximum", 60)
    assert alarm["Threshold"] == config.review_age_alarm_seconds == 86_400
    assert alarm["ComparisonOperator"] == "GreaterThanThreshold"
    assert alarm["EvaluationPeriods"] == 3
    # A failing scheduler raises SchedulerErrors; one cause, one page.
    assert alarm["TreatMissingData"] == "notBreaching"
    assert "tollgate reviews list" in alarm["AlarmDescription"]


def test_a_provider_batch_open_past_its_jobs_lease_alarms(observability_template: Template) -> None:
    config = StageConfig(stage="dev")
    alarm = _alarm(observability_template, "BatchAge")

    assert (alarm["Namespace"], alarm["MetricName"]) == ("Tollgate", OLDEST_OPEN_BATCH_AGE)
    assert alarm["Dimensions"] == [{"Name": "service", "Value": SCHEDULER_SERVICE}]
    assert (alarm["Statistic"], alarm["Period"]) == ("Maximum", 60)
    # The provider's 24 h window plus the default settle of an hour: the lease a batched job waits under.
    assert alarm["Threshold"] == config.batch_age_alarm_seconds == 25 * 3600
    assert alarm["ComparisonOperator"] == "GreaterThanThreshold"
    assert alarm["EvaluationPeriods"] == 3
    # A failing scheduler raises SchedulerErrors; one cause, one page.
    assert alarm["TreatMissingData"] == "notBreaching"
    for hint in ("BATCH_API", "batch tier", "provider_batches", "leases end"):
        assert hint in alarm["AlarmDescription"], hint
    assert len(alarm["AlarmDescription"]) <= 1024, "CloudWatch's limit on a description"


def test_the_batch_age_alarm_follows_the_stages_settle_time() -> None:
    config = StageConfig(stage="prod", batch_path={"batch_settle_seconds": 7200})

    assert config.batch_age_alarm_seconds == 26 * 3600


def test_the_batch_row_graphs_open_batches_their_ends_and_their_lines(
    observability_template: Template,
) -> None:
    _, widgets = _dashboard(observability_template)
    titles = {widget["properties"].get("title"): widget for widget in widgets if widget["type"] == "metric"}

    def watched(title: str) -> set[tuple[str, str]]:
        return {
            (entry[1], entry[3])
            for entry in titles[title]["properties"]["metrics"]
            if isinstance(entry[0], str) and len(entry) > 3
        }

    assert watched("Open provider batches") == {
        (OPEN_PROVIDER_BATCHES, SCHEDULER_SERVICE),
        (OLDEST_OPEN_BATCH_AGE, SCHEDULER_SERVICE),
    }
    assert watched("Batches") == {
        (name, WORKER_SERVICE) for name in (BATCHES_SUBMITTED, *BATCHES_ENDED.values())
    }
    assert watched("Batch lines") == {
        (BATCH_LINES_COMMITTED, WORKER_SERVICE),
        (BATCH_JOBS_RETURNED, WORKER_SERVICE),
    }
    (annotation,) = titles["Open provider batches"]["properties"]["annotations"]["horizontal"]
    assert annotation["value"] == StageConfig(stage="dev").batch_age_alarm_seconds


def test_a_review_rate_above_the_stages_target_alarms_only_on_hours_with_results(
    observability_template: Template,
) -> None:
    config = StageConfig(stage="dev")
    alarm = _alarm(observability_template, "ReviewRate")
    queries = {query["Id"]: query for query in alarm["Metrics"]}
    (expression,) = [query for query in queries.values() if "Expression" in query]

    assert re.fullmatch(
        r"IF\(validated > 0, 100 \* FILL\(review, 0\) / validated\)", expression["Expression"]
    )
    for query_id, metric_name in (("validated", EXTRACTIONS_VALIDATED), ("review", REVIEWS_REQUIRED)):
        stat = queries[query_id]["MetricStat"]
        assert stat["Metric"]["MetricName"] == metric_name
        assert (stat["Stat"], stat["Period"]) == ("Sum", 3600)
    assert alarm["Threshold"] == config.review_rate_alarm_percent == 20
    assert (alarm["ComparisonOperator"], alarm["EvaluationPeriods"]) == ("GreaterThanThreshold", 3)
    # An hour without validated results has no data point and does not breach.
    assert alarm["TreatMissingData"] == "notBreaching"
    assert StageConfig(stage="prod", review_rate_alarm_percent=5).review_rate_alarm_percent == 5
    with pytest.raises(ValidationError, match="review_rate_alarm_percent"):
        StageConfig(stage="prod", review_rate_alarm_percent=0)


def test_the_review_age_alarm_follows_the_stage_setting() -> None:
    assert StageConfig(stage="prod", review_age_alarm_seconds=4 * 3600).review_age_alarm_seconds == 14_400
    with pytest.raises(ValidationError, match="review_age_alarm_seconds"):
        StageConfig(stage="prod", review_age_alarm_seconds=5)


def test_the_review_row_graphs_the_rate_the_queue_decisions_and_time_to_decision(
    observability_template: Template,
) -> None:
    _, widgets = _dashboard(observability_template)
    titles = {widget["properties"].get("title"): widget for widget in widgets if widget["type"] == "metric"}
    rate = titles["Sent to review (%)"]["properties"]["metrics"]
    (expression,) = [entry[0] for entry in rate if isinstance(entry[0], dict) and "expression" in entry[0]]
    assert re.fullmatch(
        r"IF\(validated > 0, 100 \* FILL\(review, 0\) / validated\)", expression["expression"]
    )
    watched = {entry[1] for entry in rate if isinstance(entry[0], str)}
    assert watched == {EXTRACTIONS_VALIDATED, REVIEWS_REQUIRED}
    timing = titles["Time to decision (s)"]["properties"]["metrics"]
    assert sorted(entry[-1]["stat"] for entry in timing) == ["p50", "p95"]
    decisions = titles["Decisions"]["properties"]["metrics"]
    assert {entry[1] for entry in decisions} == set(REVIEW_DECISIONS.values())


def test_a_drifted_run_queue_counter_alarms(observability_template: Template) -> None:
    alarm = _alarm(observability_template, "CounterDrift")

    assert (alarm["Namespace"], alarm["MetricName"]) == ("Tollgate", COUNTER_DRIFT)
    assert alarm["Dimensions"] == [{"Name": "service", "Value": SCHEDULER_SERVICE}]
    assert alarm["Threshold"] == 0 and alarm["ComparisonOperator"] == "GreaterThanThreshold"


def test_any_error_line_of_the_worker_alarms(
    observability_template: Template, worker_template: Template
) -> None:
    metric_filter = _filter_on(observability_template, WORKER_ERRORS)
    (transformation,) = metric_filter["MetricTransformations"]
    (log_group,) = resources(worker_template, "AWS::Logs::LogGroup")
    alarm = _alarm(observability_template, "WorkerErrors")

    assert local_id(metric_filter["LogGroupName"], worker_template) == log_group
    assert metric_filter["FilterPattern"] == '{ $.level = "ERROR" }'
    assert (transformation["MetricNamespace"], transformation["MetricValue"]) == ("Tollgate", "1")
    assert (alarm["Namespace"], alarm["MetricName"]) == ("Tollgate", WORKER_ERRORS)
    assert "Dimensions" not in alarm
    assert _is_count_above_zero(alarm)


def test_any_5xx_from_the_api_alarms(observability_template: Template, api_template: Template) -> None:
    _, rest_api = only(api_template, "AWS::ApiGateway::RestApi")
    alarm = _alarm(observability_template, "ApiServerErrors")

    assert (alarm["Namespace"], alarm["MetricName"]) == ("AWS/ApiGateway", "5XXError")
    assert _dimension(alarm, "ApiName") == rest_api["Properties"]["Name"]
    assert _is_count_above_zero(alarm)


def test_a_failed_dispatcher_execution_alarms(
    observability_template: Template, delivery_template: Template
) -> None:
    dispatcher_id, _ = only(delivery_template, "AWS::StepFunctions::StateMachine")
    alarm = _alarm(observability_template, "DeliveriesFailed")

    assert (alarm["Namespace"], alarm["MetricName"]) == ("AWS/States", "ExecutionsFailed")
    assert local_id(_dimension(alarm, "StateMachineArn"), delivery_template) == dispatcher_id
    assert _is_count_above_zero(alarm)


@pytest.mark.parametrize(
    ("name", "metric_name"),
    [("DeliveriesGaveUp", DELIVERIES_GAVE_UP), ("EndpointsDisabled", ENDPOINTS_DISABLED)],
)
def test_the_attempt_lambdas_own_counts_alarm_on_the_first_one(
    observability_template: Template, name: str, metric_name: str
) -> None:
    alarm = _alarm(observability_template, name)

    assert (alarm["Namespace"], alarm["MetricName"]) == ("Tollgate", metric_name)
    assert alarm["Dimensions"] == [{"Name": "service", "Value": WEBHOOK_ATTEMPT_SERVICE}]
    assert _is_count_above_zero(alarm)


def test_auth_alerts_in_the_attempt_logs_alarm_and_other_alerts_page_through_their_counts(
    observability_template: Template, delivery_template: Template
) -> None:
    _, function = function_by_handler(delivery_template, ATTEMPT)
    metric_filter = _filter_on(observability_template, WEBHOOK_ENDPOINT_ALERTS)
    (transformation,) = metric_filter["MetricTransformations"]
    pattern = metric_filter["FilterPattern"]
    alarm = _alarm(observability_template, "EndpointAlerts")

    assert local_id(metric_filter["LogGroupName"], delivery_template) == local_id(
        function["Properties"]["LoggingConfig"]["LogGroup"], delivery_template
    )
    assert '($.level = "ERROR")' in pattern
    assert re.findall(r"\(\$\.alert[^)]*\)", pattern) == ['($.alert = "auth")']
    assert transformation["MetricValue"] == "1"
    assert (alarm["Namespace"], alarm["MetricName"]) == (
        transformation["MetricNamespace"],
        "WebhookEndpointAlerts",
    )
    assert "Dimensions" not in alarm
    assert _is_count_above_zero(alarm)


def test_the_filtered_alerts_are_what_the_attempt_use_case_logs() -> None:
    source = Path(attempts.__file__).read_text(encoding="utf-8")

    assert set(ENDPOINT_ALERTS) <= set(re.findall(r'"alert": "(\w+)"', source))


def test_powertools_writes_level_and_alert_where_the_filters_look() -> None:
    """The filters read $.level and $.alert: Powertools puts a record's extra keys at the top level."""
    stream = io.StringIO()
    logger = Logger(service="filter-check", logger_handler=logging.StreamHandler(stream))

    logger.error("ALERT: the endpoint keeps refusing our signature", extra={"alert": "auth"})

    line = json.loads(stream.getvalue().splitlines()[-1])
    assert (line["level"], line["alert"]) == ("ERROR", "auth")


def test_the_watched_services_are_the_ones_the_code_runs_as(
    delivery_template: Template, worker_template: Template
) -> None:
    """Powertools names the ``service`` dimension after POWERTOOLS_SERVICE_NAME; another name, no data."""
    _, attempt = function_by_handler(delivery_template, ATTEMPT)
    _, task = only(worker_template, "AWS::ECS::TaskDefinition")
    (container,) = task["Properties"]["ContainerDefinitions"]
    worker = {variable["Name"]: variable["Value"] for variable in container["Environment"]}

    assert (
        attempt["Properties"]["Environment"]["Variables"]["POWERTOOLS_SERVICE_NAME"]
        == WEBHOOK_ATTEMPT_SERVICE
    )
    assert worker["POWERTOOLS_SERVICE_NAME"] == WORKER_SERVICE


def test_one_dashboard_per_stage_shows_every_alarm(observability_template: Template) -> None:
    properties, widgets = _dashboard(observability_template)
    (status,) = [widget for widget in widgets if widget["type"] == "alarm"]

    assert properties["DashboardName"] == "Tollgate-dev"
    for logical_id, _ in _alarms(observability_template).values():
        assert references(properties["DashboardBody"], logical_id), logical_id
    assert sorted(status["properties"]["alarms"]) == sorted(
        f"<{logical_id}>" for logical_id, _ in _alarms(observability_template).values()
    )


def test_the_dashboard_graphs_every_watched_metric(observability_template: Template) -> None:
    _, widgets = _dashboard(observability_template)
    graphed = {
        entry[1]
        for widget in widgets
        if widget["type"] == "metric"
        for entry in widget["properties"]["metrics"]
        if isinstance(entry[0], str) and len(entry) > 1 and isinstance(entry[1], str)
    }
    expressions = [
        entry[0]["expression"]
        for widget in widgets
        if widget["type"] == "metric"
        for entry in widget["properties"]["metrics"]
        if isinstance(entry[0], dict) and "expression" in entry[0]
    ]

    assert {
        RUNNABLE_JOBS,
        RUNNING_JOBS,
        WAITING_RETRIES,
        OLDEST_ELIGIBLE_JOB_AGE,
        OLDEST_UNPUBLISHED_OUTBOX_AGE,
        UNPUBLISHED_OUTBOX_EVENTS,
        PROVIDER_CALLS,
        PROVIDER_THROTTLED,
        WORKER_ERRORS,
        DELIVERY_ATTEMPTS_FAILED,
        DELIVERIES_GAVE_UP,
        ENDPOINTS_DISABLED,
        WEBHOOK_ENDPOINT_ALERTS,
        REVIEWS_WAITING,
        OLDEST_WAITING_REVIEW_AGE,
        REVIEW_TIME_TO_DECISION,
        *REVIEW_DECISIONS.values(),
        OPEN_PROVIDER_BATCHES,
        OLDEST_OPEN_BATCH_AGE,
        BATCHES_SUBMITTED,
        *BATCHES_ENDED.values(),
        BATCH_LINES_COMMITTED,
        BATCH_JOBS_RETURNED,
        "Count",
        "4XXError",
        "5XXError",
        "Latency",
        "Errors",
        "ApproximateNumberOfMessagesVisible",
        "ApproximateAgeOfOldestMessage",
        "DesiredTaskCount",
        "RunningTaskCount",
        "ExecutionsStarted",
        "ExecutionsFailed",
    } <= graphed
    assert any("throttled" in expression and "calls" in expression for expression in expressions)
    assert any("review" in expression and "validated" in expression for expression in expressions)


def test_the_dashboard_reads_top_to_bottom(observability_template: Template) -> None:
    """The note and the alarms first, then one row per stage of a job's life, in the order work flows."""
    _, widgets = _dashboard(observability_template)
    by_position = sorted(widgets, key=lambda widget: (widget["y"], widget["x"]))
    headings = [
        widget["properties"]["markdown"].removeprefix("## ").split(":")[0]
        for widget in by_position
        if widget["type"] == "text" and widget["properties"]["markdown"].startswith("## ")
    ]

    assert by_position[0]["type"] == "text"
    assert by_position[0]["properties"]["markdown"].startswith("# Tollgate dev")
    assert by_position[1]["type"] == "alarm"
    assert headings == ROWS
    assert all(widget["x"] + widget["width"] <= 24 for widget in widgets)


def test_the_note_links_the_runbook_when_its_address_is_known() -> None:
    without = overview_markdown(StageConfig(stage="dev"))
    linked = overview_markdown(
        StageConfig(stage="dev", runbook_url="https://example.com/tollgate#operations")
    )

    assert RUNBOOK_SECTION in without
    assert "[the runbook](https://example.com/tollgate#operations)" in linked
    with pytest.raises(ValidationError, match="runbook_url"):
        StageConfig(stage="dev", runbook_url="javascript:alert(1)")


def test_outputs_name_the_topic_and_the_dashboard(observability_template: Template) -> None:
    outputs = observability_template["Outputs"]

    assert outputs["AlarmTopicArn"]["Value"] == {"Ref": only(observability_template, "AWS::SNS::Topic")[0]}
    assert "#dashboards/dashboard/Tollgate-dev" in json.dumps(outputs["DashboardUrl"]["Value"])


def test_the_api_graphs_watch_this_stages_api_and_functions(
    observability_template: Template, api_template: Template
) -> None:
    _, widgets = _dashboard(observability_template)
    api_function, _ = function_by_handler(api_template, API)
    authorizer, _ = function_by_handler(api_template, AUTHORIZER)
    _, rest_api = only(api_template, "AWS::ApiGateway::RestApi")
    dimensions = [
        (entry[2], entry[3])
        for widget in widgets
        if widget["type"] == "metric"
        for entry in widget["properties"]["metrics"]
        if entry[0] in ("AWS/ApiGateway", "AWS/Lambda")
    ]
    published = {
        name: api_template["Outputs"][name]["Value"]
        for name in api_template["Outputs"]
        if name.startswith("PublishOutput")
    }

    assert ("ApiName", rest_api["Properties"]["Name"]) in dimensions
    watched = {published[value.strip("<>")]["Ref"] for name, value in dimensions if name == "FunctionName"}
    assert watched == {api_function, authorizer}
