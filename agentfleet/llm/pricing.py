"""The dollar cost of an LLM reply (any vendor's), from the price table in ``llm.prices``.

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
from typing import Any

from agentfleet.config import ModelPrice
from agentfleet.errors import ConfigError
from agentfleet.models import TokenUsage

__all__ = ["cost_usd", "price_for"]

_PER_TOKEN = 1_000_000.0
_SNAPSHOT_SUFFIX = re.compile(r"-(latest|\d{8})$")


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
