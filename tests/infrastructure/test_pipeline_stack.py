"""PipelineStack's template: per job type an encrypted, TLS-only FIFO queue with a 14-day DLQ, and a
relay and a scheduler on one-minute schedules, with the concurrency each stage reserves for them. The alarms
on them are ObservabilityStack's (test_observability_stack)."""

from __future__ import annotations

import json
from fnmatch import fnmatch
from typing import Any
from uuid import uuid4

import pytest

from stacks.config import StageConfig
from stacks.constructs.documents_access import CANONICAL_DOCUMENTS
from stacks.constructs.notification_queue import MAX_RECEIVE_COUNT, NOTIFIER_TIMEOUT
from tests.infrastructure.cfn import (
    as_list,
    export_of,
    function_by_handler,
    local_id,
    references,
    render,
    resources,
    type_queues,
)
from tests.infrastructure.synth import StageSynth
from tollgate.core.documents import document_key, tenant_prefix
from tollgate.jobtypes.registry import JOB_TYPES
from tollgate.scheduler.retention import ARCHIVE_PREFIX

pytestmark = pytest.mark.infrastructure

Template = dict[str, Any]

RELAY = "functions.outbox_relay.handler.lambda_handler"
SCHEDULER = "functions.scheduler.handler.lambda_handler"
FOURTEEN_DAYS = 14 * 24 * 3600


def _queues(template: Template) -> list[tuple[str, dict[str, Any]]]:
    """Every queue of the stack: each job type's queue and dead-letter queue, and the notifications pair."""
    return list(resources(template, "AWS::SQS::Queue").items())


def test_each_job_type_has_its_own_queue_and_dead_letter_queue(pipeline_template: Template) -> None:
    pairs = type_queues(pipeline_template)

    assert set(pairs) == set(JOB_TYPES)
    assert len({queue_id for pair in pairs.values() for queue_id in pair}) == 2 * len(JOB_TYPES)
    assert len(_queues(pipeline_template)) == 2 * len(JOB_TYPES) + 2, "no queue but the pairs"


def test_every_queue_is_fifo_and_encrypted(pipeline_template: Template) -> None:
    for _, queue in _queues(pipeline_template):
        properties = queue["Properties"]
        assert properties["FifoQueue"] is True
        assert properties.get("SqsManagedSseEnabled") is True or "KmsMasterKeyId" in properties


def test_every_queue_refuses_requests_without_tls(pipeline_template: Template) -> None:
    for queue_id, _ in _queues(pipeline_template):
        (policy,) = [
            p["Properties"]
            for p in resources(pipeline_template, "AWS::SQS::QueuePolicy").values()
            if {"Ref": queue_id} in p["Properties"]["Queues"]
        ]
        assert {
            "Action": "sqs:*",
            "Condition": {"Bool": {"aws:SecureTransport": "false"}},
            "Effect": "Deny",
            "Principal": {"AWS": "*"},
        }.items() <= policy["PolicyDocument"]["Statement"][0].items()


@pytest.mark.parametrize("job_type", sorted(JOB_TYPES))
def test_a_types_queue_dead_letters_into_its_own_dlq_after_the_configured_receives(
    pipeline_template: Template, config: StageConfig, job_type: str
) -> None:
    queue_id, dlq_id = type_queues(pipeline_template)[job_type]
    queues = resources(pipeline_template, "AWS::SQS::Queue")
    jobs, dlq = queues[queue_id], queues[dlq_id]
    redrive = jobs["Properties"]["RedrivePolicy"]

    assert redrive["deadLetterTargetArn"] == {"Fn::GetAtt": [dlq_id, "Arn"]}
    assert redrive["maxReceiveCount"] == config.jobs_queue_max_receive_count == 5
    assert dlq["Properties"]["MessageRetentionPeriod"] == FOURTEEN_DAYS
    assert "RedrivePolicy" not in dlq["Properties"]
    # The type's own retention, and the DLQ must outlive what it receives, or a dead letter could expire
    # before support sees it.
    retention = JOB_TYPES[job_type].message_retention_days * 24 * 3600
    assert jobs["Properties"]["MessageRetentionPeriod"] == retention <= FOURTEEN_DAYS
    # Deduplication is by the event id the relay sends, not by body: a republished event is the same id.
    assert jobs["Properties"].get("ContentBasedDeduplication", False) is False


def test_visibility_timeout_matches_the_stage_setting(
    pipeline_template: Template, config: StageConfig
) -> None:
    queues = resources(pipeline_template, "AWS::SQS::Queue")
    for queue_id, _ in type_queues(pipeline_template).values():
        assert queues[queue_id]["Properties"]["VisibilityTimeout"] == config.jobs_queue_visibility_seconds


def _schedule_input(template: Template, function_id: str) -> dict[str, Any]:
    (rule,) = [
        r["Properties"]
        for r in resources(template, "AWS::Events::Rule").values()
        if any(references(t["Arn"], function_id) for t in r["Properties"]["Targets"])
    ]
    assert rule["ScheduleExpression"] == "rate(1 minute)"
    assert rule["State"] == "ENABLED"
    (target,) = rule["Targets"]
    payload: dict[str, Any] = json.loads(target["Input"])
    return payload


def test_relay_is_swept_every_minute(pipeline_template: Template, config: StageConfig) -> None:
    relay_id, relay = function_by_handler(pipeline_template, RELAY)

    assert _schedule_input(pipeline_template, relay_id) == {"source": "tollgate.sweep"}
    # A run never outlives the claim lease on the rows it holds.
    assert relay["Properties"]["Timeout"] <= config.relay.relay_claim_seconds


def test_scheduler_ticks_every_minute_and_ends_before_the_next_tick(pipeline_template: Template) -> None:
    scheduler_id, scheduler = function_by_handler(pipeline_template, SCHEDULER)

    assert _schedule_input(pipeline_template, scheduler_id) == {"source": "tollgate.tick"}
    # Without a reservation this is what keeps one tick from overlapping the next.
    assert scheduler["Properties"]["Timeout"] < 60


def _reservations(templates: dict[str, Template]) -> dict[str, int]:
    """Handler -> ReservedConcurrentExecutions, for every function of the stage that reserves any."""
    return {
        function["Properties"]["Handler"]: function["Properties"]["ReservedConcurrentExecutions"]
        for template in templates.values()
        for function in resources(template, "AWS::Lambda::Function").values()
        if "ReservedConcurrentExecutions" in function["Properties"]
    }


def test_each_stage_reserves_for_the_relay_and_the_scheduler_what_its_settings_say(
    each_stage: StageSynth,
) -> None:
    config = each_stage.config
    expected = {RELAY: config.relay_reserved_concurrency, SCHEDULER: config.scheduler_reserved_concurrency}

    # A setting of 0 leaves the property out (to Lambda, 0 would mean never running), and no other function
    # of any of the stage's stacks reserves concurrency.
    assert _reservations(each_stage.templates) == {
        handler: reserved for handler, reserved in expected.items() if reserved
    }
    if config.stage == "dev":
        # Dev deploys into an account with a new account's quota of 10, which refuses any reservation.
        assert _reservations(each_stage.templates) == {}
    else:
        # The relay's few runs at once and the scheduler's one tick at a time, as the settings' defaults say.
        defaults = StageConfig.model_fields
        assert expected == {
            RELAY: defaults["relay_reserved_concurrency"].default,
            SCHEDULER: defaults["scheduler_reserved_concurrency"].default,
        }
        assert all(expected.values())


@pytest.mark.parametrize("handler", [RELAY, SCHEDULER])
def test_stale_nudges_and_ticks_are_dropped_not_queued(pipeline_template: Template, handler: str) -> None:
    function_id, _ = function_by_handler(pipeline_template, handler)
    (config,) = [
        c["Properties"]
        for c in resources(pipeline_template, "AWS::Lambda::EventInvokeConfig").values()
        if c["Properties"]["FunctionName"] == {"Ref": function_id}
    ]

    assert config["MaximumEventAgeInSeconds"] == 60
    assert config["MaximumRetryAttempts"] == 0


@pytest.mark.parametrize("handler", [RELAY, SCHEDULER])
def test_functions_reach_postgres_through_the_proxy_from_the_vpc(
    pipeline_template: Template, handler: str
) -> None:
    _, function = function_by_handler(pipeline_template, handler)
    properties = function["Properties"]

    assert len(properties["VpcConfig"]["SubnetIds"]) >= 2
    assert "DatabaseProxy" in str(properties["Environment"]["Variables"]["DATABASE_HOST"])
    assert properties["TracingConfig"] == {"Mode": "Active"}


def _role_actions(template: Template, handler: str) -> dict[str, list[Any]]:
    """Action -> resources granted to one function's role."""
    _, function = function_by_handler(template, handler)
    role = function["Properties"]["Role"]["Fn::GetAtt"][0]
    granted: dict[str, list[Any]] = {}
    for policy in resources(template, "AWS::IAM::Policy").values():
        if {"Ref": role} not in policy["Properties"]["Roles"]:
            continue
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            for action in as_list(statement["Action"]):
                granted.setdefault(action, []).extend(as_list(statement["Resource"]))
    return granted


def test_only_the_relay_may_send_and_only_to_the_types_queues(pipeline_template: Template) -> None:
    pairs = type_queues(pipeline_template)
    relay = _role_actions(pipeline_template, RELAY)
    scheduler = _role_actions(pipeline_template, SCHEDULER)

    sent_to = relay["sqs:SendMessage"]
    notifications = by_queue_name(pipeline_template)["tollgate-dev-notifications.fifo"]
    assert len(sent_to) == len(pairs) + 1
    assert {local_id(arn, pipeline_template) for arn in sent_to} == {queue for queue, _ in pairs.values()} | {
        notifications
    }
    assert not [action for action in relay if action.startswith("sqs:") and "Receive" in action]
    assert not [action for action in scheduler if action.startswith("sqs:")]
    for granted in (relay, scheduler):
        assert "secretsmanager:GetSecretValue" in granted


def test_relay_sends_to_the_queues_named_in_its_environment(pipeline_template: Template) -> None:
    pairs = type_queues(pipeline_template)
    _, relay = function_by_handler(pipeline_template, RELAY)

    urls = json.loads(render(relay["Properties"]["Environment"]["Variables"]["JOB_QUEUE_URLS"]))

    assert urls == {name: "${" + queue + "}" for name, (queue, _) in pairs.items()}


def by_queue_name(template: Template) -> dict[str, str]:
    return {queue["Properties"]["QueueName"]: logical_id for logical_id, queue in _queues(template)}


def test_job_state_changes_go_to_the_notifications_queue_and_fail_into_its_dlq(
    pipeline_template: Template,
) -> None:
    names = by_queue_name(pipeline_template)
    queues = resources(pipeline_template, "AWS::SQS::Queue")
    queue = queues[names["tollgate-dev-notifications.fifo"]]["Properties"]
    _, relay = function_by_handler(pipeline_template, RELAY)

    assert queue["FifoQueue"] is True and queue["ContentBasedDeduplication"] is False
    assert queue["RedrivePolicy"]["maxReceiveCount"] == MAX_RECEIVE_COUNT
    assert (
        local_id(queue["RedrivePolicy"]["deadLetterTargetArn"], pipeline_template)
        == names["tollgate-dev-notifications-dlq.fifo"]
    )
    # Lambda's SQS event source wants the visibility timeout at six times the function's timeout at least.
    assert queue["VisibilityTimeout"] >= 6 * NOTIFIER_TIMEOUT.to_seconds()
    assert relay["Properties"]["Environment"]["Variables"]["NOTIFICATIONS_QUEUE_URL"] == {
        "Ref": names["tollgate-dev-notifications.fifo"]
    }


def test_outputs_name_the_queues_and_the_relay(pipeline_template: Template) -> None:
    pairs = type_queues(pipeline_template)
    outputs = pipeline_template["Outputs"]

    assert {"JobQueueUrls", "JobDlqUrls", "RelayFunctionName"} <= set(outputs)
    assert json.loads(render(outputs["JobDlqUrls"]["Value"])) == {
        name: "${" + dlq + "}" for name, (_, dlq) in pairs.items()
    }


def _object_grants(template: Template, handler: str) -> dict[str, list[str]]:
    """S3 action -> the object ARNs (rendered) one function's role gets it on."""
    return {
        action: [render(resource) for resource in granted]
        for action, granted in _role_actions(template, handler).items()
        if action.startswith("s3:")
    }


def _documents_bucket_name(data_template: Template) -> str:
    """The documents bucket's name as a consumer renders it: the import of DataStack's export."""
    (bucket_id,) = [
        logical_id
        for logical_id, bucket in resources(data_template, "AWS::S3::Bucket").items()
        if "VersioningConfiguration" in bucket["Properties"]
    ]
    return "${Import:" + export_of(data_template, bucket_id) + "}"


def test_the_scheduler_writes_only_archives_and_deletes_only_canonical_documents(
    pipeline_template: Template, data_template: Template
) -> None:
    bucket = "arn:${AWS::Partition}:s3:::" + _documents_bucket_name(data_template)
    grants = _object_grants(pipeline_template, SCHEDULER)

    assert grants["s3:PutObject"] == [f"{bucket}/{ARCHIVE_PREFIX}*"]
    assert grants["s3:DeleteObject*"] == [f"{bucket}/{CANONICAL_DOCUMENTS}"]
    assert not [action for action in grants if action.startswith(("s3:Get", "s3:List"))], "it reads nothing"
    assert {resource for resources in grants.values() for resource in resources} == {
        f"{bucket}/{ARCHIVE_PREFIX}*",
        f"{bucket}/{CANONICAL_DOCUMENTS}",
    }


def test_the_canonical_documents_pattern_is_where_acceptance_stores_them() -> None:
    assert fnmatch(document_key(uuid4(), "a" * 64), CANONICAL_DOCUMENTS)
    assert not fnmatch(f"{tenant_prefix(uuid4())}uploads/invoice.txt", CANONICAL_DOCUMENTS)


def test_the_scheduler_archives_to_the_stages_documents_bucket(
    pipeline_template: Template, data_template: Template, config: StageConfig
) -> None:
    _, scheduler = function_by_handler(pipeline_template, SCHEDULER)
    variables = scheduler["Properties"]["Environment"]["Variables"]

    assert render(variables["DOCUMENTS_BUCKET"]) == _documents_bucket_name(data_template)
    assert variables["RETENTION_DEFAULT_DAYS"] == str(config.retention.retention_default_days)


@pytest.mark.parametrize("job_type", sorted(JOB_TYPES))
def test_an_inbox_row_outlives_any_message_of_its_type(config: StageConfig, job_type: str) -> None:
    """A redelivery must find its inbox row: a message lives its type's retention, then 14 days in the DLQ."""
    lives = JOB_TYPES[job_type].message_retention_days + FOURTEEN_DAYS // (24 * 3600)

    assert lives < config.retention.retention_inbox_days
