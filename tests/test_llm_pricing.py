"""Pricing a response's usage from the ``llm.prices`` table."""

from __future__ import annotations

import anthropic
import pytest

from agentfleet.config import ModelPrice, load_settings
from agentfleet.errors import ConfigError, DownstreamError
from agentfleet.llm.pricing import cost_usd, price_for
from agentfleet.models import TokenUsage

PRICES = {
    "claude-haiku-4-5": ModelPrice(
        input_per_mtok=1.0, output_per_mtok=5.0, cache_write_per_mtok=1.25, cache_read_per_mtok=0.1
    ),
    "claude-sonnet-4-5": ModelPrice(input_per_mtok=3.0, output_per_mtok=15.0),
    "claude-3-5-haiku-latest": ModelPrice(input_per_mtok=0.8, output_per_mtok=4.0),
}


def test_cost_is_each_count_times_its_price_per_million() -> None:
    usage = {
        "input_tokens": 1_000,
        "output_tokens": 500,
        "cache_creation_input_tokens": 2_000,
        "cache_read_input_tokens": 10_000,
    }
    # 1000 * 1.0 + 500 * 5.0 + 2000 * 1.25 + 10000 * 0.1 = 7000 dollar-tokens per million
    assert cost_usd("claude-haiku-4-5", usage, PRICES) == pytest.approx(0.007)


def test_cost_reads_the_sdks_usage_object_with_missing_cache_counts() -> None:
    usage = anthropic.types.Usage(input_tokens=2_000_000, output_tokens=1_000_000)
    assert cost_usd("claude-sonnet-4-5", usage, PRICES) == pytest.approx(6.0 + 15.0)


def test_default_price_table_prices_cache_writes_and_reads() -> None:
    prices = load_settings().llm.prices
    usage = TokenUsage(cache_creation_input_tokens=1_000_000, cache_read_input_tokens=1_000_000)
    assert cost_usd("claude-haiku-4-5", usage, prices) == pytest.approx(1.25 + 0.1)


@pytest.mark.parametrize(
    ("model", "priced_as"),
    [
        ("claude-haiku-4-5", "claude-haiku-4-5"),
        ("claude-haiku-4-5-20251001", "claude-haiku-4-5"),
        ("claude-3-5-haiku-20241022", "claude-3-5-haiku-latest"),
        ("claude-sonnet-4-5-preview", "claude-sonnet-4-5"),
    ],
)
def test_model_names_resolve_to_their_price(model: str, priced_as: str) -> None:
    assert price_for(model, PRICES) == PRICES[priced_as]


def test_an_unknown_model_is_a_config_error_naming_the_setting() -> None:
    with pytest.raises(ConfigError, match=r"llm\.prices") as caught:
        cost_usd("claude-opus-9", {"input_tokens": 1, "output_tokens": 1}, PRICES)
    assert "claude-opus-9" in caught.value.message
    assert "AGENTFLEET_LLM__PRICES" in caught.value.message


def test_a_negative_count_is_refused() -> None:
    with pytest.raises(DownstreamError, match="input_tokens"):
        TokenUsage.of({"input_tokens": -1})


def test_usages_add_up() -> None:
    total = TokenUsage(1, 2, 3, 4) + TokenUsage(10, 20, 30, 40)
    assert total == TokenUsage(11, 22, 33, 44)
    assert (total.total_input, total.total) == (11 + 33 + 44, 11 + 22 + 33 + 44)
