"""The user's price table: cost per call, None when unpriced."""

from __future__ import annotations

import pytest

from hypha_celery.backends.llm.pricing import Price, PriceTable
from hypha_celery.backends.llm.types import Usage


def test_cost_counts_cached_input_at_its_own_price() -> None:
    table = PriceTable({"openai:gpt-test": Price(input=2.0, output=8.0, cache_read=0.5)})
    usage = Usage(input_tokens=1_000, output_tokens=500, cache_read_tokens=400)
    # 600 fresh * 2 + 400 cached * 0.5 + 500 out * 8, per million
    assert table.cost("openai:gpt-test", usage) == pytest.approx(0.0054)
    # Chat Completions and bare-name lookups find the same price
    assert table.cost("openai-chat:gpt-test", usage) == pytest.approx(0.0054)
    bare = PriceTable({"claude-x": {"input": 3, "output": 15, "cache_write": 3.75}})
    assert bare.cost("anthropic:claude-x", Usage(100, 10, 0, 100)) == pytest.approx(
        (100 * 3.75 + 10 * 15) / 1e6)


def test_an_unpriced_model_costs_none_and_nothing_is_built_in() -> None:
    assert PriceTable().cost("openai:gpt-4.1-mini", Usage(10, 10)) is None
    assert not PriceTable()
    assert PriceTable('{"openai:a": {"input": 1, "output": 1}}').price("openai:a") == \
        Price(1, 1)


@pytest.mark.parametrize("bad", [{"input": -1, "output": 1}, {"input": 1},
                                 {"input": 1, "output": 1, "cached": 1}, [1, 2]])
def test_a_bad_price_is_refused(bad: object) -> None:
    with pytest.raises((ValueError, TypeError)):
        PriceTable({"openai:a": bad})  # type: ignore[dict-item]
