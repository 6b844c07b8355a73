"""What a provider call costs: the list price of its tokens, and the Batch API's price with what it saved.
Pure; the price table is PricingSettings.model_prices (USD per million input and output tokens)."""

from __future__ import annotations

from decimal import Decimal

from tollgate.usage.spend import MICRO, Prices

PER_MILLION = Decimal(1_000_000)


def _unrounded_list_cost(prices: Prices, model: str, input_tokens: int, output_tokens: int) -> Decimal:
    # An unpriced model costs nothing, as in the immediate path's cost_of.
    per_input, per_output = prices.get(model, (0.0, 0.0))
    return (Decimal(str(per_input)) * input_tokens + Decimal(str(per_output)) * output_tokens) / PER_MILLION


def list_cost(prices: Prices, model: str, input_tokens: int, output_tokens: int) -> Decimal:
    """The tokens at the list price, to the micro-dollar the counters keep: what an immediate call costs
    (the same figure as tollgate.execution.attempt.cost_of)."""
    return _unrounded_list_cost(prices, model, input_tokens, output_tokens).quantize(MICRO)


def batch_cost(
    prices: Prices, model: str, input_tokens: int, output_tokens: int, factor: float
) -> tuple[Decimal, Decimal]:
    """(paid, discount) for tokens run through the Batch API at ``factor`` of the list price
    (PricingSettings.batch_price_factor). The paid price is rounded once, from the exact product, and the
    discount is the rest of the rounded list cost, so paid + discount is the list cost to the micro-dollar
    and neither is ever negative."""
    if not 0 < factor <= 1:  # also refuses NaN
        raise ValueError(f"a batch price factor is in (0, 1], not {factor}")
    share = Decimal(str(factor))
    full = list_cost(prices, model, input_tokens, output_tokens)
    # Rounding is monotonic, so the rounded share never exceeds the rounded whole: discount >= 0.
    paid = (_unrounded_list_cost(prices, model, input_tokens, output_tokens) * share).quantize(MICRO)
    return paid, full - paid
