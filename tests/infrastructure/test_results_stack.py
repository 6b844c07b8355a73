"""ResultsStack's template: the results bus named for its stage, an archive of what is published on it, and
an example subscriber rule whose target is an encrypted queue with a dead-letter queue; and the relay in
PipelineStack allowed to put events on that bus, and nothing else on it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.infrastructure.cfn import as_list, function_by_handler, local_id, only, resources
from tests.infrastructure.test_pipeline_stack import RELAY, SCHEDULER, _role_actions
from tollgate.events import EXTRACTION_COMPLETED
from tollgate.settings import RelaySettings

pytestmark = pytest.mark.infrastructure

Template = dict[str, Any]


def _bus(template: Template) -> tuple[str, dict[str, Any]]:
    return only(template, "AWS::Events::EventBus", Name="tollgate-dev-results")


def test_the_bus_is_named_for_its_stage_and_archived(results_template: Template) -> None:
    bus_id, _ = _bus(results_template)
    _, archive = only(results_template, "AWS::Events::Archive")

    assert archive["Properties"]["SourceArn"] == {"Fn::GetAtt": [bus_id, "Arn"]}
    assert archive["Properties"]["RetentionDays"] == 14
    assert archive["Properties"]["EventPattern"] == {"source": ["tollgate.dev"]}


def test_the_example_rule_sends_completed_events_to_a_queue_with_a_dead_letter_queue(
    results_template: Template,
) -> None:
    bus_id, _ = _bus(results_template)
    (rule,) = resources(results_template, "AWS::Events::Rule").values()
    properties = rule["Properties"]
    assert properties["EventBusName"] == {"Ref": bus_id}
    assert properties["EventPattern"] == {"source": ["tollgate.dev"], "detail-type": [EXTRACTION_COMPLETED]}
    (target,) = properties["Targets"]

    queues = resources(results_template, "AWS::SQS::Queue")
    (queue_id,) = [qid for qid, q in queues.items() if "RedrivePolicy" in q["Properties"]]
    (dead_letters_id,) = [qid for qid in queues if qid != queue_id]
    assert target["Arn"] == {"Fn::GetAtt": [queue_id, "Arn"]}
    assert target["DeadLetterConfig"]["Arn"] == {"Fn::GetAtt": [dead_letters_id, "Arn"]}
    redrive = queues[queue_id]["Properties"]["RedrivePolicy"]
    assert redrive["deadLetterTargetArn"] == {"Fn::GetAtt": [dead_letters_id, "Arn"]}
    for queue in queues.values():
        assert queue["Properties"].get("SqsManagedSseEnabled") is True
    # EventBridge may send to both (the queue, and the DLQ for what it could not deliver), nobody else is let in.
    policies = resources(results_template, "AWS::SQS::QueuePolicy").values()
    senders = {
        json.dumps(statement["Principal"])
        for policy in policies
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
        if "sqs:SendMessage" in as_list(statement["Action"]) and statement["Effect"] == "Allow"
    }
    assert senders == {json.dumps({"Service": "events.amazonaws.com"})}


def test_only_the_relay_may_put_events_on_the_bus(
    pipeline_template: Template, results_template: Template
) -> None:
    bus_id, _ = _bus(results_template)
    relay = _role_actions(pipeline_template, RELAY)
    scheduler = _role_actions(pipeline_template, SCHEDULER)

    (bus_arn,) = relay["events:PutEvents"]
    assert local_id(bus_arn, results_template) == bus_id
    assert not [action for action in scheduler if action.startswith("events:Put")]


def test_the_relay_publishes_on_the_bus_named_in_its_environment(
    pipeline_template: Template, results_template: Template
) -> None:
    bus_id, _ = _bus(results_template)
    _, relay = function_by_handler(pipeline_template, RELAY)
    variables = relay["Properties"]["Environment"]["Variables"]

    assert local_id(variables["RESULTS_BUS_NAME"], results_template) == bus_id
    assert variables["RESULTS_EVENT_SOURCE"] == "tollgate.dev"
    assert {"RESULTS_BUS_NAME", "RESULTS_EVENT_SOURCE"} <= {
        name.upper() for name in RelaySettings.model_fields
    }
