"""Clients made for an entrypoint are held to what tollgate.core.reach declares it calls, while enforced."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from moto import mock_aws

from tollgate.core import reach
from tollgate.core.aws import aws_client, lazy_client
from tollgate.core.reach import ENTRYPOINTS, UndeclaredCall, enforce


@pytest.fixture(autouse=True)
def own_enforcement(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests open and close enforcement themselves: a local system another test of this process keeps
    running (the integration suite's session stack) has its own block open, which must not count here."""
    monkeypatch.setattr(reach, "_WATCHERS", [])


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name, value in {
        "AWS_DEFAULT_REGION": "eu-west-1",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with mock_aws():
        yield


def test_a_declared_call_goes_through(aws: None) -> None:
    events = lazy_client("events", "outbox_relay")

    with enforce() as undeclared:
        answer = events.put_events(Entries=[{"Source": "s", "DetailType": "d", "Detail": "{}"}])

    assert answer["FailedEntryCount"] == 0 and undeclared == []


def test_a_call_the_declaration_misses_is_refused_and_recorded(aws: None) -> None:
    """Given the relay's SQS client, when it deletes a queue (the relay only sends), the call never leaves."""
    sqs = aws_client("sqs", entrypoint="outbox_relay")
    url = aws_client("sqs", entrypoint=None).create_queue(QueueName="jobs")["QueueUrl"]  # the test's setup

    with enforce() as undeclared, pytest.raises(UndeclaredCall, match="outbox_relay called sqs:DeleteQueue"):
        sqs.delete_queue(QueueUrl=url)

    assert len(undeclared) == 1
    assert sqs.get_queue_url(QueueName="jobs")["QueueUrl"] == url


def test_the_planted_missing_declaration_of_the_relay_s_put_events_is_caught(
    aws: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Given the relay's declaration without events:PutEvents (and so, by test_reach, no grant or endpoint
    needed for it), its publish is refused."""
    relay = ENTRYPOINTS["outbox_relay"]
    planted = type(relay)(tuple(c for c in relay.calls if c.service != "events"))
    # Under a name of its own, so a relay another test of this process runs keeps its declaration.
    monkeypatch.setitem(ENTRYPOINTS, "planted_relay", planted)
    events = aws_client("events", entrypoint="planted_relay")

    with enforce(), pytest.raises(UndeclaredCall):
        events.put_events(Entries=[{"Source": "s", "DetailType": "d", "Detail": "{}"}])


def test_without_enforcement_and_without_an_entrypoint_nothing_is_checked(aws: None) -> None:
    made_for_relay = aws_client("sqs", entrypoint="outbox_relay")
    made_for_a_person = aws_client("sqs", entrypoint=None)

    made_for_relay.create_queue(QueueName="unchecked")
    with enforce() as undeclared:
        made_for_a_person.create_queue(QueueName="the-cli-s")

    assert undeclared == []


def test_an_unknown_entrypoint_fails_when_its_client_is_made(aws: None) -> None:
    with pytest.raises(KeyError, match="declares no reach"):
        aws_client("sqs", entrypoint="no_such_function")
