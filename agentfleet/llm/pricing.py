"""The dollar cost of a Messages API response, from the price table in ``llm.prices``.

Prices are US dollars per million tokens (``ModelPrice``). A response's cost is::

    input_tokens                * input_per_mtok
  + output_tokens               * output_per_mtok
  + cache_creation_input_tokens * cache_write_per_mtok
  + cache_read_input_tokens     * cache_read_per_mtok     (all divided by 1,000,000)

Cache writes are priced at ``cache_write_per_mtok`` whatever their time to live.

Which price a model gets:

1. the table entry named exactly like the model;
2. else the entry whose name, with a trailing ``-latest`` or ``-YYYYMMDD`` snapshot date
   removed, equals the model's name with the same suffix removed
   (``claude-haiku-4-5-20251001`` is priced as ``claude-haiku-4-5``);
3. else the longest entry that prefixes the model's name at a ``-`` boundary
   (``claude-sonnet-4-5-preview`` is priced as ``claude-sonnet-4-5``);
4. else ``ConfigError`` naming the setting ``llm.prices``. An unknown model is never priced by
   guessing its family: a wrong price would let a budget be crossed without anyone noticing.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agentfleet.config import ModelPrice
from agentfleet.errors import ConfigError, DownstreamError

__all__ = ["TokenUsage", "cost_usd", "price_for"]

_PER_TOKEN = 1_000_000.0
_SNAPSHOT_SUFFIX = re.compile(r"-(latest|\d{8})$")


@dataclass(frozen=True)
class TokenUsage:
    """Token counts of one response (or a sum of responses). All fields are token counts."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0

    @classmethod
    def of(cls, usage: Any) -> TokenUsage:
        """Read counts from an SDK ``Usage``, a dict, or any object with those attributes.

        Missing or ``None`` counts are zero. A negative or non-integer count means a malformed
        response: ``DownstreamError``.
        """
        if isinstance(usage, TokenUsage):
            return usage

        def read(name: str) -> int:
            value = usage.get(name) if isinstance(usage, Mapping) else getattr(usage, name, None)
            if value is None:
                return 0
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise DownstreamError(f"usage.{name} is not a token count: {value!r}")
            return value

        return cls(
            input_tokens=read("input_tokens"),
            output_tokens=read("output_tokens"),
            cache_creation_input_tokens=read("cache_creation_input_tokens"),
            cache_read_input_tokens=read("cache_read_input_tokens"),
        )

    @property
    def total_input(self) -> int:
        """Every input token: uncached, written to the cache and read from it."""
        return self.input_tokens + self.cache_creation_input_tokens + self.cache_read_input_tokens

    @property
    def total(self) -> int:
        """Every input and output token."""
        return self.total_input + self.output_tokens

    def __add__(self, other: TokenUsage) -> TokenUsage:
        return TokenUsage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cache_creation_input_tokens + other.cache_creation_input_tokens,
            self.cache_read_input_tokens + other.cache_read_input_tokens,
        )


def _strip_snapshot(name: str) -> str:
    return _SNAPSHOT_SUFFIX.sub("", name)


def price_for(model: str, prices: Mapping[str, ModelPrice]) -> ModelPrice:
    """The price entry for ``model`` by the rules in this module's docstring."""
    exact = prices.get(model)
    if exact is not None:
        return exact
    base = _strip_snapshot(model)
    for name in sorted(prices):
        if _strip_snapshot(name) == base:
            return prices[name]
    prefixed = [name for name in prices if model.startswith(name + "-")]
    if prefixed:
        return prices[max(prefixed, key=len)]
    known = ", ".join(sorted(prices)) or "none"
    raise ConfigError(
        f"no price for model {model!r} in llm.prices (known: {known}). Add it to "
        f'[llm.prices."{model}"] in agentfleet.toml (input_per_mtok, output_per_mtok, '
        "cache_write_per_mtok, cache_read_per_mtok, in US dollars per million tokens) or to "
        "AGENTFLEET_LLM__PRICES."
    )


def cost_usd(model: str, usage: Any, prices: Mapping[str, ModelPrice]) -> float:
    """The cost in US dollars of ``usage`` (see ``TokenUsage.of``) on ``model``."""
    tokens = TokenUsage.of(usage)
    price = price_for(model, prices)
    return (
        tokens.input_tokens * price.input_per_mtok
        + tokens.output_tokens * price.output_per_mtok
        + tokens.cache_creation_input_tokens * price.cache_write_per_mtok
        + tokens.cache_read_input_tokens * price.cache_read_per_mtok
    ) / _PER_TOKEN
