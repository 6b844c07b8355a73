"""The local gateway frames requests as an HTTP front end does: a body that never arrives in full, a
Content-Length that is not a length, or two that disagree, are answered with a 400 problem and the
connection closed; neither the authorizer nor the API sees the request, so nothing is written. A raw socket
client sends exactly the bytes each case needs."""

from __future__ import annotations

import json
import socket
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from tests.support import count_rows, invoice_request
from tollgate.core.clock import new_id
from tollgate.db import Database
from tollgate.tenants.keys import create_tenant
from tollgate_dev.local.runtime import LocalStack

pytestmark = pytest.mark.integration

# Short, so a body that stalls is refused quickly here.
BODY_READ_TIMEOUT = 0.3
# How long the client waits for an answer; it runs out only when the gateway does not answer at all.
PATIENCE_SECONDS = 15
BODY = json.dumps(invoice_request()).encode()


@dataclass
class RawAnswer:
    status: int
    headers: dict[str, str]
    body: bytes


def exchange(url: str, head_lines: list[str], body: bytes, *, half_close: bool = False) -> RawAnswer:
    """Sends ``head_lines`` and ``body`` as they are and reads until the server closes the connection;
    ``half_close`` ends the client's side of the stream after sending, as a client that gave up would."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=PATIENCE_SECONDS) as sock:
        sock.sendall(("\r\n".join(head_lines) + "\r\n\r\n").encode() + body)
        if half_close:
            sock.shutdown(socket.SHUT_WR)
        received = b""
        try:
            while chunk := sock.recv(65536):
                received += chunk
        except TimeoutError:
            pytest.fail(f"no complete answer within {PATIENCE_SECONDS} s; received {received[:300]!r}")
    head, _, payload = received.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("iso-8859-1").split("\r\n")
    headers = {}
    for line in header_lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return RawAnswer(int(status_line.split()[1]), headers, payload)


def job_request(api_key: str, content_length: str | list[str]) -> list[str]:
    lengths = [content_length] if isinstance(content_length, str) else content_length
    return [
        "POST /extraction-jobs HTTP/1.1",
        "Host: 127.0.0.1",
        f"Authorization: Bearer {api_key}",
        "Content-Type: application/json",
        "Idempotency-Key: framing-1",
        *(f"Content-Length: {length}" for length in lengths),
    ]


@pytest.fixture
def short_wait_stack(stack_factory: Callable[..., LocalStack]) -> LocalStack:
    return stack_factory(gateway_body_read_timeout=BODY_READ_TIMEOUT)


@pytest.fixture
def api_key(system_db: Database, clean_db: str) -> str:
    return create_tenant(system_db, "acme", new_id).api_key


def assert_refused_and_nothing_written(answer: RawAnswer, before: dict[str, int], clean_db: str, says: str):
    assert answer.status == 400, answer.body[:500]
    assert answer.headers["content-type"] == "application/problem+json"
    assert answer.headers["connection"] == "close"
    assert int(answer.headers["content-length"]) == len(answer.body)
    problem = json.loads(answer.body)
    assert problem["type"] == "https://tollgate.dev/problems/invalid-request"
    assert problem["status"] == 400
    assert says in problem["detail"]
    assert count_rows(clean_db) == before


def test_a_body_that_stops_short_of_its_content_length_is_refused_after_the_read_timeout(
    short_wait_stack, api_key, clean_db
):
    """Given a whole job body announced 10 bytes longer than it is, and a client that keeps waiting, when
    the body never completes, the gateway answers 400 once its read timeout passes and writes nothing."""
    before = count_rows(clean_db)

    answer = exchange(short_wait_stack.api_url, job_request(api_key, str(len(BODY) + 10)), BODY)

    assert_refused_and_nothing_written(answer, before, clean_db, "did not arrive in full within 0.3 s")
    assert "10 of its Content-Length" in json.loads(answer.body)["detail"]


def test_a_body_the_client_ends_short_of_its_content_length_is_refused_and_no_job_is_written(
    short_wait_stack, api_key, clean_db
):
    """The same body, its client closing its side after sending: the request is incomplete, not a job."""
    before = count_rows(clean_db)

    answer = exchange(
        short_wait_stack.api_url, job_request(api_key, str(len(BODY) + 10)), BODY, half_close=True
    )

    assert_refused_and_nothing_written(answer, before, clean_db, "ended 10 bytes short")


@pytest.mark.parametrize(
    "content_length",
    ["-1", "abc", "1e3", "0x10", "+5", "", ["5", "7"]],
    ids=["negative", "letters", "exponent", "hex", "signed", "empty", "two-that-disagree"],
)
def test_a_content_length_that_is_not_one_length_is_a_400_answered_at_once(
    short_wait_stack, api_key, clean_db, content_length
):
    before = count_rows(clean_db)

    answer = exchange(short_wait_stack.api_url, job_request(api_key, content_length), b"")

    assert_refused_and_nothing_written(answer, before, clean_db, "Content-Length must be")


def test_the_gateway_serves_the_same_request_whole_after_refusing_a_short_one(
    short_wait_stack, api_key, clean_db
):
    """A refusal costs only its own connection: the next request, framed right, is a job."""
    refused = exchange(
        short_wait_stack.api_url, job_request(api_key, str(len(BODY) + 1)), BODY, half_close=True
    )

    answer = exchange(
        short_wait_stack.api_url, [*job_request(api_key, str(len(BODY))), "Connection: close"], BODY
    )

    assert refused.status == 400, refused.body[:500]
    assert answer.status == 202, answer.body[:500]
    assert count_rows(clean_db)["extraction_jobs"] == 1
