"""AIMD steps and what the provider's x-ratelimit headers say about headroom."""

import pytest

from tollgate.execution.limiter.aimd import (
    AimdPolicy,
    ProviderHeadroom,
    capped_ceiling,
    headroom_from_headers,
)


def test_a_429_halves_the_share_and_a_success_adds_a_step_of_the_ceiling() -> None:
    policy = AimdPolicy(decrease_factor=0.5, increase_step=0.05)

    assert policy.decreased(0.8) == pytest.approx(0.4)
    assert policy.increased(0.4) == pytest.approx(0.45)


def test_the_share_stays_between_its_floor_and_the_ceiling() -> None:
    policy = AimdPolicy(min_share=0.1)

    assert policy.increased(0.99) == 1.0
    assert policy.decreased(0.15) == 0.1


@pytest.mark.parametrize(
    "arguments", [{"decrease_factor": 1.0}, {"decrease_factor": 0}, {"increase_step": 0}, {"min_share": 0}]
)
def test_a_policy_that_could_never_recover_or_never_back_off_is_refused(arguments: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="between 0 and 1"):
        AimdPolicy(**arguments)


def test_openai_rate_limit_headers_are_read_whatever_their_case() -> None:
    headroom = headroom_from_headers(
        {
            "X-RateLimit-Limit-Requests": "500",
            "x-ratelimit-limit-tokens": "200000",
            "x-ratelimit-remaining-requests": "499",
            "x-ratelimit-remaining-tokens": "195000",
            "x-ratelimit-reset-tokens": "1.5s",
        }
    )

    assert headroom == ProviderHeadroom(500, 200_000, 499, 195_000)


@pytest.mark.parametrize("value", ["", "lots", "-3", "nan", "inf"])
def test_a_header_that_is_not_a_count_is_ignored(value: str) -> None:
    assert headroom_from_headers({"x-ratelimit-remaining-tokens": value}).empty


def test_a_lower_provider_limit_caps_the_configured_ceiling_and_a_higher_one_does_not_raise_it() -> None:
    assert capped_ceiling(500, 300) == 300
    assert capped_ceiling(500, 10_000) == 500
    assert capped_ceiling(500, None) == 500
    assert capped_ceiling(500, 0) == 500
