from datetime import UTC, datetime
from uuid import uuid4

import pytest

from tollgate.accept.service import decode_cursor, encode_cursor
from tollgate.core.errors import InvalidRequest


def test_a_cursor_round_trips():
    created, job_id = datetime(2026, 3, 1, 12, 0, 0, 123456, tzinfo=UTC), uuid4()
    assert decode_cursor(encode_cursor(created, job_id)) == (created, job_id)


@pytest.mark.parametrize("forged", ["", "!!!", "bm9wZQ", "eyJjIjogMX0"])
def test_a_forged_cursor_is_a_clear_400(forged):
    with pytest.raises(InvalidRequest):
        decode_cursor(forged)
