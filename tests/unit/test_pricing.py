"""Batch price: what an attempt through the Batch API pays and saves, to the micro-dollar the counters keep,
always adding up to the list price an immediate call would have cost."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tollgate.execution.attempt import cost_of
from tollgate.usage.pricing import batch_cost, list_cost

PRICES = {"gpt-4.1-mini": (0.40, 1.60), "gpt-4.1": (2.00, 8.00), "odd": (0.15, 0.6)}


def test_half_price_pays_half_and_records_the_other_half_as_discount():
    # given 900 input and 300 output tokens on gpt-4.1-mini: 0.00036 + 0.00048 = 0.00084 USD at list price
    paid, discount = batch_cost(PRICES, "gpt-4.1-mini", 900, 300, 0.5)

    assert (paid, discount) == (Decimal("0.000420"), Decimal("0.000420"))
    assert paid.as_tuple().exponent == discount.as_tuple().exponent == -6


def test_a_share_that_does_not_divide_evenly_rounds_the_paid_part_once_and_the_discount_takes_the_rest():
    # 1 input token on "odd" lists at 0.00000015 USD (0.000000 rounded); a third of it is 0.00000005 (0.000000).
    # 7 output tokens list at 0.0000042 (0.000004); 0.3 of the exact figure is 0.00000126: 0.000001 paid, and
    # the discount is the rest of the rounded list cost, 0.000003.
    assert batch_cost(PRICES, "odd", 1, 0, 1 / 3) == (Decimal("0.000000"), Decimal("0.000000"))
    assert batch_cost(PRICES, "odd", 0, 7, 0.3) == (Decimal("0.000001"), Decimal("0.000003"))


def test_a_factor_of_one_is_the_list_price_with_no_discount():
    assert batch_cost(PRICES, "gpt-4.1", 12_345, 678, 1.0) == (
        cost_of(PRICES, "gpt-4.1", 12_345, 678),
        Decimal("0.000000"),
    )


def test_an_unpriced_model_costs_and_saves_nothing():
    assert batch_cost(PRICES, "unknown", 1000, 1000, 0.5) == (Decimal("0.000000"), Decimal("0.000000"))


@pytest.mark.parametrize("factor", [0.0, -0.5, 1.01, float("nan")])
def test_a_factor_outside_zero_to_one_is_refused(factor):
    with pytest.raises(ValueError, match="batch price factor"):
        batch_cost(PRICES, "gpt-4.1", 1, 1, factor)


@settings(max_examples=300, deadline=None)
@given(
    model=st.sampled_from(sorted(PRICES)),
    input_tokens=st.integers(min_value=0, max_value=2_000_000),
    output_tokens=st.integers(min_value=0, max_value=200_000),
    factor=st.floats(min_value=0.001, max_value=1.0),
)
def test_paid_plus_discount_is_the_list_cost_exactly(model, input_tokens, output_tokens, factor):
    paid, discount = batch_cost(PRICES, model, input_tokens, output_tokens, factor)

    listed = cost_of(PRICES, model, input_tokens, output_tokens)
    assert list_cost(PRICES, model, input_tokens, output_tokens) == listed
    assert paid + discount == listed
    assert paid >= 0 and discount >= 0
    assert paid == paid.quantize(Decimal("0.000001")) and discount == discount.quantize(Decimal("0.000001"))
    # Within half a micro-dollar of the exact share.
    assert abs(paid - listed * Decimal(str(factor))) <= Decimal("0.000001")
