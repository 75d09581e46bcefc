"""What a call cost, from a price table the user configures.

No prices are built in: providers change them, and a stale table would report wrong
costs with confidence. Without a price for a model the cost is ``None`` (unpriced), never
a guess.

A :class:`Price` is US dollars per million tokens: ``input``, ``output``, and optionally
``cache_read`` / ``cache_write`` (default: the input price). Tables are keyed by model
reference (``"openai:gpt-4.1-mini"``), by ``vendor:model`` (so ``openai-chat:x`` finds
``openai:x``) or by the bare model name, looked up in that order::

    PriceTable({"openai:gpt-4.1-mini": Price(input=0.40, output=1.60, cache_read=0.10)})

Cost of a call: ``usage.input_tokens`` counts every input token, cached ones included
(see :class:`~hypha_celery.backends.llm.types.Usage`), so the uncached input is
``input - cache_read - cache_write`` at the input price, each cache part at its own,
plus the output at the output price.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hypha_celery.backends.llm.ref import PROVIDERS, ModelRef
from hypha_celery.backends.llm.types import Usage

__all__ = ["Price", "PriceTable"]

_MILLION = 1_000_000


@dataclass(frozen=True, slots=True)
class Price:
    """US dollars per million tokens."""

    input: float
    output: float
    cache_read: float | None = None
    cache_write: float | None = None

    def __post_init__(self) -> None:
        for name in ("input", "output", "cache_read", "cache_write"):
            value = getattr(self, name)
            if value is None and name.startswith("cache"):
                continue
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                raise ValueError(f"Price.{name} must be a number >= 0 (USD per million tokens)")

    @classmethod
    def of(cls, value: Price | Mapping[str, Any]) -> Price:
        if isinstance(value, Price):
            return value
        if not isinstance(value, Mapping):
            raise ValueError("a price is Price(...) or {'input', 'output', 'cache_read'?, "
                             "'cache_write'?}")
        unknown = set(value) - {"input", "output", "cache_read", "cache_write"}
        if unknown:
            raise ValueError(f"unknown price field {sorted(unknown)[0]!r}")
        return cls(**value)

    def cost(self, usage: Usage) -> float:
        read = self.input if self.cache_read is None else self.cache_read
        write = self.input if self.cache_write is None else self.cache_write
        fresh = max(0, usage.input_tokens - usage.cache_read_tokens - usage.cache_write_tokens)
        total = (fresh * self.input + usage.cache_read_tokens * read
                 + usage.cache_write_tokens * write + usage.output_tokens * self.output)
        return round(total / _MILLION, 10)


class PriceTable:
    """Prices by model reference (see the module docstring); empty by default."""

    def __init__(self, prices: Mapping[str, Price | Mapping[str, Any]] | str | None = None
                 ) -> None:
        if isinstance(prices, str):
            prices = json.loads(prices) if prices.strip() else {}
        if prices is not None and not isinstance(prices, Mapping):
            raise ValueError("model prices are a mapping of model reference to a price")
        self._prices = {str(k): Price.of(v) for k, v in (prices or {}).items()}

    def __bool__(self) -> bool:
        return bool(self._prices)

    def price(self, ref: ModelRef | str) -> Price | None:
        ref = ModelRef.parse(ref)
        vendor = PROVIDERS[ref.provider].vendor
        for name in (str(ref), f"{vendor}:{ref.model}", ref.model):
            found = self._prices.get(name)
            if found is not None:
                return found
        return None

    def cost(self, ref: ModelRef | str, usage: Usage) -> float | None:
        """US dollars, or None when the model has no price."""
        price = self.price(ref)
        return None if price is None else price.cost(usage)
