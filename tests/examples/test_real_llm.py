"""examples/agents/real_llm.py against the local fake model server, once per API."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from examples.agents import _app, real_llm
from hypha_celery import Hypha
from tests.fakes.llm_server import FakeLLM, Reply
from tests.runtime.support import embedded


@pytest.fixture
def hypha(sqlite_url: str) -> Iterator[Hypha]:
    h = _app.use(embedded(sqlite_url))
    try:
        yield h
    finally:
        h.close()


@pytest.mark.parametrize("provider", ["openai", "openai-chat", "anthropic"])
def test_the_calculator_runs_its_tool_then_answers(hypha: Hypha, provider: str,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(real_llm.PROVIDERS[provider][2], "sk-test-example-key")
    with FakeLLM() as fake:
        fake.script(Reply.tool_call("math_multiply", {"a": 17.5, "b": 23}, call_id="call_9"),
                    Reply.text("17.5 * 23 = 402.5", chunks=4, usage=(30, 9, 0, 0)))
        url = fake.url if provider == "anthropic" else fake.openai_url
        state = real_llm.run(hypha, "What is 17.5 * 23?", provider=provider, base_url=url)
        bodies = [json.dumps(r.body) for r in fake.requests]
    assert (state["phase"], state["answer"], state["tool_rounds"]) == (
        "done", "17.5 * 23 = 402.5", 1)
    assert state["usage"]["output_tokens"] == 9
    assert len(bodies) == 2 and "402.5" in bodies[1] and "call_9" in bodies[1]
    assert "math_multiply" in bodies[0] and real_llm.SYSTEM in bodies[0]


def test_a_failed_turn_halts_with_its_kind(hypha: Hypha,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-example-key")
    with FakeLLM() as fake:
        fake.script(Reply.error(401))
        state = real_llm.run(hypha, "hi", base_url=fake.openai_url)
    assert (state["phase"], state["error"]) == ("failed", "authentication")
