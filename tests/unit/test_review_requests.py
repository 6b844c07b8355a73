"""What a reviewer sends: a decision with a note, corrections only with correct, and If-Match naming one
state_version."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from tollgate.api.routes.reviews import etag, expected_version
from tollgate.core.errors import InvalidRequest
from tollgate.review.models import Decision, ReviewDecisionRequest


def test_each_decision_in_its_valid_shape():
    assert ReviewDecisionRequest(decision="approve", note="ok").decision is Decision.APPROVE
    assert ReviewDecisionRequest(decision="reject", note="a duplicate").corrections is None
    correct = ReviewDecisionRequest(decision="correct", note="total misread", corrections={"total": "1.00"})
    assert correct.corrections == {"total": "1.00"}


@pytest.mark.parametrize(
    "body",
    [
        {"decision": "correct", "note": "x"},
        {"decision": "correct", "note": "x", "corrections": {}},
        {"decision": "approve", "note": "x", "corrections": {"total": "1.00"}},
        {"decision": "reject", "note": "x", "corrections": {}},
        {"decision": "approve", "note": "   "},
        {"decision": "approve"},
        {"decision": "maybe", "note": "x"},
        {"decision": "approve", "note": "x", "reviewer": "me"},
        {"decision": "correct", "note": "x", "corrections": {"total": "1.00\x00"}},
        {"decision": "approve", "note": "x" * 2001},
    ],
    ids=[
        "correct-without-corrections",
        "correct-with-an-empty-patch",
        "approve-with-corrections",
        "reject-with-corrections",
        "a-blank-note",
        "no-note",
        "an-unknown-decision",
        "a-field-too-many",
        "a-nul-in-a-correction",
        "a-note-too-long",
    ],
)
def test_a_decision_that_does_not_make_sense_is_refused(body):
    with pytest.raises(ValidationError):
        ReviewDecisionRequest.model_validate(body)


@pytest.mark.parametrize(
    ("header", "version"), [('"7"', 7), ("7", 7), (' "12" ', 12), (None, None), ("*", None)]
)
def test_if_match_names_one_state_version_or_none(header, version):
    assert expected_version(header) == version


@pytest.mark.parametrize("header", ['W/"7"', '"7", "8"', '"seven"', "-1", '"7'])
def test_anything_else_in_if_match_is_a_bad_request(header):
    with pytest.raises(InvalidRequest):
        expected_version(header)


def test_the_etag_is_the_quoted_state_version_and_reads_back():
    assert etag(7) == '"7"'
    assert expected_version(etag(7)) == 7
