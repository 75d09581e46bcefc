"""examples/graph_llm.py against the local fake model server, once per API."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from examples import graph_llm
from hypha_celery import Hypha
from hypha_celery.backends.llm.pricing import Price
from tests.fakes.llm_server import FakeLLM, Reply


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeLLM]:
    monkeypatch.chdir(tmp_path)  # the embedded app keeps its SQLite store in ./.hypha/
    for name in ("HYPHA_BROKER_URL", "HYPHA_STORE_URL", "HYPHA_RESULT_BACKEND"):
        monkeypatch.delenv(name, raising=False)
    with FakeLLM() as server:
        yield server


@pytest.mark.parametrize("provider", ["openai", "openai-chat", "anthropic"])
def test_the_node_runs_the_tool_then_answers_streaming_its_tokens(
        fake: FakeLLM, provider: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(graph_llm.PROVIDERS[provider][1], "sk-test-example-key")
    fake.script(Reply.tool_call("math_multiply", {"a": 17.5, "b": 23}, call_id="call_9"),
                Reply.text("17.5 * 23 = 402.5", chunks=4, usage=(30, 9, 0, 0)))
    url = fake.url if provider == "anthropic" else fake.openai_url
    model = graph_llm.PROVIDERS[provider][0]
    hypha: Hypha = graph_llm.app(url, provider,
                                 prices={f"{provider}:{model}": Price(input=1.0, output=2.0)})
    try:
        out = graph_llm.run(hypha, "What is 17.5 * 23?", provider=provider)
    finally:
        hypha.close()
    assert out["answer"] == out["streamed"] == "17.5 * 23 = 402.5"
    assert out["calls"] == 2 and out["tokens"] == 15 + 39
    assert out["cost_usd"] == pytest.approx((10 + 30 + 2 * (5 + 9)) / 1e6)
    second = json.dumps(fake.requests[1].body)
    assert "402.5" in second and "call_9" in second and graph_llm.SYSTEM in second


def test_without_a_key_it_says_how_to_run(monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setattr("sys.argv", ["graph_llm"])
    graph_llm.main()
    assert "set OPENAI_API_KEY to run this example" in capsys.readouterr().out
