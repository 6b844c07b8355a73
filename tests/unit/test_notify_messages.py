"""The WebSocket protocol's client message: a subscribe with an optional cursor and filters, or a clear error
saying what is wrong - never an exception the route would turn into a dropped connection."""

import json
from uuid import uuid4

import pytest

from tollgate.notify.messages import (
    MAX_CLIENT_MESSAGE_BYTES,
    BadMessage,
    Resync,
    StateChanged,
    Subscribe,
    parse_client_message,
)


def test_a_subscribe_with_a_cursor_and_filters_is_read():
    job = uuid4()
    message = parse_client_message(
        json.dumps(
            {"action": "subscribe", "cursor": 41, "job_ids": [str(job)], "job_types": ["invoice_extraction"]}
        )
    )
    assert message == Subscribe(
        action="subscribe", cursor=41, job_ids=[job], job_types=["invoice_extraction"]
    )


def test_the_last_bigint_is_still_a_cursor():
    assert parse_client_message('{"action": "subscribe", "cursor": 9223372036854775807}').cursor == 2**63 - 1


def test_a_subscribe_without_a_cursor_is_from_now_on():
    assert parse_client_message(b'{"action": "subscribe"}').cursor is None


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        (None, "send a JSON object"),
        ("not json", "not JSON"),
        ("[1, 2]", "the only action"),
        ('{"action": "unsubscribe"}', "the only action"),
        ('{"action": "subscribe", "cursor": -1}', "cursor"),
        ('{"action": "subscribe", "cursor": "5"}', "cursor"),
        ('{"action": "subscribe", "cursor": true}', "cursor"),
        ('{"action": "subscribe", "cursor": 2.5}', "cursor"),
        ('{"action": "subscribe", "cursor": 9223372036854775808}', "cursor"),
        ('{"action": "subscribe", "cursor": 1' + "0" * 5_000 + "}", "too large"),
        ('{"action": "subscribe", "job_ids": ["not-a-uuid"]}', "job_ids"),
        ('{"action": "subscribe", "extra": 1}', "extra"),
        ("[" * 100_000 + "]" * 100_000, "at most"),
        ("[" * 30_000 + "]" * 30_000, "not JSON"),
        ('{"action": "subscribe", "pad": "' + "x" * MAX_CLIENT_MESSAGE_BYTES + '"}', "at most"),
    ],
)
def test_a_bad_message_gets_an_error_reply_saying_why(raw, says):
    with pytest.raises(BadMessage) as caught:
        parse_client_message(raw)
    reply = json.loads(caught.value.reply.encode())
    assert reply["type"] == "error" and reply["status"] == 400
    assert says in reply["detail"]


def test_server_messages_carry_the_change_and_never_a_result():
    changed = json.loads(
        StateChanged(
            sequence=3,
            job_id=uuid4(),
            job_type="invoice_extraction",
            state="SUCCEEDED",
            state_version=3,
            occurred_at="2026-12-02T10:00:00Z",
        ).encode()
    )
    assert set(changed) == {"type", "sequence", "job_id", "job_type", "state", "state_version", "occurred_at"}
    assert json.loads(Resync(latest=9, reason="cursor_too_old").encode()) == {
        "type": "resync",
        "latest": 9,
        "reason": "cursor_too_old",
    }
