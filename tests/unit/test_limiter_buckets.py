"""The pure arithmetic of the shared budget: bucket waits, shard counts and splits, permit ids, and reading an
item."""

import pytest

from tollgate.execution.limiter.dynamodb import (
    ShardState,
    bucket_wait,
    derive_shards,
    local_permit_id,
    shard_of,
    shard_permit_id,
    split_evenly,
)

NOW = 1_000.0


def test_a_full_bucket_has_room_now() -> None:
    assert bucket_wait(full_at=NOW - 5, now=NOW, cost_seconds=10) == 0


def test_a_partly_spent_bucket_has_room_while_the_cost_fits_in_what_is_left() -> None:
    # Full again in 50 s: 10 s of the 60 s window are left.
    assert bucket_wait(full_at=NOW + 50, now=NOW, cost_seconds=10) == 0
    assert bucket_wait(full_at=NOW + 50, now=NOW, cost_seconds=12) == pytest.approx(2)


def test_a_cost_larger_than_the_bucket_waits_for_a_full_bucket_rather_than_forever() -> None:
    assert bucket_wait(full_at=NOW + 7, now=NOW, cost_seconds=90) == pytest.approx(7)
    assert bucket_wait(full_at=NOW, now=NOW, cost_seconds=90) == 0


@pytest.mark.parametrize(
    ("requests_per_minute", "max_in_flight", "configured", "expected"),
    [
        (500, 50, 0, 1),
        (10_000, 50, 0, 1),  # 500 writes/s
        (30_000, 50, 0, 2),  # 1,500 writes/s
        (120_000, 50, 0, 6),
        (120_000, 4, 0, 4),  # never more shards than permits in flight
        (500, 50, 3, 3),
    ],
)
def test_shards_keep_each_item_under_a_thousand_writes_a_second(
    requests_per_minute: float, max_in_flight: int, configured: int, expected: int
) -> None:
    assert derive_shards(requests_per_minute, max_in_flight, configured) == expected


def test_in_flight_permits_split_evenly_and_add_up() -> None:
    assert split_evenly(10, 4) == [3, 3, 2, 2]
    assert sum(split_evenly(50, 7)) == 50


def test_an_item_reads_back_as_the_state_it_holds() -> None:
    item = {
        "pk": {"S": "pool#0"},
        "req_full_at": {"N": "1000.5"},
        "tok_full_at": {"N": "990"},
        "permits": {"M": {"0.abc": {"N": "1300"}, "0.def": {"N": "900"}}},
        "cooldown_until": {"N": "0"},
        "share": {"N": "0.5"},
        "decreased_at": {"N": "950"},
        "provider_rpm": {"N": "300"},
    }

    state = ShardState.from_item(item)

    assert state.requests_full_at == 1000.5 and state.share == 0.5 and state.provider_rpm == 300
    assert state.provider_tpm is None
    assert state.live_permits(NOW) == 1
    assert state.expired_permits(NOW) == ["0.def"]


def test_a_permit_id_names_the_shard_it_is_held_in() -> None:
    assert [shard_of(shard_permit_id(shard, "0f3a")) for shard in (0, 7, 12)] == [0, 7, 12]
    assert shard_of(local_permit_id("0f3a")) is None, "the local allowance's permits are in no shard item"
